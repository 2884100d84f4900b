// Test helpers for the NIC layer: a QP "side" (device, PD, CQs, QP, buffer
// and MR) and a bounded polling loop, so tests read as post / drive / check.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tests/transport/soft_nic_test_access.h"
#include "transport/nic.h"
#include "transport/registry.h"
#include "util/clock.h"

namespace uccl::transport::testing {

struct Side {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> scq, rcq;
  std::unique_ptr<QueuePair> qp;
  std::vector<uint8_t> buf;
  std::unique_ptr<MemoryRegion> mr;
  std::vector<WorkCompletion> send_wcs, recv_wcs;

  // Opens `device`, creates a QP of `type` and a buffer of `buf_bytes`.
  static std::unique_ptr<Side> make(QpType type, size_t buf_bytes,
                                    DeviceOptions opts = no_faults(),
                                    QpConfig cfg = QpConfig(),
                                    const std::string& device = "udp:lo") {
    auto s = std::make_unique<Side>();
    auto d = open_device(device, opts);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    s->dev = std::move(*d);
    s->pd = std::move(*s->dev->alloc_pd());
    s->scq = std::move(*s->dev->create_cq(4096));
    s->rcq = std::move(*s->dev->create_cq(4096));
    cfg.type = type;
    cfg.pd = s->pd.get();
    cfg.send_cq = s->scq.get();
    cfg.recv_cq = s->rcq.get();
    auto qp = s->dev->create_qp(cfg);
    EXPECT_TRUE(qp.ok()) << qp.status();
    if (!qp.ok()) return nullptr;
    s->qp = std::move(*qp);
    if (buf_bytes > 0) {
      s->buf.resize(buf_bytes);
      auto mr = s->pd->reg_mr(
          s->buf.data(), buf_bytes,
          kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
      EXPECT_TRUE(mr.ok()) << mr.status();
      s->mr = std::move(*mr);
    }
    return s;
  }

  static DeviceOptions no_faults() {
    DeviceOptions o;
    o.faults_from_knobs = false;
    return o;
  }

  // Polls both CQs once, appending completions.
  void poll() {
    WorkCompletion wc[64];
    int n = scq->poll(64, wc);
    send_wcs.insert(send_wcs.end(), wc, wc + n);
    n = rcq->poll(64, wc);
    recv_wcs.insert(recv_wcs.end(), wc, wc + n);
  }

  Status post_recv(uint64_t wr_id, uint64_t offset, uint32_t len) {
    Sge sge{reinterpret_cast<uint64_t>(buf.data()) + offset, len, mr->lkey()};
    RecvWr wr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    return qp->post_recv(&wr, nullptr);
  }

  Status post_send(WrOpcode op, uint64_t wr_id, uint64_t offset, uint32_t len,
                   uint64_t remote_addr = 0, uint32_t rkey = 0,
                   uint32_t imm = 0, bool signaled = true,
                   bool by_reference = false,
                   std::optional<uint32_t> guard_tag = std::nullopt) {
    Sge sge{reinterpret_cast<uint64_t>(buf.data()) + offset, len, mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr.imm_data = imm;
    wr.signaled = signaled;
    wr.payload_stable = by_reference;
    wr.tagged = guard_tag.has_value();
    wr.guard_tag = guard_tag.value_or(0);
    return qp->post_send(&wr, nullptr);
  }

  uint64_t addr(uint64_t offset = 0) const {
    return reinterpret_cast<uint64_t>(buf.data()) + offset;
  }
};

// Connects two RC/UC sides to each other.
inline void connect_pair(Side* a, Side* b) {
  ASSERT_TRUE(a->qp->connect(b->qp->local_info()).ok());
  ASSERT_TRUE(b->qp->connect(a->qp->local_info()).ok());
}

// Polls every side until `done()` or `timeout_ms` passes; false on timeout.
inline bool drive(const std::vector<Side*>& sides,
                  const std::function<bool()>& done, int timeout_ms = 30000) {
  uint64_t deadline =
      monotonic_ns() + static_cast<uint64_t>(timeout_ms) * 1000000;
  while (!done()) {
    if (monotonic_ns() > deadline) return false;
    for (Side* s : sides) s->poll();
  }
  return true;
}

// Every connected QP type x opcode pair the op-matrix tests cover (READ only
// on RC), and gtest's name for one ("RC_RDMA_WRITE").
inline auto qp_op_matrix() {
  return ::testing::Values(
      std::make_tuple(QpType::kRC, WrOpcode::kWrite),
      std::make_tuple(QpType::kRC, WrOpcode::kWriteWithImm),
      std::make_tuple(QpType::kRC, WrOpcode::kSend),
      std::make_tuple(QpType::kRC, WrOpcode::kSendWithImm),
      std::make_tuple(QpType::kRC, WrOpcode::kRead),
      std::make_tuple(QpType::kUC, WrOpcode::kWrite),
      std::make_tuple(QpType::kUC, WrOpcode::kWriteWithImm),
      std::make_tuple(QpType::kUC, WrOpcode::kSend),
      std::make_tuple(QpType::kUC, WrOpcode::kSendWithImm));
}
template <typename Info>
std::string qp_op_name(const Info& info) {
  return std::string(qp_type_name(std::get<0>(info.param))) + "_" +
         wr_opcode_name(std::get<1>(info.param));
}

// Value of "name N" in a device's counters_text(), or -1.
inline int64_t counter(const Device& d, const std::string& name) {
  std::string t = d.counters_text();
  size_t p = t.find(name + " ");
  while (p != std::string::npos && p > 0 && t[p - 1] != '\n') {
    p = t.find(name + " ", p + 1);
  }
  if (p == std::string::npos) return -1;
  return std::stoll(t.substr(p + name.size() + 1));
}

}  // namespace uccl::transport::testing
