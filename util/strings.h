// Small text helpers for configuration parsing: trimming and splitting
// lists such as "a, b,c" (cc_params, backend_params, core lists, --set).
#pragma once

#include <string>
#include <vector>

namespace uccl {

// `s` without leading and trailing spaces, tabs and line ends.
std::string trim(const std::string& s);
// The items of `s` separated by `sep`, each trimmed; empty items dropped.
std::vector<std::string> split_list(const std::string& s, char sep);

}  // namespace uccl
