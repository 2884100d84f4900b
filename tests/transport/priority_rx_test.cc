// Software NIC's priority receive socket: a control QP's datagram is taken
// ahead of a data backlog, and an idle owner waiting on wait_fd() wakes for it.
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tests/transport/nic_test_util.h"
#include "transport/udp/soft_nic.h"

namespace uccl::transport::testing {
namespace {

constexpr int kBacklog = 400;  // > one progress() call's receive budget (128)
constexpr uint32_t kWriteBytes = 1024;

// Device A, device B and, between them, a UC data QP pair and a UC QP pair
// for a control SEND whose QPs ask for priority_rx when `priority`.
struct Pair {
  std::unique_ptr<Device> a, b;
  std::unique_ptr<ProtectionDomain> apd, bpd;
  std::unique_ptr<CompletionQueue> acq, bcq;
  std::vector<uint8_t> abuf, bbuf;
  std::unique_ptr<MemoryRegion> amr, bmr;
  std::unique_ptr<QueuePair> data_a, data_b, ctrl_a, ctrl_b;

  // `priority`: the devices open their priority sockets and the control
  // QPs ask for them.
  bool open(bool priority) {
    DeviceOptions o = Side::no_faults();
    // GRO off: it would take the backlog's datagrams (sent in GSO runs)
    // a few dozen per receive, and the backlog would be gone in one call.
    o.backend_params = priority ? "priority_rx=1,gro=0" : "priority_rx=0,gro=0";
    auto da = open_device("udp:lo", o);
    auto db = open_device("udp:lo", o);
    if (!da.ok() || !db.ok()) return false;
    a = std::move(*da);
    b = std::move(*db);
    b->set_owner_driven(true);  // B moves only when the test says so
    apd = std::move(*a->alloc_pd());
    bpd = std::move(*b->alloc_pd());
    acq = std::move(*a->create_cq(4096));
    bcq = std::move(*b->create_cq(4096));
    abuf.assign(kWriteBytes, 7);
    bbuf.assign(kBacklog * kWriteBytes + 256, 0);
    amr = std::move(*apd->reg_mr(abuf.data(), abuf.size(), 0));
    bmr = std::move(*bpd->reg_mr(bbuf.data(), bbuf.size(),
                                 kAccessLocalWrite | kAccessRemoteWrite));
    QpConfig cfg;
    cfg.type = QpType::kUC;
    cfg.max_send_wr = 2 * kBacklog;
    auto make = [&](bool on_a, bool prio) {
      cfg.pd = on_a ? apd.get() : bpd.get();
      cfg.send_cq = cfg.recv_cq = on_a ? acq.get() : bcq.get();
      cfg.priority_rx = prio;
      return std::move(*(on_a ? a : b)->create_qp(cfg));
    };
    data_a = make(true, false);
    data_b = make(false, false);
    ctrl_a = make(true, priority);
    ctrl_b = make(false, priority);
    return data_a->connect(data_b->local_info()).ok() &&
           data_b->connect(data_a->local_info()).ok() &&
           ctrl_a->connect(ctrl_b->local_info()).ok() &&
           ctrl_b->connect(ctrl_a->local_info()).ok();
  }

  // Polls A (which progresses A) until `n` sends completed; UC sends
  // complete once sent, and on loopback a sent datagram is in B's socket.
  bool a_sent(int n) {
    WorkCompletion wc[64];
    const uint64_t deadline = monotonic_ns() + 10'000'000'000ull;
    for (int done = 0; done < n;) {
      if (monotonic_ns() > deadline) return false;
      const int k = acq->poll(64, wc);
      for (int i = 0; i < k; ++i) {
        if (wc[i].status != WcStatus::kSuccess) return false;
      }
      done += k;
    }
    return true;
  }

  // A fills B's data socket with kBacklog WRITEs, then sends the control
  // SEND (B has its receive posted).
  bool backlog_then_send() {
    Sge rs{reinterpret_cast<uint64_t>(bbuf.data()) + kBacklog * kWriteBytes,
           256, bmr->lkey()};
    RecvWr rw;
    rw.wr_id = 77;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    if (!ctrl_b->post_recv(&rw, nullptr).ok()) return false;
    Sge ss{reinterpret_cast<uint64_t>(abuf.data()), kWriteBytes, amr->lkey()};
    for (int i = 0; i < kBacklog; ++i) {
      SendWr w;
      w.wr_id = static_cast<uint64_t>(i);
      w.opcode = WrOpcode::kWrite;
      w.sg_list = &ss;
      w.num_sge = 1;
      w.remote_addr = reinterpret_cast<uint64_t>(bbuf.data()) + i * kWriteBytes;
      w.rkey = bmr->rkey();
      if (!data_a->post_send(&w, nullptr).ok()) return false;
    }
    if (!a_sent(kBacklog)) return false;
    SendWr s;
    s.wr_id = 1;
    s.opcode = WrOpcode::kSend;
    s.sg_list = &ss;
    s.num_sge = 1;
    ss.length = 100;
    return ctrl_a->post_send(&s, nullptr).ok() && a_sent(1);
  }

  // B's receive completions now, without progressing B.
  int b_completions() {
    WorkCompletion wc[8];
    int n = 0;
    for (int k; (k = bcq->poll(8, wc)) > 0;) {
      for (int i = 0; i < k; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
        EXPECT_EQ(wc[i].wr_id, 77u);
      }
      n += k;
    }
    return n;
  }
};

// Whether B completed the control SEND in its first progress() call after
// the backlog and the SEND reached its sockets. Either way, every datagram
// is taken in the end and the SEND completes once.
bool send_done_in_first_progress(bool priority) {
  Pair p;
  EXPECT_TRUE(p.open(priority));
  if (::testing::Test::HasFailure()) return false;
  EXPECT_TRUE(p.backlog_then_send());
  p.b->progress();
  const bool first = p.b_completions() == 1;
  int total = first ? 1 : 0;
  for (int i = 0;
       i < 2 * kBacklog && counter(*p.b, "rx_packets") < kBacklog + 1; ++i) {
    p.b->progress();
  }
  total += p.b_completions();
  EXPECT_EQ(counter(*p.b, "rx_packets"), kBacklog + 1);
  EXPECT_EQ(total, 1);
  EXPECT_EQ(p.b->drops(), 0u);
  return first;
}

TEST(PriorityRx, AControlDatagramIsTakenAheadOfADataBacklog) {
  EXPECT_TRUE(send_done_in_first_progress(true));
}

// The same with one receive socket (priority_rx=0, the default): the SEND
// waits behind the backlog (one progress() call takes 128 datagrams),
// which is what the priority socket is for.
TEST(PriorityRx, WithoutItTheSendWaitsBehindTheBacklog) {
  EXPECT_FALSE(send_done_in_first_progress(false));
}

// An owner idle on wait_fd() wakes for a datagram on either socket.
TEST(PriorityRx, WaitFdWakesForEitherSocket) {
  for (bool priority : {false, true}) {
    SCOPED_TRACE(priority ? "priority QP" : "data QP");
    Pair p;
    ASSERT_TRUE(p.open(priority));
    const int fd = p.b->wait_fd();
    ASSERT_GE(fd, 0);
    pollfd pf{fd, POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 0), 0) << "readable before anything was sent";
    Sge rs{reinterpret_cast<uint64_t>(p.bbuf.data()), 256, p.bmr->lkey()};
    RecvWr rw;
    rw.wr_id = 77;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ASSERT_TRUE(p.ctrl_b->post_recv(&rw, nullptr).ok());
    Sge ss{reinterpret_cast<uint64_t>(p.abuf.data()), 100, p.amr->lkey()};
    SendWr s;
    s.wr_id = 1;
    s.opcode = WrOpcode::kSend;
    s.sg_list = &ss;
    s.num_sge = 1;
    ASSERT_TRUE(p.ctrl_a->post_send(&s, nullptr).ok());
    ASSERT_TRUE(p.a_sent(1));
    ASSERT_EQ(poll(&pf, 1, 5000), 1) << "no wake-up for the datagram";
    p.b->progress();
    EXPECT_EQ(p.b_completions(), 1);
  }
}

}  // namespace
}  // namespace uccl::transport::testing
