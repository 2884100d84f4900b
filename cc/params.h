// Congestion-control parameters from configuration text ("key=value,..."):
// typed lookups with defaults, and a check that every given key was used.
#pragma once

#include <map>
#include <set>
#include <string>

#include "uccl/status.h"

namespace uccl::cc {

class CcParams {
 public:
  CcParams() = default;
  // "t_low_us=50,beta=0.8" (spaces and empty items ignored).
  static Result<CcParams> parse(const std::string& text);

  void set(const std::string& key, double value) { values_[key] = value; }
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // The value of `key`, or `def`; records that `key` is known.
  double get(const std::string& key, double def) const;
  // InvalidArgument naming keys that no get() asked for (typos).
  Status check_all_used(const std::string& cc_name) const;
  std::string to_string() const;

 private:
  std::map<std::string, double> values_;
  mutable std::set<std::string> used_;
};

}  // namespace uccl::cc
