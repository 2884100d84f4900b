// The NIC backends this build has, by device name: listing and opening.
// The one place that knows every backend (transport/registry.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/nic.h"

namespace uccl::transport {

// Every device of every backend that this machine has (the null NIC is
// opened by name only and not listed).
std::vector<DeviceInfo> list_devices();
// Why the verbs backend lists no devices ("" when it lists some).
std::string verbs_unavailable_reason();

// Opens by name: "mlx5_0" / "rxe0" (verbs), "udp" (any interface),
// "udp:<ifname>" or "udp:<ipv4>" (software NIC), "null" (in-process NIC
// that moves no payload, for measuring the engine's CPU cost: null/).
Result<std::unique_ptr<Device>> open_device(const std::string& name,
                                            const DeviceOptions& opts = {});

}  // namespace uccl::transport
