// Public view of UCCL's runtime knobs (UCCL_* environment variables): list
// every knob with its default and effective value, and validate them.
#pragma once

#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl {

struct KnobInfo {
  std::string name;           // environment variable, e.g. "UCCL_CHUNK_KB"
  std::string type;           // "bool", "int", "double" or "string"
  std::string default_value;  // as text
  std::string value;          // effective value, as text
  bool from_env = false;      // true when the environment set it
  std::string error;          // why the environment's value was refused
  std::string help;           // what it does, with units
};

// Every knob linked into this binary, sorted by name.
std::vector<KnobInfo> list_knobs();

// A human-readable table of list_knobs() (name, value, default, help).
std::string describe_knobs();

// UCCL_* variables in the environment that are no knob of any UCCL layer
// (likely typos); knobs of layers this binary does not link are known too.
std::vector<std::string> unknown_uccl_env_vars();

// OK, or InvalidArgument naming every knob whose environment value could not
// be parsed or was out of range (those knobs fall back to their defaults).
Status check_knobs();

}  // namespace uccl
