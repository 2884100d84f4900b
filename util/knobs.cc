// Knob registry and parsers: every UCCL_KNOB registers here so list_knobs()
// and check_knobs() can report all runtime settings of this binary.
#include "util/knobs.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

extern char** environ;

namespace uccl {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const KnobBase*> knobs;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: knobs are static
  return *r;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

KnobBase::KnobBase(const char* name, const char* help)
    : name_(name), help_(help) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.knobs.push_back(this);
}

bool knob_env(const char* name, std::string* out) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  *out = v;
  return true;
}

bool parse_knob_value(const std::string& text, bool* out) {
  std::string t = lower(trim(text));
  if (t == "1" || t == "true" || t == "yes" || t == "on") {
    *out = true;
    return true;
  }
  if (t == "0" || t == "false" || t == "no" || t == "off") {
    *out = false;
    return true;
  }
  return false;
}

bool parse_knob_value(const std::string& text, int64_t* out) {
  std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(t.c_str(), &end, 0);  // accepts 0x.. too
  if (errno != 0 || end == nullptr || *end != '\0') return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool parse_knob_value(const std::string& text, double* out) {
  std::string t = trim(text);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(v)) {
    return false;
  }
  *out = v;
  return true;
}

bool parse_knob_value(const std::string& text, std::string* out) {
  *out = text;
  return true;
}

std::string knob_value_to_string(bool v) { return v ? "true" : "false"; }
std::string knob_value_to_string(int64_t v) { return std::to_string(v); }
std::string knob_value_to_string(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}
std::string knob_value_to_string(const std::string& v) { return v; }
const char* knob_type_name(bool*) { return "bool"; }
const char* knob_type_name(int64_t*) { return "int"; }
const char* knob_type_name(double*) { return "double"; }
const char* knob_type_name(std::string*) { return "string"; }

std::vector<KnobInfo> list_knobs() {
  std::vector<KnobInfo> out;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const KnobBase* k : r.knobs) out.push_back(k->info());
  }
  std::sort(out.begin(), out.end(), [](const KnobInfo& a, const KnobInfo& b) {
    return a.name < b.name;
  });
  return out;
}

std::string describe_knobs() {
  std::ostringstream os;
  for (const KnobInfo& k : list_knobs()) {
    os << k.name << "=" << k.value;
    if (k.from_env) os << " (from environment)";
    os << "  [" << k.type << ", default " << k.default_value << "]\n";
    os << "    " << k.help << "\n";
    if (!k.error.empty()) os << "    ERROR: " << k.error << "\n";
  }
  return os.str();
}

std::vector<std::string> unknown_uccl_env_vars() {
  std::vector<std::string> known = knob_catalog();
  for (const KnobInfo& k : list_knobs()) known.push_back(k.name);
  std::vector<std::string> unknown;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* kv = *e;
    if (std::strncmp(kv, "UCCL_", 5) != 0) continue;
    const char* eq = std::strchr(kv, '=');
    std::string name = eq ? std::string(kv, eq - kv) : std::string(kv);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      unknown.push_back(name);
    }
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

Status check_knobs() {
  std::string errors;
  for (const KnobInfo& k : list_knobs()) {
    if (k.error.empty()) continue;
    if (!errors.empty()) errors += "; ";
    errors += k.name + ": " + k.error;
  }
  if (errors.empty()) return Status::OK();
  return InvalidArgument("invalid UCCL_* environment settings: " + errors);
}

}  // namespace uccl
