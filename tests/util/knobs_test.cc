// Tests for UCCL_* knobs: parsing, defaults, bounds, read-once semantics, the
// registry listing, validation errors and detection of unknown variables.
#include "util/knobs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>

namespace uccl {
namespace {

UCCL_KNOB(int64_t, test_int_knob, "UCCL_TEST_INT", 42,
          "integer knob for tests (units: widgets)", 0, 100);
UCCL_KNOB(bool, test_bool_knob, "UCCL_TEST_BOOL", false, "bool knob");
UCCL_KNOB(double, test_double_knob, "UCCL_TEST_DOUBLE", 0.5, "double knob");
UCCL_KNOB(std::string, test_string_knob, "UCCL_TEST_STRING", "udp",
          "string knob");
constexpr const char* kTestChoices[] = {"red", "green", nullptr};
UCCL_KNOB(std::string, test_choice_knob, "UCCL_TEST_CHOICE", "red",
          "string knob with choices", kTestChoices);

class KnobsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* n :
         {"UCCL_TEST_INT", "UCCL_TEST_BOOL", "UCCL_TEST_DOUBLE",
          "UCCL_TEST_STRING", "UCCL_TEST_CHOICE", "UCCL_TEST_TYPO"}) {
      unsetenv(n);
    }
    test_int_knob().reload_for_testing();
    test_bool_knob().reload_for_testing();
    test_double_knob().reload_for_testing();
    test_string_knob().reload_for_testing();
    test_choice_knob().reload_for_testing();
  }
};

TEST_F(KnobsTest, StringChoicesAcceptListedValuesOnly) {
  setenv("UCCL_TEST_CHOICE", "green", 1);
  test_choice_knob().reload_for_testing();
  EXPECT_EQ(test_choice_knob().get(), "green");
  EXPECT_TRUE(check_knobs().ok());
  setenv("UCCL_TEST_CHOICE", "blue", 1);
  test_choice_knob().reload_for_testing();
  EXPECT_EQ(test_choice_knob().get(), "red") << "default kept";
  Status s = check_knobs();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("UCCL_TEST_CHOICE: 'blue' is not one of: red, green"),
      std::string::npos)
      << s;
}

TEST_F(KnobsTest, Parsers) {
  bool b;
  EXPECT_TRUE(parse_knob_value("YES", &b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(parse_knob_value(" off ", &b));
  EXPECT_FALSE(b);
  EXPECT_FALSE(parse_knob_value("maybe", &b));
  int64_t i;
  EXPECT_TRUE(parse_knob_value("0x10", &i));
  EXPECT_EQ(i, 16);
  EXPECT_TRUE(parse_knob_value("-7", &i));
  EXPECT_EQ(i, -7);
  EXPECT_FALSE(parse_knob_value("12abc", &i));
  EXPECT_FALSE(parse_knob_value("", &i));
  EXPECT_FALSE(parse_knob_value("99999999999999999999999", &i));
  double d;
  EXPECT_TRUE(parse_knob_value("1e-3", &d));
  EXPECT_DOUBLE_EQ(d, 1e-3);
  EXPECT_FALSE(parse_knob_value("nan", &d));
  EXPECT_FALSE(parse_knob_value("1.0x", &d));
}

TEST_F(KnobsTest, DefaultsWhenUnset) {
  EXPECT_EQ(test_int_knob().get(), 42);
  EXPECT_FALSE(test_bool_knob().get());
  EXPECT_DOUBLE_EQ(test_double_knob().get(), 0.5);
  EXPECT_EQ(test_string_knob().get(), "udp");
}

TEST_F(KnobsTest, ReadsEnvironmentOnceOnly) {
  setenv("UCCL_TEST_INT", "7", 1);
  EXPECT_EQ(test_int_knob().get(), 42) << "value must not change after load";
  test_int_knob().reload_for_testing();
  EXPECT_EQ(test_int_knob().get(), 7);
  KnobInfo info = test_int_knob().info();
  EXPECT_TRUE(info.from_env);
  EXPECT_EQ(info.value, "7");
  EXPECT_EQ(info.default_value, "42");
  EXPECT_TRUE(check_knobs().ok());
}

TEST_F(KnobsTest, BadValuesFallBackAndAreReported) {
  setenv("UCCL_TEST_INT", "500", 1);  // above max 100
  setenv("UCCL_TEST_BOOL", "perhaps", 1);
  test_int_knob().reload_for_testing();
  test_bool_knob().reload_for_testing();
  EXPECT_EQ(test_int_knob().get(), 42);
  EXPECT_FALSE(test_bool_knob().get());
  Status s = check_knobs();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("UCCL_TEST_INT: value 500 outside [0, 100]"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("UCCL_TEST_BOOL: cannot parse 'perhaps' as bool"),
            std::string::npos)
      << s;
}

TEST_F(KnobsTest, ListingContainsEveryKnobSorted) {
  std::vector<KnobInfo> all = list_knobs();
  auto has = [&](const std::string& n) {
    return std::any_of(all.begin(), all.end(),
                       [&](const KnobInfo& k) { return k.name == n; });
  };
  EXPECT_TRUE(has("UCCL_TEST_INT"));
  EXPECT_TRUE(has("UCCL_TEST_STRING"));
  EXPECT_TRUE(std::is_sorted(
      all.begin(), all.end(),
      [](const KnobInfo& a, const KnobInfo& b) { return a.name < b.name; }));
  std::string text = describe_knobs();
  EXPECT_NE(text.find("UCCL_TEST_INT=42"), std::string::npos);
  EXPECT_NE(text.find("integer knob for tests (units: widgets)"),
            std::string::npos);
}

TEST_F(KnobsTest, UnknownVariablesAreDetected) {
  setenv("UCCL_TEST_TYPO", "1", 1);
  std::vector<std::string> unknown = unknown_uccl_env_vars();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "UCCL_TEST_TYPO"),
            unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "UCCL_TEST_INT"),
            unknown.end());
}

TEST_F(KnobsTest, SetForTesting) {
  test_string_knob().set_for_testing("udp:lo");
  EXPECT_EQ(test_string_knob().get(), "udp:lo");
}

}  // namespace
}  // namespace uccl
