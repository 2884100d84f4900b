// Interface discovery for the software NIC: getifaddrs for addresses,
// SIOCGIFMTU for MTUs, sysfs for speed and NUMA placement.
#include "transport/udp/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "util/cpu.h"

namespace uccl::transport::udp {
namespace {

uint32_t if_mtu(const std::string& name) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 0;
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  uint32_t mtu = 0;
  if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0) mtu = ifr.ifr_mtu;
  close(fd);
  return mtu;
}

uint64_t if_speed_mbps(const std::string& name) {
  std::ifstream f("/sys/class/net/" + name + "/speed");
  long long v = -1;
  if (f >> v && v > 0) return static_cast<uint64_t>(v);
  return 0;  // virtual devices (lo, veth) report -1 or nothing
}

}  // namespace

std::string ipv4_to_string(uint32_t ipv4_be) {
  char buf[INET_ADDRSTRLEN];
  in_addr a;
  a.s_addr = ipv4_be;
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

bool parse_ipv4(const std::string& text, uint32_t* ipv4_be) {
  in_addr a;
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  *ipv4_be = a.s_addr;
  return true;
}

std::vector<NetIf> list_netifs() {
  std::vector<NetIf> out;
  ifaddrs* ifa = nullptr;
  if (getifaddrs(&ifa) != 0) return out;
  for (ifaddrs* p = ifa; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_addr->sa_family != AF_INET) continue;
    if (!(p->ifa_flags & IFF_UP)) continue;
    NetIf n;
    n.name = p->ifa_name;
    n.ipv4_be = reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr.s_addr;
    n.up = (p->ifa_flags & IFF_RUNNING) != 0;
    n.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    n.mtu = if_mtu(n.name);
    n.speed_mbps = if_speed_mbps(n.name);
    n.numa_node = numa_node_of_netdev(n.name);
    n.pci_path = pci_path_of_netdev(n.name);
    out.push_back(n);
  }
  freeifaddrs(ifa);
  std::stable_sort(out.begin(), out.end(), [](const NetIf& a, const NetIf& b) {
    return a.loopback > b.loopback;
  });
  return out;
}

Result<NetIf> find_netif(const std::string& name_or_ip) {
  uint32_t ip = 0;
  bool is_ip = parse_ipv4(name_or_ip, &ip);
  std::string names;
  for (const NetIf& n : list_netifs()) {
    if ((is_ip && n.ipv4_be == ip) || (!is_ip && n.name == name_or_ip)) {
      return n;
    }
    names += (names.empty() ? "" : ", ") + n.name + " (" +
             ipv4_to_string(n.ipv4_be) + ")";
  }
  return NotFound("no UP IPv4 interface '" + name_or_ip +
                  "'; have: " + (names.empty() ? "none" : names));
}

Result<NetIf> route_to(uint32_t dst_ipv4_be) {
  // A destination on this host (any of its addresses) is reached through the
  // loopback interface, whatever interface owns the address.
  const std::vector<NetIf> all = list_netifs();
  for (const NetIf& n : all) {
    if (n.ipv4_be != dst_ipv4_be) continue;
    for (const NetIf& lo : all) {
      if (lo.loopback) return lo;
    }
    return n;
  }
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_in dst;
  std::memset(&dst, 0, sizeof(dst));
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);  // any port: connect() on UDP sends nothing
  dst.sin_addr.s_addr = dst_ipv4_be;
  sockaddr_in local;
  socklen_t len = sizeof(local);
  Status st;
  if (connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    st = ErrnoStatus("no route to " + ipv4_to_string(dst_ipv4_be), errno);
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    st = ErrnoStatus("getsockname", errno);
  }
  close(fd);
  if (!st.ok()) return st;
  return find_netif(ipv4_to_string(local.sin_addr.s_addr));
}

}  // namespace uccl::transport::udp
