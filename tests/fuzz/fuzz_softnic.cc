// libFuzzer target: datagrams into the software NIC's receive path
// (transport/udp/wire.h), for RC, UC and UD QPs of a real device on lo.
// The first two input bytes steer the rest past the checks a fuzzer cannot
// guess (CRCs, QPNs, PSNs, keys, the peer's source address), so every
// opcode handler sees hostile input; with steer bit 64 the input is a UDP
// GRO buffer instead, cut at a segment size its last two bytes give (the
// first datagram steered as above). After each input: nothing outside the
// registered region changed, no write the UC QP's receive guard refused
// completed, and the device still serves its QPs.
#include <arpa/inet.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/transport/soft_nic_test_access.h"
#include "transport/nic.h"
#include "transport/registry.h"
#include "transport/udp/wire.h"
#include "util/crc32c.h"

using namespace uccl::transport;
using udp::SoftNicTestAccess;
using udp::WireHeader;

namespace {

constexpr size_t kGuard = 4096;
constexpr size_t kRegion = 64 * 1024;
constexpr uint8_t kCanary = 0xA5;

// The UC QP's receive guard (QpConfig::rx_guard): refuses immediates with
// the top bit set, and tagged fragments whose tag has it; no message with
// such an immediate may complete, and nothing else may be refused.
class TopBitGuard final : public RxGuard {
 public:
  static constexpr uint32_t kRefused = 1u << 31;
  static bool refuses(const Fragment& f) {
    return (f.imm & kRefused) || (f.tagged && (f.tag & kRefused));
  }
  bool admits(uint32_t, const Fragment& f) const override {
    return !refuses(f);
  }
  void refused(uint32_t, const Fragment& f) override {
    if (!refuses(f)) std::abort();  // refused what it admits
  }
};

struct Pair {  // a QP under test and its peer on the same device
  std::unique_ptr<QueuePair> qp, peer;
};

struct World {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> scq, rcq;
  std::vector<uint8_t> mem;  // [guard][region][guard]
  std::unique_ptr<MemoryRegion> mr;
  Pair rc, uc;
  std::unique_ptr<QueuePair> ud;
  TopBitGuard guard;
  uint64_t now = 1;

  uint8_t* region() { return mem.data() + kGuard; }

  std::unique_ptr<QueuePair> make_qp(QpType t) {
    QpConfig c;
    c.type = t;
    c.pd = pd.get();
    c.send_cq = scq.get();
    c.recv_cq = rcq.get();
    c.max_recv_wr = 64;
    if (t == QpType::kUC) c.rx_guard = &guard;
    auto q = dev->create_qp(c);
    if (!q.ok()) std::abort();
    return std::move(*q);
  }
  Pair make_pair(QpType t) {
    Pair p{make_qp(t), make_qp(t)};
    if (!p.qp->connect(p.peer->local_info()).ok() ||
        !p.peer->connect(p.qp->local_info()).ok()) {
      std::abort();
    }
    return p;
  }
  void post_recvs(QueuePair* q, int n) {
    for (int i = 0; i < n; ++i) {
      Sge sge{reinterpret_cast<uint64_t>(region()) + (i % 8) * 8192, 8192,
              mr->lkey()};
      RecvWr wr;
      wr.wr_id = i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      (void)q->post_recv(&wr, nullptr);
    }
  }
  World() {
    DeviceOptions o;
    o.faults_from_knobs = false;
    auto d = open_device("udp:lo", o);
    if (!d.ok()) std::abort();
    dev = std::move(*d);
    pd = std::move(*dev->alloc_pd());
    scq = std::move(*dev->create_cq(1 << 16));
    rcq = std::move(*dev->create_cq(1 << 16));
    mem.assign(kRegion + 2 * kGuard, kCanary);
    auto m =
        pd->reg_mr(region(), kRegion,
                   kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
    if (!m.ok()) std::abort();
    mr = std::move(*m);
    rc = make_pair(QpType::kRC);
    uc = make_pair(QpType::kUC);
    ud = make_qp(QpType::kUD);
    (void)ud->activate();
    refill();
  }
  // Completions drained, receives topped up, QPs a datagram moved to ERROR
  // (a NAK about an outstanding PSN may) replaced.
  void refill() {
    WorkCompletion wc[256];
    for (int n; (n = rcq->poll(256, wc)) > 0;) {
      for (int i = 0; i < n; ++i) {
        if (wc[i].qp_num == uc.qp->qpn() &&
            wc[i].opcode == WcOpcode::kRecvWriteImm &&
            (wc[i].imm_data & TopBitGuard::kRefused)) {
          std::abort();  // a WRITE_WITH_IMM the guard refused completed
        }
      }
    }
    while (scq->poll(256, wc) > 0) {
    }
    if (rc.qp->state() == QpState::kError) rc = make_pair(QpType::kRC);
    if (uc.qp->state() == QpState::kError) uc = make_pair(QpType::kUC);
    for (QueuePair* q : {rc.qp.get(), uc.qp.get(), ud.get()}) post_recvs(q, 8);
  }
  void check_canaries() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (mem[i] != kCanary || mem[kGuard + kRegion + i] != kCanary) {
        std::abort();  // a byte outside the registered region changed
      }
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* w = new World();
  if (size < 2) return 0;
  const uint8_t target = data[0] % 4, steer = data[1];
  std::vector<uint8_t> d(data + 2, data + size);
  uint32_t segment = 0;  // a GRO buffer's, or 0: one datagram
  if ((steer & 64) && d.size() > 2) {
    const uint32_t v = d[d.size() - 2] | (d[d.size() - 1] << 8);
    d.resize(d.size() - 2);
    segment = 1 + v % static_cast<uint32_t>(d.size());
  }
  // The first datagram's length: the segment's, where it has a header.
  const size_t first =
      segment >= sizeof(WireHeader) && segment < d.size() ? segment : d.size();
  Pair* pair = target == 0 ? &w->rc : target == 1 ? &w->uc : nullptr;
  QueuePair* qp = pair ? pair->qp.get() : target == 2 ? w->ud.get() : nullptr;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  from.sin_port = htons(9);  // a stranger
  if (pair && (steer & 1))
    from = SoftNicTestAccess::source_of(pair->peer.get());
  if (d.size() >= sizeof(WireHeader) && qp) {
    WireHeader h;
    std::memcpy(&h, d.data(), sizeof(h));
    const uint32_t payload = static_cast<uint32_t>(first - sizeof(h));
    if (steer & 2) {  // addressed to the QP, from its peer
      h.magic = udp::kWireMagic;
      h.version = udp::kWireVersion;
      h.qp_type = static_cast<uint8_t>(qp->type());
      h.dst_qpn = qp->qpn();
      h.src_qpn = pair ? pair->peer->qpn() : h.src_qpn;
      h.payload_len = payload;
      if (qp->type() == QpType::kUD) h.aux = QpConfig().qkey;
    }
    if ((steer & 4) && pair) h.psn = SoftNicTestAccess::expected_psn(qp);
    if (steer & 8) {  // into the region, with its key
      h.rkey = w->mr->rkey();
      h.remote_addr =
          reinterpret_cast<uint64_t>(w->region()) + (h.remote_addr % kRegion);
    }
    if (steer & 16)
      h.payload_crc = uccl::crc32c(0, d.data() + sizeof(h), payload);
    if (steer & 32) {
      const uint32_t pc = h.payload_crc;
      h.hdr_crc = 0;
      h.payload_crc = 0;
      h.hdr_crc = uccl::crc32c(0, &h, sizeof(h));
      h.payload_crc = pc;
    }
    std::memcpy(d.data(), &h, sizeof(h));
  }
  if (segment != 0) {
    const uint32_t n = SoftNicTestAccess::take_gro_buffer(
        w->dev.get(), d.data(), static_cast<uint32_t>(d.size()), segment, from,
        w->now++);
    // Every byte in exactly one datagram, none skipped or taken twice.
    if (segment < d.size() && n != (d.size() + segment - 1) / segment) {
      std::abort();
    }
  } else {
    SoftNicTestAccess::handle_datagram(w->dev.get(), d.data(),
                                       static_cast<uint32_t>(d.size()), from,
                                       w->now++);
  }
  w->check_canaries();
  w->refill();
  return 0;
}
