// The engine layer's configuration, resolved once: the caller's
// EndpointConfig, defaults from the UCCL_* knobs, validated, as plain structs.
#pragma once

#include <string>

#include "engine/engine.h"
#include "transport/nic.h"
#include "uccl/endpoint.h"

namespace uccl::engine {

// What Endpoint::create builds an endpoint from. Every knob of this layer
// is read here (endpoint_config.cc) and nowhere else; the engines and the
// device get their settings in these structs.
struct ResolvedConfig {
  EndpointConfig cfg;   // the caller's, defaults filled in from the knobs
  EngineConfig engine;  // every engine's (index and core are set per engine)
  transport::DeviceOptions dev;
  double link_gbps = 0;  // the line rate CC assumes; 0: the device's
};

// Fills in and checks `in`; a bad value is an InvalidArgument naming it.
Result<ResolvedConfig> resolve_config(const EndpointConfig& in);

// UCCL_CORE_LOCK_DIR: where processes claim engine cores ("" disables).
std::string core_lock_dir();

}  // namespace uccl::engine
