// Pure helpers of the verbs backend, unit-tested without an RDMA NIC: GID
// selection, QP attribute building, status and MTU mappings.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "transport/nic.h"

namespace uccl::transport::verbs {

struct GidEntry {
  int index = 0;
  uint8_t gid[16] = {};
  std::string type;  // sysfs gid_attrs/types: "IB/RoCE v1", "RoCE v2", ""
};

// The GID index to use: `preferred` (UCCL_IB_GID_INDEX, like NCCL's
// NCCL_IB_GID_INDEX) when >= 0 and present; otherwise a RoCE v2 GID with an
// IPv4-mapped address, then any RoCE v2 GID that is not link-local, then
// any non-zero GID. -1 when the table has no usable entry.
int choose_gid_index(const std::vector<GidEntry>& table, int preferred);

// A failed verbs call's Status: `what` with errno (EINVAL when the library
// left errno 0).
Status verbs_errno(const std::string& what);

// The verbs backend's own options (DeviceOptions::backend_params,
// "key=value,..."): gid_index=N (0-255) overrides UCCL_IB_GID_INDEX (the
// NCCL plugin passes NCCL_IB_GID_INDEX this way). -1: not given. Any other
// key, or a bad value, is InvalidArgument.
struct VerbsParams {
  int gid_index = -1;
  static Result<VerbsParams> parse(const std::string& text);
};

// verbs completion status -> ours.
WcStatus map_wc_status(ibv_wc_status s);
// verbs MTU enum <-> bytes (IBV_MTU_4096 <-> 4096); 0 / IBV_MTU_1024 default.
uint32_t mtu_enum_to_bytes(ibv_mtu m);
ibv_mtu mtu_bytes_to_enum(uint32_t bytes);

// Attributes for INIT, RTR and RTS of an RC or UC QP (UC skips the RC-only
// fields and masks, as the verbs spec requires). `is_roce` selects a global
// route with `sgid_index`; on InfiniBand the LID is used.
void build_init_attr(QpType type, uint8_t port, ibv_qp_attr* attr, int* mask);
void build_rtr_attr(QpType type, const QpInfo& remote, uint8_t port,
                    bool is_roce, int sgid_index, ibv_mtu path_mtu,
                    const RcAttrs& rc, ibv_qp_attr* attr, int* mask);
void build_rts_attr(QpType type, uint32_t sq_psn, const RcAttrs& rc,
                    ibv_qp_attr* attr, int* mask);

}  // namespace uccl::transport::verbs
