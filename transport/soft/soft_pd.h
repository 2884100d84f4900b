// Host-memory NIC objects shared by the software NIC (udp/) and the null NIC
// (null/): protection domain, memory regions and windows, receive rings, SRQ.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/nic.h"
#include "transport/soft/mr_table.h"
#include "transport/soft/ring_cq.h"

namespace uccl::transport::soft {

constexpr int kMaxSge = 8;

// What every QP of the software NIC and of the null NIC is checked for: PD, CQs
// and SRQ of `dev`, and the queue limits. OK or InvalidArgument.
Status check_qp_config(const QpConfig& cfg, const Device* dev);

class SoftPd final : public ProtectionDomain {
 public:
  Result<std::unique_ptr<MemoryRegion>> reg_mr(void* addr, size_t len,
                                               uint32_t access) override;
  Result<std::unique_ptr<MemoryWindow>> alloc_mw() override;
  MrTable& table() { return table_; }

 private:
  MrTable table_;
};

class SoftMr final : public MemoryRegion {
 public:
  SoftMr(SoftPd* pd, uint64_t addr, size_t len, uint32_t access, uint32_t key);
  ~SoftMr() override;

 private:
  SoftPd* pd_;
};

class SoftMw final : public MemoryWindow {
 public:
  SoftMw(SoftPd* pd, uint32_t index) : pd_(pd), index_(index) {}
  ~SoftMw() override;
  Result<uint32_t> bind(const MemoryRegion& mr, uint64_t addr, uint64_t len,
                        uint32_t access) override;
  void invalidate() override;

 private:
  SoftPd* pd_;
  uint32_t index_;
};

using SoftCq = RingCq;  // soft/ring_cq.h

// A posted receive.
struct RecvEntry {
  uint64_t wr_id = 0;
  int num_sge = 0;
  uint32_t total_len = 0;
  Sge sge[kMaxSge];
};

// Ring of receives, shared by the RQ of a QP and by SRQs.
class RecvRing {
 public:
  RecvRing(uint32_t capacity, uint32_t max_sge);
  Status post(const RecvWr* wr, const RecvWr** bad_wr, MrTable* mrs);
  bool empty() const { return head_ == tail_; }
  bool pop(RecvEntry* out);
  uint32_t size() const { return tail_ - head_; }

 private:
  std::vector<RecvEntry> ring_;
  uint32_t mask_;
  uint32_t max_sge_;
  uint32_t head_ = 0, tail_ = 0;
};

class SoftSrq final : public SharedReceiveQueue {
 public:
  SoftSrq(SoftPd* pd, uint32_t max_wr, uint32_t max_sge)
      : pd_(pd), ring_(max_wr, max_sge) {}
  Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override {
    return ring_.post(wr, bad_wr, &pd_->table());
  }
  RecvRing& ring() { return ring_; }
  SoftPd* pd() const { return pd_; }

 private:
  SoftPd* pd_;
  RecvRing ring_;
};

}  // namespace uccl::transport::soft
