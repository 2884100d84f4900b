// The software NIC's entries in the backend registry: which device names it
// takes, the interfaces it lists, and its own options (backend_params).
#include <algorithm>

#include "transport/udp/soft_nic.h"
#include "util/knobs.h"
#include "util/strings.h"

namespace uccl::transport::udp {

bool is_soft_device_name(const std::string& name) {
  return name == "udp" || name.rfind("udp:", 0) == 0;
}

std::vector<DeviceInfo> list_soft_devices() {
  std::vector<DeviceInfo> out;
  for (const NetIf& n : list_netifs()) {
    DeviceInfo d;
    d.name = "udp:" + n.name;
    d.backend = "udp";
    d.netdev = n.name;
    d.ip = ipv4_to_string(n.ipv4_be);
    d.link_speed_mbps = n.speed_mbps ? n.speed_mbps : 100000;
    d.link_speed_known = n.speed_mbps != 0;
    d.mtu_bytes = std::min<uint32_t>(n.mtu > 92 ? (n.mtu - 92) & ~63u : 256,
                                     kMaxFragmentPayload & ~63u);
    d.numa_node = n.numa_node;
    d.pci_path = n.pci_path;
    d.active = n.up;
    out.push_back(d);
  }
  return out;
}

Result<std::unique_ptr<Device>> open_soft_device(const std::string& name,
                                                 const DeviceOptions& opts) {
  NetIf nif;
  if (name == "udp" || name == "udp:*") {
    // Every interface; QPs learn their path MTU from the route at connect.
    nif.name = "*";
    nif.ipv4_be = 0;
    for (const NetIf& n : list_netifs()) nif.mtu = std::max(nif.mtu, n.mtu);
  } else {
    UCCL_ASSIGN_OR_RETURN(nif, find_netif(name.substr(4)));
  }
  UCCL_ASSIGN_OR_RETURN(auto dev, SoftDevice::open(nif, name, opts));
  return std::unique_ptr<Device>(std::move(dev));
}

Result<SoftNicParams> SoftNicParams::parse(const std::string& text) {
  SoftNicParams p;
  for (const std::string& item : split_list(text, ',')) {
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    int64_t v = 0;
    bool b = false;
    if (key == "direct_rx_bytes" && parse_knob_value(val, &v) && v >= 0) {
      p.direct_rx_bytes = v;
    } else if (key == "local_crc" && parse_knob_value(val, &b)) {
      p.local_crc = b;
    } else if (key == "splice" && parse_knob_value(val, &b)) {
      p.splice = b;
    } else if (key == "priority_rx" && parse_knob_value(val, &b)) {
      p.priority_rx = b;
    } else if (key == "gso" && parse_knob_value(val, &b)) {
      p.gso = b;
    } else if (key == "gro" && parse_knob_value(val, &b)) {
      p.gro = b;
    } else if (key == "ttl" && parse_knob_value(val, &v) && v >= 1 &&
               v <= 255) {
      p.ttl = static_cast<int>(v);
    } else {
      return InvalidArgument(
          "software NIC option '" + item +
          "': expected direct_rx_bytes=<bytes>, "
          "local_crc=0|1, splice=0|1, priority_rx=0|1, gso=0|1, gro=0|1 "
          "or ttl=1..255");
    }
  }
  return p;
}

}  // namespace uccl::transport::udp
