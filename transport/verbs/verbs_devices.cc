// Verbs device discovery and opening over the dlopen'd libibverbs: the
// device list with its properties, port and GID selection.
#include <cerrno>
#include <cstring>
#include <fstream>

#include "transport/verbs/verbs_nic.h"  // declares what this file defines
#include "transport/verbs/verbs_util.h"
#include "util/knobs.h"

namespace uccl::transport::verbs {

UCCL_KNOB(int64_t, knob_ib_gid_index, "UCCL_IB_GID_INDEX", -1,
          "RoCE GID index for verbs devices (-1 = prefer RoCE v2 with an "
          "IPv4 address, like NCCL_IB_GID_INDEX).",
          -1, 255);

namespace {

uint64_t port_speed_mbps(const ibv_port_attr& a) {
  int lanes;
  switch (a.active_width) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      lanes = 1;
      break;
  }
  uint64_t per_lane;
  switch (a.active_speed) {
    case 1:
      per_lane = 2500;
      break;
    case 2:
      per_lane = 5000;
      break;
    case 4:
      per_lane = 10000;
      break;
    case 8:
      per_lane = 10000;
      break;
    case 16:
      per_lane = 14000;
      break;
    case 32:
      per_lane = 25000;
      break;
    case 64:
      per_lane = 50000;
      break;
    case 128:
      per_lane = 100000;
      break;
    default:
      per_lane = 200000;
      break;  // XDR and newer
  }
  return lanes * per_lane;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::vector<GidEntry> read_gid_table(const IbvApi* api, ibv_context* ctx,
                                     const std::string& dev, uint8_t port,
                                     int len) {
  std::vector<GidEntry> out;
  for (int i = 0; i < len && i < 256; ++i) {
    ibv_gid g;
    if (api->query_gid(ctx, port, i, &g) != 0) continue;
    GidEntry e;
    e.index = i;
    std::memcpy(e.gid, g.raw, 16);
    e.type = read_line("/sys/class/infiniband/" + dev + "/ports/" +
                       std::to_string(port) + "/gid_attrs/types/" +
                       std::to_string(i));
    out.push_back(e);
  }
  return out;
}

}  // namespace

std::vector<DeviceInfo> list_verbs_devices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  std::string why;
  const IbvApi* api = ibv_api(&why);
  if (api == nullptr) {
    if (why_none) *why_none = why;
    return out;
  }
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (why_none) {
      *why_none = "no RDMA devices (/sys/class/infiniband is empty or absent)";
    }
    if (list) api->free_device_list(list);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    // RoCEv2 WRITE: Ethernet 18 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 +
    // ICRC 4 (InfiniBand's LRH/GRH headers are of the same order).
    d.wire_overhead_bytes = 78;
    d.name = api->get_device_name(list[i]);
    d.backend = "verbs";
    d.guid = be64toh(api->get_device_guid(list[i]));
    std::string sys = "/sys/class/infiniband/" + d.name + "/device";
    std::string node = read_line(sys + "/numa_node");
    d.numa_node = node.empty() ? -1 : std::atoi(node.c_str());
    char* real = realpath(sys.c_str(), nullptr);
    if (real) {
      d.pci_path = real;
      free(real);
    }
    if (ibv_context* ctx = api->open_device(list[i])) {
      ibv_port_attr pa;
      if (api->query_port(ctx, 1, &pa) == 0) {
        d.active = pa.state == IBV_PORT_ACTIVE;
        d.mtu_bytes = mtu_enum_to_bytes(pa.active_mtu);
        d.link_speed_mbps = port_speed_mbps(pa);
        d.link_speed_known = d.link_speed_mbps != 0;
      }
      api->close_device(ctx);
    }
    out.push_back(d);
  }
  api->free_device_list(list);
  return out;
}

Result<std::unique_ptr<Device>> open_verbs_device(const std::string& spec,
                                                  const DeviceOptions& opts) {
  UCCL_ASSIGN_OR_RETURN(VerbsParams params,
                        VerbsParams::parse(opts.backend_params));
  std::string why;
  const IbvApi* api = ibv_api(&why);
  if (api == nullptr) return NotFound("verbs device " + spec + ": " + why);
  std::string name = spec;
  uint8_t port = 1;
  if (size_t colon = spec.find(':'); colon != std::string::npos) {
    name = spec.substr(0, colon);
    port = static_cast<uint8_t>(std::atoi(spec.c_str() + colon + 1));
  }
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; list && i < n; ++i) {
    if (name == api->get_device_name(list[i])) dev = list[i];
  }
  if (dev == nullptr) {
    if (list) api->free_device_list(list);
    return NotFound("no RDMA device named '" + name + "'");
  }
  ibv_context* ctx = api->open_device(dev);
  std::vector<DeviceInfo> infos = list_verbs_devices(nullptr);
  api->free_device_list(list);
  if (ctx == nullptr) return verbs_errno("ibv_open_device " + name);
  ibv_port_attr pa;
  if (api->query_port(ctx, port, &pa) != 0) {
    api->close_device(ctx);
    return verbs_errno("ibv_query_port " + name);
  }
  int gid_index = 0;
  if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
    gid_index = choose_gid_index(
        read_gid_table(api, ctx, name, port, pa.gid_tbl_len),
        params.gid_index >= 0 ? params.gid_index
                              : static_cast<int>(knob_ib_gid_index().get()));
    if (gid_index < 0) {
      api->close_device(ctx);
      return NotFound(name +
                      ": no usable RoCE GID (is an IP address "
                      "configured on its netdev?)");
    }
  }
  DeviceInfo info;
  for (const DeviceInfo& d : infos) {
    if (d.name == name) info = d;
  }
  info.name = spec;
  return std::unique_ptr<Device>(
      new VerbsDevice(api, ctx, port, info, pa, gid_index, opts));
}

}  // namespace uccl::transport::verbs
