// libibverbs entry points resolved with dlopen at run time, so UCCL binaries
// and the NCCL plugin load on machines without rdma-core.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace uccl::transport::verbs {

struct IbvApi {
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  __be64 (*get_device_guid)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port_compat)(ibv_context*, uint8_t,
                           _compat_ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*,
                       int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*) = nullptr;
  int (*destroy_srq)(ibv_srq*) = nullptr;
  ibv_ah* (*create_ah)(ibv_pd*, ibv_ah_attr*) = nullptr;
  int (*destroy_ah)(ibv_ah*) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;
  // rdma-core 34 and later; null before (dma-buf registration refused).
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int,
                           int) = nullptr;

  // Port query that prefers the extended (size-aware) op, like verbs.h's
  // inline wrapper, falling back to the exported compat symbol.
  int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
};

// The loaded API, or nullptr with *why set (library or symbol missing).
const IbvApi* ibv_api(std::string* why);

}  // namespace uccl::transport::verbs
