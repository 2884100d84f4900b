// Kernel network interfaces the software NIC can run on: enumeration
// (getifaddrs), MTU and link speed, and the path MTU towards a peer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl::transport::udp {

struct NetIf {
  std::string name;         // "lo", "eth0"
  uint32_t ipv4_be = 0;     // network byte order
  uint32_t mtu = 0;         // interface MTU (bytes of IP packet)
  uint64_t speed_mbps = 0;  // from sysfs; 0 when the kernel does not say
  bool up = false;
  bool loopback = false;
  int numa_node = -1;
  std::string pci_path;
};

// UP interfaces with an IPv4 address, loopback first.
std::vector<NetIf> list_netifs();
// By interface name or dotted IPv4 address.
Result<NetIf> find_netif(const std::string& name_or_ip);
// Interface the kernel would use to reach `dst_ipv4_be` (via a UDP connect).
Result<NetIf> route_to(uint32_t dst_ipv4_be);

std::string ipv4_to_string(uint32_t ipv4_be);
bool parse_ipv4(const std::string& text, uint32_t* ipv4_be);

}  // namespace uccl::transport::udp
