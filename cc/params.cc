// CcParams: parsing "key=value" lists and catching unused (misspelled) keys.
#include "cc/params.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "util/strings.h"

namespace uccl::cc {

Result<CcParams> CcParams::parse(const std::string& text) {
  CcParams p;
  for (const std::string& item : split_list(text, ',')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("cc parameter '" + item + "' is not key=value");
    }
    std::string key = item.substr(0, eq);
    std::string val = item.substr(eq + 1);
    char* end = nullptr;
    double v = std::strtod(val.c_str(), &end);
    if (val.empty() || *end != '\0' || !std::isfinite(v)) {
      return InvalidArgument("cc parameter " + key + ": '" + val +
                             "' is not a number");
    }
    p.values_[key] = v;
  }
  return p;
}

double CcParams::get(const std::string& key, double def) const {
  used_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? def : it->second;
}

Status CcParams::check_all_used(const std::string& cc_name) const {
  std::string unknown;
  for (const auto& [k, v] : values_) {
    if (!used_.count(k)) unknown += (unknown.empty() ? "" : ", ") + k;
  }
  if (unknown.empty()) return Status::OK();
  return InvalidArgument("unknown parameter(s) for cc '" + cc_name +
                         "': " + unknown);
}

std::string CcParams::to_string() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [k, v] : values_) {
    os << (first ? "" : ",") << k << "=" << v;
    first = false;
  }
  return os.str();
}

}  // namespace uccl::cc
