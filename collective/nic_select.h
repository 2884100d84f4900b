// Which devices the NCCL plugin offers: UCCL_NCCL_DEVICES, else NCCL's own
// NIC-selection variables read as NCCL's Socket and IB transports read them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "transport/nic.h"
#include "uccl/status.h"

namespace uccl::nccl {

// NCCL's list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): comma-separated
// names, each a prefix unless the list starts with '=' (exact names); a
// leading '^' (before any '=') makes it a list of names to leave out. An
// item may end in ":<port>" (NCCL_IB_HCA), which then must match too.
struct NameList {
  bool exclude = false;
  bool exact = false;
  struct Item {
    std::string name;
    int port = -1;  // -1: any
  };
  std::vector<Item> items;

  // InvalidArgument (naming the bad item) for an empty list or item, or a
  // port that is not a positive number.
  static Result<NameList> parse(const std::string& text);
  // Whether some item names `name` (and `port`, where the item gives one).
  bool names(const std::string& name, int port) const;
  // Whether the list lets the device through.
  bool keeps(const std::string& name, int port) const {
    return names(name, port) != exclude;
  }
};

struct DeviceChoice {
  std::vector<std::string> names;  // UCCL device strings, in order
  std::string why;                 // for the log: what chose them
  // Options for endpoints on verbs devices ("gid_index=N", from
  // NCCL_IB_GID_INDEX where UCCL_IB_GID_INDEX is unset), else "".
  std::string verbs_params;
};

using Getenv = std::function<const char*(const char*)>;

// The devices to offer. `uccl_devices` (UCCL_NCCL_DEVICES) wins where set;
// else active verbs devices that NCCL_IB_HCA keeps (all without it), then
// software-NIC interfaces that NCCL_SOCKET_IFNAME keeps (without it, as
// NCCL: all but lo and docker*), then lo alone where nothing else is left
// and NCCL_SOCKET_IFNAME is unset. InvalidArgument for a malformed
// variable, or for NCCL_SOCKET_IFNAME / NCCL_IB_HCA that keep nothing while
// no other device is left.
Result<DeviceChoice> choose_devices(
    const std::vector<transport::DeviceInfo>& all,
    const std::string& uccl_devices, const Getenv& env);

// PCIe hops between two sysfs device paths (/sys/devices/pci0000:00/...):
// the components each has below their common prefix, added up; -1 where
// either is unknown (empty) or they share no PCI root.
int pcie_distance(const std::string& a, const std::string& b);

// Orders `names` (stable) by PCIe distance from `gpu_path` to each device's
// pci_path in `all`; devices with no known distance go last. Unchanged
// where gpu_path is empty.
void order_by_distance(const std::vector<transport::DeviceInfo>& all,
                       const std::string& gpu_path,
                       std::vector<std::string>* names);

}  // namespace uccl::nccl
