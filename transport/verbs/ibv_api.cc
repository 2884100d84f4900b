// dlopen("libibverbs.so.1") once and resolve every symbol UCCL uses; the
// datapath calls (post_send, poll_cq, ...) are verbs.h inlines through the
// context's ops table and need no symbol.
#include "transport/verbs/ibv_api.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace uccl::transport::verbs {
namespace {

struct Loaded {
  IbvApi api;
  bool ok = false;
  std::string why;
};

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (*out == nullptr) {
    *why = std::string("libibverbs lacks symbol ") + name;
    return false;
  }
  return true;
}

Loaded* load() {
  auto* l = new Loaded();
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    l->why = std::string("cannot load libibverbs.so.1 (rdma-core): ") +
             (e ? e : "unknown error");
    return l;
  }
  IbvApi& a = l->api;
  std::string& w = l->why;
  l->ok = resolve(lib, "ibv_get_device_list", &a.get_device_list, &w) &&
          resolve(lib, "ibv_free_device_list", &a.free_device_list, &w) &&
          resolve(lib, "ibv_get_device_name", &a.get_device_name, &w) &&
          resolve(lib, "ibv_get_device_guid", &a.get_device_guid, &w) &&
          resolve(lib, "ibv_open_device", &a.open_device, &w) &&
          resolve(lib, "ibv_close_device", &a.close_device, &w) &&
          resolve(lib, "ibv_query_device", &a.query_device, &w) &&
          resolve(lib, "ibv_query_port", &a.query_port_compat, &w) &&
          resolve(lib, "ibv_query_gid", &a.query_gid, &w) &&
          resolve(lib, "ibv_alloc_pd", &a.alloc_pd, &w) &&
          resolve(lib, "ibv_dealloc_pd", &a.dealloc_pd, &w) &&
          resolve(lib, "ibv_reg_mr", &a.reg_mr, &w) &&
          resolve(lib, "ibv_dereg_mr", &a.dereg_mr, &w) &&
          resolve(lib, "ibv_create_cq", &a.create_cq, &w) &&
          resolve(lib, "ibv_destroy_cq", &a.destroy_cq, &w) &&
          resolve(lib, "ibv_create_qp", &a.create_qp, &w) &&
          resolve(lib, "ibv_modify_qp", &a.modify_qp, &w) &&
          resolve(lib, "ibv_destroy_qp", &a.destroy_qp, &w) &&
          resolve(lib, "ibv_create_srq", &a.create_srq, &w) &&
          resolve(lib, "ibv_destroy_srq", &a.destroy_srq, &w) &&
          resolve(lib, "ibv_create_ah", &a.create_ah, &w) &&
          resolve(lib, "ibv_destroy_ah", &a.destroy_ah, &w) &&
          resolve(lib, "ibv_wc_status_str", &a.wc_status_str, &w);
  // Optional: GPU memory registered directly (GPUDirect RDMA over dma-buf).
  a.reg_dmabuf_mr = reinterpret_cast<decltype(a.reg_dmabuf_mr)>(
      dlsym(lib, "ibv_reg_dmabuf_mr"));
  return l;
}

}  // namespace

int IbvApi::query_port(ibv_context* ctx, uint8_t port,
                       ibv_port_attr* attr) const {
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx == nullptr) {
    std::memset(attr, 0, sizeof(*attr));
    return query_port_compat(ctx, port,
                             reinterpret_cast<_compat_ibv_port_attr*>(attr));
  }
  return vctx->query_port(ctx, port, attr, sizeof(*attr));
}

const IbvApi* ibv_api(std::string* why) {
  static Loaded* loaded = load();
  if (!loaded->ok) {
    if (why) *why = loaded->why;
    return nullptr;
  }
  return &loaded->api;
}

}  // namespace uccl::transport::verbs
