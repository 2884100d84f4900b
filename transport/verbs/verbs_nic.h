// The verbs backend: Device/PD/MR/CQ/QP/SRQ/AH as thin wrappers over
// rdma-core (dlopen'd). Never run on hardware here; docs/nic.md, "verbs".
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/nic.h"
#include "transport/verbs/ibv_api.h"

namespace uccl::transport::verbs {

std::vector<DeviceInfo> list_verbs_devices(std::string* why_none);
Result<std::unique_ptr<Device>> open_verbs_device(const std::string& name,
                                                  const DeviceOptions& opts);

class VerbsDevice;

class VerbsPd final : public ProtectionDomain {
 public:
  VerbsPd(const IbvApi* api, ibv_pd* pd) : api_(api), pd_(pd) {}
  ~VerbsPd() override;
  Result<std::unique_ptr<MemoryRegion>> reg_mr(void* addr, size_t len,
                                               uint32_t access) override;
  Result<std::unique_ptr<MemoryRegion>> reg_dmabuf_mr(int fd, uint64_t offset,
                                                      size_t len, uint64_t iova,
                                                      uint32_t access) override;
  ibv_pd* pd() const { return pd_; }

 private:
  const IbvApi* api_;
  ibv_pd* pd_;
};

class VerbsMr final : public MemoryRegion {
 public:
  VerbsMr(const IbvApi* api, ibv_mr* mr, uint32_t access);
  ~VerbsMr() override;

 private:
  const IbvApi* api_;
  ibv_mr* mr_;
};

class VerbsCq final : public CompletionQueue {
 public:
  VerbsCq(VerbsDevice* dev, ibv_cq* cq, ibv_cq_ex* cq_ex, uint32_t cqe);
  ~VerbsCq() override;
  int poll(int max, WorkCompletion* wc) override;
  uint32_t capacity() const override { return cqe_; }
  ibv_cq* cq() const { return cq_; }
  // A completion made up by fault injection (a dropped WR still completes).
  void inject(const WorkCompletion& wc);

 private:
  VerbsDevice* dev_;
  ibv_cq* cq_;
  ibv_cq_ex* cq_ex_;  // non-null when completion timestamps are available
  uint32_t cqe_;
  std::vector<WorkCompletion> injected_;
  size_t injected_head_ = 0;
};

class VerbsSrq final : public SharedReceiveQueue {
 public:
  VerbsSrq(const IbvApi* api, ibv_srq* srq) : api_(api), srq_(srq) {}
  ~VerbsSrq() override;
  Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override;
  ibv_srq* srq() const { return srq_; }

 private:
  const IbvApi* api_;
  ibv_srq* srq_;
};

class VerbsAh final : public AddressHandle {
 public:
  VerbsAh(const IbvApi* api, ibv_ah* ah, const PortAddress& a)
      : api_(api), ah_(ah) {
    addr_ = a;
  }
  ~VerbsAh() override;
  ibv_ah* ah() const { return ah_; }

 private:
  const IbvApi* api_;
  ibv_ah* ah_;
};

class VerbsQp final : public QueuePair {
 public:
  VerbsQp(VerbsDevice* dev, ibv_qp* qp, const QpConfig& cfg);
  ~VerbsQp() override;
  QpInfo local_info() const override;
  QpState state() const override { return state_; }
  Status connect(const QpInfo& remote) override;
  Status activate() override;
  Status set_error() override;
  Status post_send(const SendWr* wr, const SendWr** bad_wr) override;
  Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override;

 private:
  Status modify(ibv_qp_attr* attr, int mask, const char* what);

  VerbsDevice* dev_;
  ibv_qp* qp_;
  QpConfig cfg_;
  QpState state_ = QpState::kReset;
  uint32_t sq_psn_;
};

class VerbsDevice final : public Device {
 public:
  VerbsDevice(const IbvApi* api, ibv_context* ctx, uint8_t port,
              const DeviceInfo& info, const ibv_port_attr& port_attr,
              int gid_index, const DeviceOptions& opts);
  ~VerbsDevice() override;

  const DeviceInfo& info() const override { return info_; }
  PortAddress port_address() const override;
  Result<std::unique_ptr<ProtectionDomain>> alloc_pd() override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t cqe) override;
  Result<std::unique_ptr<SharedReceiveQueue>> create_srq(
      ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<QueuePair>> create_qp(const QpConfig& cfg) override;
  Result<std::unique_ptr<AddressHandle>> create_ah(
      ProtectionDomain* pd, const PortAddress& dest) override;
  std::string counters_text() const override;

  const IbvApi* api() const { return api_; }
  bool is_roce() const {
    return port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET;
  }
  int gid_index() const { return gid_index_; }
  uint8_t port() const { return port_; }
  ibv_mtu active_mtu() const { return port_attr_.active_mtu; }
  Clock* clock() const { return clock_; }
  uint64_t fault_dropped_ = 0;

 private:
  const IbvApi* api_;
  ibv_context* ctx_;
  uint8_t port_;
  DeviceInfo info_;
  ibv_port_attr port_attr_;
  int gid_index_;
  ibv_gid gid_{};
  Clock* clock_;
};

}  // namespace uccl::transport::verbs
