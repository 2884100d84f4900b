// Verbs backend objects over the dlopen'd libibverbs: PD, CQ, SRQ, MR, AH,
// QP state transitions, posting (with WR-level fault injection for UC/UD)
// and completion polling. Discovery and opening: verbs_devices.cc.
#include "transport/verbs/verbs_nic.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "transport/verbs/verbs_util.h"

namespace uccl::transport::verbs {

// ------------------------------------------------------------- objects

VerbsDevice::VerbsDevice(const IbvApi* api, ibv_context* ctx, uint8_t port,
                         const DeviceInfo& info, const ibv_port_attr& pa,
                         int gid_index, const DeviceOptions& opts)
    : api_(api),
      ctx_(ctx),
      port_(port),
      info_(info),
      port_attr_(pa),
      gid_index_(gid_index),
      clock_(opts.clock ? opts.clock : SystemClock::get()) {
  api_->query_gid(ctx_, port_, gid_index_, &gid_);
  FaultOptions f = opts.faults;
  if (opts.faults_from_knobs) {
    auto k = FaultOptions::from_knobs();
    if (k.ok()) f = *k;
  }
  faults_ = std::make_unique<FaultInjector>(f);
}

VerbsDevice::~VerbsDevice() { api_->close_device(ctx_); }

PortAddress VerbsDevice::port_address() const {
  PortAddress a;
  std::memcpy(a.gid, gid_.raw, 16);
  a.lid = port_attr_.lid;
  a.port_num = port_;
  return a;
}

Result<std::unique_ptr<ProtectionDomain>> VerbsDevice::alloc_pd() {
  ibv_pd* pd = api_->alloc_pd(ctx_);
  if (pd == nullptr) return verbs_errno("ibv_alloc_pd");
  return std::unique_ptr<ProtectionDomain>(new VerbsPd(api_, pd));
}

Result<std::unique_ptr<CompletionQueue>> VerbsDevice::create_cq(uint32_t cqe) {
  // Prefer an extended CQ with wall-clock completion timestamps.
  ibv_cq_init_attr_ex ax;
  std::memset(&ax, 0, sizeof(ax));
  ax.cqe = cqe;
  ax.wc_flags =
      IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ax);
  if (cqx != nullptr) {
    return std::unique_ptr<CompletionQueue>(
        new VerbsCq(this, ibv_cq_ex_to_cq(cqx), cqx, cqe));
  }
  ibv_cq* cq =
      api_->create_cq(ctx_, static_cast<int>(cqe), nullptr, nullptr, 0);
  if (cq == nullptr) return verbs_errno("ibv_create_cq");
  return std::unique_ptr<CompletionQueue>(new VerbsCq(this, cq, nullptr, cqe));
}

Result<std::unique_ptr<SharedReceiveQueue>> VerbsDevice::create_srq(
    ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) {
  auto* vpd = dynamic_cast<VerbsPd*>(pd);
  if (vpd == nullptr)
    return InvalidArgument("create_srq: PD of another device");
  ibv_srq_init_attr a;
  std::memset(&a, 0, sizeof(a));
  a.attr.max_wr = max_wr;
  a.attr.max_sge = max_sge;
  ibv_srq* srq = api_->create_srq(vpd->pd(), &a);
  if (srq == nullptr) return verbs_errno("ibv_create_srq");
  return std::unique_ptr<SharedReceiveQueue>(new VerbsSrq(api_, srq));
}

Result<std::unique_ptr<QueuePair>> VerbsDevice::create_qp(const QpConfig& cfg) {
  auto* pd = dynamic_cast<VerbsPd*>(cfg.pd);
  auto* scq = dynamic_cast<VerbsCq*>(cfg.send_cq);
  auto* rcq = dynamic_cast<VerbsCq*>(cfg.recv_cq);
  if (pd == nullptr || scq == nullptr || rcq == nullptr) {
    return InvalidArgument("create_qp: PD and CQs of this device required");
  }
  ibv_qp_init_attr a;
  std::memset(&a, 0, sizeof(a));
  a.send_cq = scq->cq();
  a.recv_cq = rcq->cq();
  if (cfg.srq) a.srq = static_cast<VerbsSrq*>(cfg.srq)->srq();
  a.qp_type = cfg.type == QpType::kRC   ? IBV_QPT_RC
              : cfg.type == QpType::kUC ? IBV_QPT_UC
                                        : IBV_QPT_UD;
  a.cap.max_send_wr = cfg.max_send_wr;
  a.cap.max_recv_wr = cfg.srq ? 0 : cfg.max_recv_wr;
  a.cap.max_send_sge = cfg.max_send_sge;
  a.cap.max_recv_sge = cfg.max_recv_sge;
  a.cap.max_inline_data = cfg.max_inline_data;
  ibv_qp* qp = api_->create_qp(pd->pd(), &a);
  if (qp == nullptr) return verbs_errno("ibv_create_qp");
  auto out = std::unique_ptr<VerbsQp>(new VerbsQp(this, qp, cfg));
  ibv_qp_attr attr;
  int mask;
  build_init_attr(cfg.type, port_, &attr, &mask);
  if (cfg.type == QpType::kUD) {
    attr.qkey = cfg.qkey;
    mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
  }
  if (api_->modify_qp(qp, &attr, mask) != 0) return verbs_errno("QP to INIT");
  return std::unique_ptr<QueuePair>(std::move(out));
}

Result<std::unique_ptr<AddressHandle>> VerbsDevice::create_ah(
    ProtectionDomain* pd, const PortAddress& dest) {
  auto* vpd = dynamic_cast<VerbsPd*>(pd);
  if (vpd == nullptr) return InvalidArgument("create_ah: PD of another device");
  ibv_ah_attr a;
  std::memset(&a, 0, sizeof(a));
  a.port_num = port_;
  if (is_roce()) {
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, dest.gid, 16);
    a.grh.sgid_index = static_cast<uint8_t>(gid_index_);
    a.grh.hop_limit = 255;
  } else {
    a.dlid = dest.lid;
  }
  ibv_ah* ah = api_->create_ah(vpd->pd(), &a);
  if (ah == nullptr) return verbs_errno("ibv_create_ah");
  return std::unique_ptr<AddressHandle>(new VerbsAh(api_, ah, dest));
}

std::string VerbsDevice::counters_text() const {
  std::ostringstream os;
  os << "fault_wr_dropped " << fault_dropped_ << "\n"
     << faults_->counters_text();
  return os.str();
}

VerbsPd::~VerbsPd() { api_->dealloc_pd(pd_); }

namespace {

int ibv_access(uint32_t access) {
  int flags = 0;
  if (access & kAccessLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kAccessRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  return flags;
}

}  // namespace

Result<std::unique_ptr<MemoryRegion>> VerbsPd::reg_mr(void* addr, size_t len,
                                                      uint32_t access) {
  if (addr == nullptr || len == 0)
    return InvalidArgument("reg_mr: empty region");
  const int flags = ibv_access(access);
  ibv_mr* mr = api_->reg_mr(pd_, addr, len, flags);
  if (mr == nullptr) return verbs_errno("ibv_reg_mr");
  return std::unique_ptr<MemoryRegion>(new VerbsMr(api_, mr, access));
}

Result<std::unique_ptr<MemoryRegion>> VerbsPd::reg_dmabuf_mr(
    int fd, uint64_t offset, size_t len, uint64_t iova, uint32_t access) {
  if (api_->reg_dmabuf_mr == nullptr) {
    return NotSupported("rdma-core lacks ibv_reg_dmabuf_mr (before v34)");
  }
  if (fd < 0 || len == 0) return InvalidArgument("reg_dmabuf_mr: no buffer");
  const int flags = ibv_access(access);
  ibv_mr* mr = api_->reg_dmabuf_mr(pd_, offset, len, iova, fd, flags);
  if (mr == nullptr) return verbs_errno("ibv_reg_dmabuf_mr");
  return std::unique_ptr<MemoryRegion>(new VerbsMr(api_, mr, access));
}

VerbsMr::VerbsMr(const IbvApi* api, ibv_mr* mr, uint32_t access)
    : api_(api), mr_(mr) {
  addr_ = reinterpret_cast<uint64_t>(mr->addr);
  length_ = mr->length;
  lkey_ = mr->lkey;
  rkey_ = mr->rkey;
  access_ = access;
}

VerbsMr::~VerbsMr() { api_->dereg_mr(mr_); }

VerbsCq::VerbsCq(VerbsDevice* dev, ibv_cq* cq, ibv_cq_ex* cq_ex, uint32_t cqe)
    : dev_(dev), cq_(cq), cq_ex_(cq_ex), cqe_(cqe) {
  injected_.reserve(cqe);
}

VerbsCq::~VerbsCq() { dev_->api()->destroy_cq(cq_); }

void VerbsCq::inject(const WorkCompletion& wc) {
  if (injected_.size() < cqe_) injected_.push_back(wc);
}

int VerbsCq::poll(int max, WorkCompletion* out) {
  int n = 0;
  while (n < max && injected_head_ < injected_.size()) {
    out[n++] = injected_[injected_head_++];
  }
  if (injected_head_ == injected_.size()) {
    injected_.clear();
    injected_head_ = 0;
  }
  auto fill = [](WorkCompletion* w, uint64_t wr_id, ibv_wc_status st,
                 ibv_wc_opcode op, uint32_t len, uint32_t imm, bool with_imm,
                 uint32_t qpn, uint32_t src_qp, bool with_grh) {
    w->wr_id = wr_id;
    w->status = map_wc_status(st);
    switch (op) {
      case IBV_WC_SEND:
        w->opcode = WcOpcode::kSend;
        break;
      case IBV_WC_RDMA_WRITE:
        w->opcode = WcOpcode::kWrite;
        break;
      case IBV_WC_RDMA_READ:
        w->opcode = WcOpcode::kRead;
        break;
      case IBV_WC_RECV_RDMA_WITH_IMM:
        w->opcode = WcOpcode::kRecvWriteImm;
        break;
      default:
        w->opcode = WcOpcode::kRecv;
        break;
    }
    w->byte_len = len;
    w->imm_data = ntohl(imm);
    w->with_imm = with_imm;
    w->qp_num = qpn;
    w->src_qp = src_qp;
    w->with_grh = with_grh;
  };
  if (cq_ex_ != nullptr) {
    ibv_poll_cq_attr pa = {};
    if (n >= max || ibv_start_poll(cq_ex_, &pa) != 0) return n;
    // The NIC's completion times are wall-clock nanoseconds; the device's
    // clock (monotonic, or a test's) is shifted from that by this much now.
    const uint64_t now = dev_->clock()->now_ns();
    timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    const int64_t shift =
        static_cast<int64_t>(now) -
        (static_cast<int64_t>(rt.tv_sec) * 1000000000 + rt.tv_nsec);
    do {
      WorkCompletion& w = out[n++];
      ibv_wc_opcode op = ibv_wc_read_opcode(cq_ex_);
      uint32_t flags = ibv_wc_read_wc_flags(cq_ex_);
      fill(&w, cq_ex_->wr_id, cq_ex_->status, op, ibv_wc_read_byte_len(cq_ex_),
           ibv_wc_read_imm_data(cq_ex_), (flags & IBV_WC_WITH_IMM) != 0,
           ibv_wc_read_qp_num(cq_ex_), ibv_wc_read_src_qp(cq_ex_),
           (flags & IBV_WC_GRH) != 0);
      const int64_t t =
          static_cast<int64_t>(ibv_wc_read_completion_wallclock_ns(cq_ex_)) +
          shift;
      w.timestamp_ns = t > 0 && static_cast<uint64_t>(t) <= now
                           ? static_cast<uint64_t>(t)
                           : now;
    } while (n < max && ibv_next_poll(cq_ex_) == 0);
    ibv_end_poll(cq_ex_);
    return n;
  }
  ibv_wc wc[32];
  int want = std::min(max - n, 32);
  if (want <= 0) return n;
  int got = ibv_poll_cq(cq_, want, wc);
  uint64_t now = dev_->clock()->now_ns();
  for (int i = 0; i < got; ++i) {
    WorkCompletion& w = out[n++];
    fill(&w, wc[i].wr_id, wc[i].status, wc[i].opcode, wc[i].byte_len,
         wc[i].imm_data, (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0, wc[i].qp_num,
         wc[i].src_qp, (wc[i].wc_flags & IBV_WC_GRH) != 0);
    w.timestamp_ns = now;
  }
  return n;
}

VerbsSrq::~VerbsSrq() { api_->destroy_srq(srq_); }

Status VerbsSrq::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  for (; wr; wr = wr->next) {
    ibv_sge sge[16];
    ibv_recv_wr w;
    std::memset(&w, 0, sizeof(w));
    if (wr->num_sge > 16) return InvalidArgument("post_recv: > 16 SGEs");
    for (int i = 0; i < wr->num_sge; ++i) {
      sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length,
                wr->sg_list[i].lkey};
    }
    w.wr_id = wr->wr_id;
    w.sg_list = sge;
    w.num_sge = wr->num_sge;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_srq_recv(srq_, &w, &bad);
    if (rc != 0) {
      if (bad_wr) *bad_wr = wr;
      return ErrnoStatus("ibv_post_srq_recv", rc);
    }
  }
  return Status::OK();
}

VerbsAh::~VerbsAh() { api_->destroy_ah(ah_); }

VerbsQp::VerbsQp(VerbsDevice* dev, ibv_qp* qp, const QpConfig& cfg)
    : dev_(dev), qp_(qp), cfg_(cfg) {
  type_ = cfg.type;
  qpn_ = qp->qp_num;
  sq_psn_ = (qpn_ * 2654435761u) & 0xffffff;
  state_ = QpState::kInit;
}

VerbsQp::~VerbsQp() { dev_->api()->destroy_qp(qp_); }

QpInfo VerbsQp::local_info() const {
  QpInfo i;
  i.addr = dev_->port_address();
  i.qpn = qpn_;
  i.psn = sq_psn_;
  i.mtu_bytes = mtu_enum_to_bytes(dev_->active_mtu());
  i.type = type_;
  return i;
}

Status VerbsQp::modify(ibv_qp_attr* attr, int mask, const char* what) {
  int rc = dev_->api()->modify_qp(qp_, attr, mask);
  if (rc != 0) return ErrnoStatus(std::string("ibv_modify_qp ") + what, rc);
  return Status::OK();
}

Status VerbsQp::connect(const QpInfo& remote) {
  if (type_ == QpType::kUD)
    return InvalidArgument("connect: UD uses activate()");
  if (remote.type != type_) return InvalidArgument("connect: QP type mismatch");
  ibv_qp_attr attr;
  int mask;
  ibv_mtu mtu =
      std::min(dev_->active_mtu(), mtu_bytes_to_enum(remote.mtu_bytes));
  build_rtr_attr(type_, remote, dev_->port(), dev_->is_roce(),
                 dev_->gid_index(), mtu, cfg_.rc, &attr, &mask);
  UCCL_RETURN_IF_ERROR(modify(&attr, mask, "to RTR"));
  state_ = QpState::kRtr;
  build_rts_attr(type_, sq_psn_, cfg_.rc, &attr, &mask);
  UCCL_RETURN_IF_ERROR(modify(&attr, mask, "to RTS"));
  state_ = QpState::kRts;
  return Status::OK();
}

Status VerbsQp::activate() {
  if (type_ != QpType::kUD) return InvalidArgument("activate: UD only");
  ibv_qp_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTR;
  UCCL_RETURN_IF_ERROR(modify(&attr, IBV_QP_STATE, "to RTR"));
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn_;
  UCCL_RETURN_IF_ERROR(modify(&attr, IBV_QP_STATE | IBV_QP_SQ_PSN, "to RTS"));
  state_ = QpState::kRts;
  return Status::OK();
}

Status VerbsQp::set_error() {
  ibv_qp_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_ERR;
  UCCL_RETURN_IF_ERROR(modify(&attr, IBV_QP_STATE, "to ERR"));
  state_ = QpState::kError;
  return Status::OK();
}

Status VerbsQp::post_send(const SendWr* wr, const SendWr** bad_wr) {
  FaultInjector* faults = dev_->fault_injector();
  const bool inject = faults->enabled(Direction::kTx) && type_ != QpType::kRC;
  for (; wr; wr = wr->next) {
    if (wr->num_sge > 16) {
      if (bad_wr) *bad_wr = wr;
      return InvalidArgument("post_send: > 16 SGEs");
    }
    int copies = 1;
    if (inject) {
      FaultDecision d = faults->decide(Direction::kTx);
      if (d.drop) {
        // Lost on the wire: locally the send still completes.
        ++dev_->fault_dropped_;
        if (wr->signaled) {
          WorkCompletion wc;
          wc.wr_id = wr->wr_id;
          wc.opcode = WcOpcode::kSend;
          wc.qp_num = qpn_;
          static_cast<VerbsCq*>(cfg_.send_cq)->inject(wc);
        }
        continue;
      }
      if (d.duplicate) copies = 2;
    }
    ibv_sge sge[16];
    for (int i = 0; i < wr->num_sge; ++i) {
      sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length,
                wr->sg_list[i].lkey};
    }
    ibv_send_wr w;
    std::memset(&w, 0, sizeof(w));
    w.wr_id = wr->wr_id;
    w.sg_list = sge;
    w.num_sge = wr->num_sge;
    switch (wr->opcode) {
      case WrOpcode::kWrite:
        w.opcode = IBV_WR_RDMA_WRITE;
        break;
      case WrOpcode::kWriteWithImm:
        w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        break;
      case WrOpcode::kSend:
        w.opcode = IBV_WR_SEND;
        break;
      case WrOpcode::kSendWithImm:
        w.opcode = IBV_WR_SEND_WITH_IMM;
        break;
      case WrOpcode::kRead:
        w.opcode = IBV_WR_RDMA_READ;
        break;
    }
    w.send_flags = (wr->signaled ? IBV_SEND_SIGNALED : 0) |
                   (wr->inline_data ? IBV_SEND_INLINE : 0);
    w.imm_data = htonl(wr->imm_data);
    if (type_ == QpType::kUD) {
      auto* ah = dynamic_cast<VerbsAh*>(wr->ah);
      if (ah == nullptr) {
        if (bad_wr) *bad_wr = wr;
        return InvalidArgument("post_send: UD needs an address handle");
      }
      w.wr.ud.ah = ah->ah();
      w.wr.ud.remote_qpn = wr->remote_qpn;
      w.wr.ud.remote_qkey = wr->remote_qkey;
    } else {
      w.wr.rdma.remote_addr = wr->remote_addr;
      w.wr.rdma.rkey = wr->rkey;
    }
    for (int c = 0; c < copies; ++c) {
      if (c == 1) w.send_flags &= ~IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      int rc = ibv_post_send(qp_, &w, &bad);
      if (rc != 0) {
        if (bad_wr) *bad_wr = wr;
        return ErrnoStatus("ibv_post_send", rc);
      }
    }
  }
  return Status::OK();
}

Status VerbsQp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  for (; wr; wr = wr->next) {
    if (wr->num_sge > 16) {
      if (bad_wr) *bad_wr = wr;
      return InvalidArgument("post_recv: > 16 SGEs");
    }
    ibv_sge sge[16];
    for (int i = 0; i < wr->num_sge; ++i) {
      sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length,
                wr->sg_list[i].lkey};
    }
    ibv_recv_wr w;
    std::memset(&w, 0, sizeof(w));
    w.wr_id = wr->wr_id;
    w.sg_list = sge;
    w.num_sge = wr->num_sge;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp_, &w, &bad);
    if (rc != 0) {
      if (bad_wr) *bad_wr = wr;
      return ErrnoStatus("ibv_post_recv", rc);
    }
  }
  return Status::OK();
}

}  // namespace uccl::transport::verbs
