// The knob catalog (util/knob_catalog.cc) names exactly the knobs the
// sources define, so no binary takes a real knob for a typo, and
// uccl_devinfo --knobs can be checked against it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "util/knobs.h"

namespace uccl {
namespace {

// Every UCCL_KNOB(type, fn, "UCCL_NAME", ...) in the library and tool
// sources (tests define knobs of their own, which are not UCCL's).
std::set<std::string> defined_knobs() {
  namespace fs = std::filesystem;
  const std::regex def(
      R"(UCCL_KNOB\(\s*[\w:]+\s*,\s*\w+\s*,\s*\"(UCCL_\w+)\")");
  std::set<std::string> names;
  for (const char* dir : {"util", "transport", "cc", "engine", "collective",
                          "profiler", "tools", "p2p", "channels"}) {
    const fs::path root = fs::path(UCCL_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cc" && ext != ".h" && ext != ".cu") continue;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      for (std::sregex_iterator it(text.begin(), text.end(), def), end;
           it != end; ++it) {
        names.insert((*it)[1]);
      }
    }
  }
  return names;
}

TEST(KnobCatalog, NamesExactlyTheKnobsTheSourcesDefine) {
  const std::set<std::string> defined = defined_knobs();
  ASSERT_GT(defined.size(), 40u) << "source scan found too few knobs";
  const std::set<std::string> catalog(knob_catalog().begin(),
                                      knob_catalog().end());
  for (const std::string& n : defined) {
    EXPECT_TRUE(catalog.count(n)) << n << " is defined but not in the catalog";
  }
  for (const std::string& n : catalog) {
    EXPECT_TRUE(defined.count(n)) << n << " is in the catalog, defined nowhere";
  }
  EXPECT_EQ(catalog.size(), knob_catalog().size()) << "duplicates";
}

}  // namespace
}  // namespace uccl
