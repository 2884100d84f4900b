// Host-memory protection domains, memory regions and windows (keys in the
// MR table), the receive rings QPs and SRQs post into, and QP checks.

#include "transport/soft/soft_pd.h"

#include <algorithm>
#include <cstring>

namespace uccl::transport::soft {

Result<std::unique_ptr<MemoryRegion>> SoftPd::reg_mr(void* addr, size_t len,
                                                     uint32_t access) {
  if (addr == nullptr || len == 0) {
    return InvalidArgument("reg_mr: empty region");
  }
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (a + len < a) return InvalidArgument("reg_mr: region wraps around");
  if (access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) {
    return InvalidArgument("reg_mr: unknown access flags");
  }
  if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
    // Same rule as verbs: remote write requires local write.
    return InvalidArgument("reg_mr: REMOTE_WRITE requires LOCAL_WRITE");
  }
  UCCL_ASSIGN_OR_RETURN(uint32_t key, table_.add(a, len, access));
  return std::unique_ptr<MemoryRegion>(new SoftMr(this, a, len, access, key));
}

Result<std::unique_ptr<MemoryWindow>> SoftPd::alloc_mw() {
  UCCL_ASSIGN_OR_RETURN(uint32_t index, table_.reserve());
  return std::unique_ptr<MemoryWindow>(new SoftMw(this, index));
}

SoftMw::~SoftMw() { pd_->table().release(index_); }

Result<uint32_t> SoftMw::bind(const MemoryRegion& mr, uint64_t addr,
                              uint64_t len, uint32_t access) {
  if (addr < mr.addr() || addr - mr.addr() > mr.length() ||
      len > mr.length() - (addr - mr.addr())) {
    return OutOfRange("memory window outside its region");
  }
  if ((mr.access() & access) != access) {
    return PermissionDenied("memory window needs rights its region lacks");
  }
  return pd_->table().rebind(index_, addr, len, access, mr.lkey());
}

void SoftMw::invalidate() { pd_->table().unbind(index_); }

SoftMr::SoftMr(SoftPd* pd, uint64_t addr, size_t len, uint32_t access,
               uint32_t key)
    : pd_(pd) {
  addr_ = addr;
  length_ = len;
  access_ = access;
  lkey_ = rkey_ = key;
}

SoftMr::~SoftMr() { pd_->table().remove(lkey_); }

RecvRing::RecvRing(uint32_t capacity, uint32_t max_sge)
    : ring_(round_pow2(std::max(capacity, 1u))),
      mask_(ring_.size() - 1),
      max_sge_(std::min<uint32_t>(max_sge, kMaxSge)) {}

Status RecvRing::post(const RecvWr* wr, const RecvWr** bad_wr, MrTable* mrs) {
  for (; wr != nullptr; wr = wr->next) {
    Status st;
    if (tail_ - head_ >= ring_.size()) {
      st = ResourceExhausted("receive queue full (" +
                             std::to_string(ring_.size()) + " entries)");
    } else if (wr->num_sge < 0 ||
               static_cast<uint32_t>(wr->num_sge) > max_sge_) {
      st = InvalidArgument("post_recv: " + std::to_string(wr->num_sge) +
                           " SGEs > max_recv_sge " + std::to_string(max_sge_));
    }
    RecvEntry e;
    e.wr_id = wr->wr_id;
    e.num_sge = wr->num_sge;
    uint64_t total = 0;
    for (int i = 0; st.ok() && i < wr->num_sge; ++i) {
      const Sge& s = wr->sg_list[i];
      if (s.length > 0) {
        MrTable::Check c =
            mrs->check(s.lkey, s.addr, s.length, kAccessLocalWrite);
        if (c != MrTable::Check::kOk) {
          st = PermissionDenied(
              "post_recv: SGE " + std::to_string(i) +
              (c == MrTable::Check::kBadKey        ? " has an invalid lkey"
               : c == MrTable::Check::kOutOfBounds ? " is outside its region"
                                                   : " lacks LOCAL_WRITE"));
        }
      }
      e.sge[i] = s;
      total += s.length;
    }
    if (st.ok() && total > 0x80000000ull) {
      st = InvalidArgument("post_recv: receive larger than 2 GiB");
    }
    if (!st.ok()) {
      if (bad_wr) *bad_wr = wr;
      return st;
    }
    e.total_len = static_cast<uint32_t>(total);
    ring_[tail_ & mask_] = e;
    ++tail_;
  }
  return Status::OK();
}

bool RecvRing::pop(RecvEntry* out) {
  if (head_ == tail_) return false;
  *out = ring_[head_ & mask_];
  ++head_;
  return true;
}

Status check_qp_config(const QpConfig& cfg, const Device* dev) {
  if (dynamic_cast<SoftPd*>(cfg.pd) == nullptr) {
    return InvalidArgument("create_qp: missing PD or PD of another device");
  }
  if (!RingCq::of(cfg.send_cq, dev) || !RingCq::of(cfg.recv_cq, dev)) {
    return InvalidArgument(
        "create_qp: send_cq and recv_cq of this device are required");
  }
  if (cfg.srq != nullptr && dynamic_cast<SoftSrq*>(cfg.srq) == nullptr) {
    return InvalidArgument("create_qp: SRQ of another device");
  }
  if (cfg.max_send_wr == 0 || cfg.max_send_wr > (1u << 16) ||
      cfg.max_recv_wr > (1u << 16)) {
    return InvalidArgument(
        "create_qp: max_send_wr in [1, 65536], "
        "max_recv_wr <= 65536");
  }
  if (cfg.max_send_sge > kMaxSge || cfg.max_recv_sge > kMaxSge) {
    return InvalidArgument("create_qp: at most 8 SGEs per WR");
  }
  if (cfg.max_inline_data > 4096) {
    return InvalidArgument("create_qp: max_inline_data <= 4096");
  }
  if (cfg.rx_guard != nullptr && cfg.type != QpType::kUC) {
    return InvalidArgument(
        "create_qp: a receive guard is for UC QPs only (RC drops its "
        "duplicates by PSN)");
  }
  return Status::OK();
}

}  // namespace uccl::transport::soft
