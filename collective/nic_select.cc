// Device choice for the NCCL plugin: UCCL_NCCL_DEVICES or NCCL's
// NCCL_IB_HCA / NCCL_SOCKET_IFNAME / NCCL_IB_GID_INDEX, and PCIe ordering.
#include "collective/nic_select.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

namespace uccl::nccl {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 9 &&
         std::all_of(s.begin(), s.end(),
                     [](char ch) { return ch >= '0' && ch <= '9'; });
}

// "mlx5_0:1" -> ("mlx5_0", 1); a name without a port is port 1 (NCCL's
// IB transport's default).
void split_port(const std::string& spec, std::string* name, int* port) {
  const size_t colon = spec.find(':');
  *name = spec.substr(0, colon);
  *port = colon == std::string::npos ? 1 : std::atoi(spec.c_str() + colon + 1);
}

}  // namespace

Result<NameList> NameList::parse(const std::string& text) {
  NameList l;
  std::string s = text;
  if (!s.empty() && s[0] == '^') {
    l.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    l.exact = true;
    s.erase(0, 1);
  }
  if (s.empty()) return InvalidArgument("'" + text + "' names nothing");
  for (const std::string& raw : split(s, ',')) {
    Item it;
    const size_t colon = raw.find(':');
    it.name = raw.substr(0, colon);
    if (it.name.empty()) {
      return InvalidArgument("'" + text + "' has an empty name");
    }
    if (colon != std::string::npos) {
      const std::string port = raw.substr(colon + 1);
      if (!all_digits(port) || std::atoi(port.c_str()) < 1) {
        return InvalidArgument("'" + raw + "' in '" + text +
                               "': the port must be a positive number");
      }
      it.port = std::atoi(port.c_str());
    }
    l.items.push_back(it);
  }
  return l;
}

bool NameList::names(const std::string& name, int port) const {
  for (const Item& it : items) {
    const bool name_ok =
        exact ? name == it.name : name.compare(0, it.name.size(), it.name) == 0;
    if (name_ok && (it.port < 0 || it.port == port)) return true;
  }
  return false;
}

namespace {

// NCCL_IB_GID_INDEX for verbs endpoints, where UCCL's own knob is unset.
Status gid_params(const Getenv& env, DeviceChoice* c) {
  const char* ncc = env("NCCL_IB_GID_INDEX");
  if (ncc == nullptr || *ncc == '\0') return Status::OK();
  if (env("UCCL_IB_GID_INDEX") != nullptr) {
    c->why += "; UCCL_IB_GID_INDEX wins over NCCL_IB_GID_INDEX";
    return Status::OK();
  }
  if (!all_digits(ncc) || std::atoi(ncc) > 255) {
    return InvalidArgument(std::string("NCCL_IB_GID_INDEX=") + ncc +
                           ": expected a GID index, 0 to 255");
  }
  c->verbs_params = std::string("gid_index=") + ncc;
  c->why += std::string("; GID index ") + ncc + " (NCCL_IB_GID_INDEX)";
  return Status::OK();
}

// NCCL's variable `name` parsed, or nothing where unset or empty.
Status read_list(const Getenv& env, const char* name, bool* set,
                 NameList* out) {
  const char* v = env(name);
  *set = v != nullptr && *v != '\0';
  if (!*set) return Status::OK();
  auto l = NameList::parse(v);
  if (!l.ok()) return l.status().with_context(name);
  *out = *l;
  return Status::OK();
}

}  // namespace

Result<DeviceChoice> choose_devices(
    const std::vector<transport::DeviceInfo>& all,
    const std::string& uccl_devices, const Getenv& env) {
  DeviceChoice c;
  bool hca_set = false, if_set = false;
  NameList hca, ifs;
  UCCL_RETURN_IF_ERROR(read_list(env, "NCCL_IB_HCA", &hca_set, &hca));
  UCCL_RETURN_IF_ERROR(read_list(env, "NCCL_SOCKET_IFNAME", &if_set, &ifs));
  if (!uccl_devices.empty()) {
    for (const std::string& n : split(uccl_devices, ',')) {
      if (!n.empty()) c.names.push_back(n);
    }
    c.why = "UCCL_NCCL_DEVICES";
    if (hca_set || if_set) {
      c.why += " (wins over NCCL_IB_HCA / NCCL_SOCKET_IFNAME)";
    }
    UCCL_RETURN_IF_ERROR(gid_params(env, &c));
    return c;
  }
  std::string have;
  int verbs_seen = 0;
  for (const auto& d : all) {
    if (d.backend != "verbs" || !d.active) continue;
    ++verbs_seen;
    std::string base;
    int port;
    split_port(d.name, &base, &port);
    if (!hca_set || hca.keeps(base, port)) c.names.push_back(d.name);
  }
  for (const auto& d : all) {
    if (d.backend != "udp" || d.netdev.empty()) continue;
    have += (have.empty() ? "" : ", ") + d.netdev;
    const bool keep =
        if_set ? ifs.keeps(d.netdev, -1)
               : d.netdev != "lo" && d.netdev.compare(0, 6, "docker") != 0;
    if (keep) c.names.push_back(d.name);
  }
  c.why = std::string(hca_set ? "NCCL_IB_HCA" : "active verbs devices") + ", " +
          (if_set ? "NCCL_SOCKET_IFNAME"
                  : "software-NIC interfaces but lo and docker*");
  if (c.names.empty()) {
    if (if_set || (hca_set && verbs_seen > 0)) {
      return InvalidArgument(
          std::string(if_set ? "NCCL_SOCKET_IFNAME" : "NCCL_IB_HCA") +
          " keeps no device (interfaces: " + have + ")");
    }
    c.names.push_back("udp:lo");
    c.why = "lo: no other interface";
  }
  UCCL_RETURN_IF_ERROR(gid_params(env, &c));
  return c;
}

int pcie_distance(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return -1;
  const std::vector<std::string> x = split(a, '/'), y = split(b, '/');
  size_t common = 0;
  while (common < x.size() && common < y.size() && x[common] == y[common]) {
    ++common;
  }
  // Below /sys/devices/pciDDDD:BB, the root complex, at least.
  bool root = false;
  for (size_t i = 0; i < common; ++i) {
    root = root || x[i].compare(0, 3, "pci") == 0;
  }
  if (!root) return -1;
  return static_cast<int>((x.size() - common) + (y.size() - common));
}

void order_by_distance(const std::vector<transport::DeviceInfo>& all,
                       const std::string& gpu_path,
                       std::vector<std::string>* names) {
  if (gpu_path.empty()) return;
  auto distance = [&](const std::string& n) {
    for (const auto& d : all) {
      if (d.name != n) continue;
      const int h = pcie_distance(gpu_path, d.pci_path);
      return h < 0 ? INT_MAX : h;
    }
    return INT_MAX;
  };
  std::stable_sort(names->begin(), names->end(),
                   [&](const std::string& p, const std::string& q) {
                     return distance(p) < distance(q);
                   });
}

}  // namespace uccl::nccl
