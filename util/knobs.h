// Typed UCCL_* environment knobs, read once with defaults and bounds, and
// registered so tools can list them. Define one with UCCL_KNOB in a .cc file.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "uccl/params.h"

namespace uccl {

class KnobBase {
 public:
  KnobBase(const char* name, const char* help);
  virtual ~KnobBase() = default;
  KnobBase(const KnobBase&) = delete;
  KnobBase& operator=(const KnobBase&) = delete;

  const char* name() const { return name_; }
  virtual KnobInfo info() const = 0;

 protected:
  const char* name_;
  const char* help_;
};

// The names of all UCCL_* knobs of every layer, linked into this binary or
// not (util/knob_catalog.cc), so no binary takes a real knob for a typo.
const std::vector<std::string>& knob_catalog();

// Parsers shared by all knobs; exposed for tests. Return false on bad text.
bool parse_knob_value(const std::string& text, bool* out);
bool parse_knob_value(const std::string& text, int64_t* out);
bool parse_knob_value(const std::string& text, double* out);
bool parse_knob_value(const std::string& text, std::string* out);

template <typename T>
class Knob final : public KnobBase {
  static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int64_t> ||
                    std::is_same_v<T, double> || std::is_same_v<T, std::string>,
                "knobs are bool, int64_t, double or std::string");

 public:
  Knob(const char* name, T default_value, const char* help)
      : KnobBase(name, help), default_(default_value), bounded_(false) {
    load();
  }
  // Numeric knobs may be bounded: values outside [min, max] are refused.
  Knob(const char* name, T default_value, const char* help, T min_value,
       T max_value)
      : KnobBase(name, help),
        default_(default_value),
        min_(min_value),
        max_(max_value),
        bounded_(true) {
    load();
  }

  // A string knob may list its valid values (nullptr-terminated); any other
  // value is refused, like a number out of bounds.
  Knob(const char* name, T default_value, const char* help,
       const char* const* choices)
      : KnobBase(name, help),
        default_(default_value),
        bounded_(false),
        choices_(choices) {
    static_assert(std::is_same_v<T, std::string>, "choices are for strings");
    load();
  }

  // The value: the environment's if set and valid, else the default.
  const T& get() const { return value_; }

  KnobInfo info() const override;

  // Test hooks: override the value, or re-read the environment.
  void set_for_testing(T v) { value_ = std::move(v); }
  void reload_for_testing() { load(); }

 private:
  void load();

  T default_;
  T min_{}, max_{};
  bool bounded_;
  const char* const* choices_ = nullptr;
  T value_;
  bool from_env_ = false;
  std::string error_;
};

std::string knob_value_to_string(bool v);
std::string knob_value_to_string(int64_t v);
std::string knob_value_to_string(double v);
std::string knob_value_to_string(const std::string& v);
const char* knob_type_name(bool*);
const char* knob_type_name(int64_t*);
const char* knob_type_name(double*);
const char* knob_type_name(std::string*);
// Reads getenv(name); returns false when unset.
bool knob_env(const char* name, std::string* out);

template <typename T>
void Knob<T>::load() {
  value_ = default_;
  from_env_ = false;
  error_.clear();
  std::string text;
  if (!knob_env(name_, &text)) return;
  from_env_ = true;
  T parsed{};
  if (!parse_knob_value(text, &parsed)) {
    error_ = "cannot parse '" + text + "' as " +
             knob_type_name(static_cast<T*>(nullptr));
    return;
  }
  if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
    if (bounded_ && (parsed < min_ || parsed > max_)) {
      error_ = "value " + knob_value_to_string(parsed) + " outside [" +
               knob_value_to_string(min_) + ", " + knob_value_to_string(max_) +
               "]";
      return;
    }
  }
  if constexpr (std::is_same_v<T, std::string>) {
    if (choices_ != nullptr) {
      bool ok = false;
      std::string list;
      for (const char* const* c = choices_; *c != nullptr; ++c) {
        ok = ok || parsed == *c;
        list += (list.empty() ? "" : ", ") + std::string(*c);
      }
      if (!ok) {
        error_ = "'" + parsed + "' is not one of: " + list;
        return;
      }
    }
  }
  value_ = parsed;
}

template <typename T>
KnobInfo Knob<T>::info() const {
  KnobInfo i;
  i.name = name_;
  i.type = knob_type_name(static_cast<T*>(nullptr));
  i.default_value = knob_value_to_string(default_);
  i.value = knob_value_to_string(value_);
  i.from_env = from_env_;
  i.error = error_;
  i.help = help_;
  return i;
}

}  // namespace uccl

// Defines `Knob<type>& fn()` returning the knob for environment variable
// `env`, constructed (and the environment read) on first use or at static
// initialisation, whichever comes first. Optional trailing args: min, max.
#define UCCL_KNOB(type, fn, env, default_value, help, ...)                   \
  ::uccl::Knob<type>& fn() {                                                 \
    static ::uccl::Knob<type> knob(env, default_value, help, ##__VA_ARGS__); \
    return knob;                                                             \
  }                                                                          \
  [[maybe_unused]] static const bool fn##_registered_ = (fn(), true)

// Declares a knob defined elsewhere with UCCL_KNOB.
#define UCCL_DECLARE_KNOB(type, fn) ::uccl::Knob<type>& fn()
