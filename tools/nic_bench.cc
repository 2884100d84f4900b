// nic_bench: perftest-style WRITE bandwidth and latency between two QPs over
// the software NIC, with a raw UDP socket baseline measured in the same run.
// The last line is "ratio_vs_raw_udp=<bw ratio at --main_size>".
#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "transport/nic.h"
#include "transport/registry.h"
#include "transport/udp/soft_nic.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/crc32c.h"
#include "util/logging.h"

DEFINE_string(device, "udp:lo", "Software NIC device for both QPs.");
DEFINE_string(qp, "rc", "QP type: rc (WRITE) or uc (WRITE_WITH_IMM).");
DEFINE_string(sizes, "4096,65536,1048576", "Message sizes in bytes.");
DEFINE_uint64(main_size, 65536, "Size whose ratio is printed last.");
DEFINE_double(duration_s, 2.0, "Seconds per bandwidth run.");
DEFINE_uint32(depth, 32, "Outstanding WRITEs (like perftest's --tx-depth).");
DEFINE_uint32(lat_size, 8, "Message size for the latency test, bytes.");
DEFINE_uint32(lat_iters, 20000, "Ping-pongs for the latency test.");
DEFINE_int32(server_core, -1, "Core for the receiving thread (-1: auto).");
DEFINE_int32(client_core, -1, "Core for the sending thread (-1: auto).");

using namespace uccl;
using namespace uccl::transport;

namespace {

struct Side {
  std::unique_ptr<Device> dev;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> scq, rcq;
  std::unique_ptr<QueuePair> qp;
  std::vector<uint8_t> buf;
  std::unique_ptr<MemoryRegion> mr;
};

Result<std::unique_ptr<Side>> make_side(QpType type, size_t bytes) {
  auto s = std::make_unique<Side>();
  UCCL_ASSIGN_OR_RETURN(s->dev, open_device(FLAGS_device));
  UCCL_ASSIGN_OR_RETURN(s->pd, s->dev->alloc_pd());
  UCCL_ASSIGN_OR_RETURN(s->scq, s->dev->create_cq(8192));
  UCCL_ASSIGN_OR_RETURN(s->rcq, s->dev->create_cq(8192));
  QpConfig cfg;
  cfg.type = type;
  cfg.pd = s->pd.get();
  cfg.send_cq = s->scq.get();
  cfg.recv_cq = s->rcq.get();
  cfg.max_send_wr = 1024;
  cfg.max_recv_wr = 4096;
  UCCL_ASSIGN_OR_RETURN(s->qp, s->dev->create_qp(cfg));
  s->buf.resize(bytes);
  UCCL_ASSIGN_OR_RETURN(
      s->mr, s->pd->reg_mr(
                 s->buf.data(), bytes,
                 kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead));
  return s;
}

void pin(int core) {
  if (core >= 0) pin_current_thread(core);
}

struct Cores {
  int server, client;
};

Cores pick_cores() {
  std::vector<int> cpus = allowed_cpus();
  Cores c{FLAGS_server_core, FLAGS_client_core};
  if (c.server < 0 && !cpus.empty()) c.server = cpus.back();
  if (c.client < 0 && cpus.size() >= 2) c.client = cpus[cpus.size() - 2];
  return c;
}

// Bytes/second of `size`-byte WRITEs from a client QP to a server QP.
double uccl_write_bw(QpType type, uint32_t size, Cores cores) {
  std::promise<QpInfo> server_info, client_info;
  std::promise<std::pair<uint64_t, uint32_t>> server_region;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> server_bytes{0};
  std::thread server([&] {
    pin(cores.server);
    auto s = make_side(type, size);
    if (!s.ok()) {
      std::fprintf(stderr, "server: %s\n", s.status().to_string().c_str());
      std::exit(1);
    }
    Side& sd = **s;
    server_info.set_value(sd.qp->local_info());
    server_region.set_value(
        {reinterpret_cast<uint64_t>(sd.buf.data()), sd.mr->rkey()});
    sd.qp->connect(client_info.get_future().get());
    RecvWr rwr;  // zero-length receives for WRITE_WITH_IMM
    for (int i = 0; i < 4096 && type == QpType::kUC; ++i) {
      sd.qp->post_recv(&rwr, nullptr);
    }
    WorkCompletion wc[64];
    uint64_t bytes = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      int n = sd.rcq->poll(64, wc);
      for (int i = 0; i < n; ++i) {
        bytes += wc[i].byte_len;
        sd.qp->post_recv(&rwr, nullptr);
      }
      sd.scq->poll(64, wc);
      server_bytes.store(bytes, std::memory_order_relaxed);
    }
  });
  pin(cores.client);
  auto c = make_side(type, size);
  if (!c.ok()) {
    std::fprintf(stderr, "client: %s\n", c.status().to_string().c_str());
    std::exit(1);
  }
  Side& cl = **c;
  client_info.set_value(cl.qp->local_info());
  cl.qp->connect(server_info.get_future().get());
  auto [raddr, rkey] = server_region.get_future().get();
  Sge sge{reinterpret_cast<uint64_t>(cl.buf.data()), size, cl.mr->lkey()};
  SendWr wr;
  wr.opcode = type == QpType::kRC ? WrOpcode::kWrite : WrOpcode::kWriteWithImm;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  uint32_t outstanding = 0;
  uint64_t completed = 0;
  WorkCompletion wc[64];
  const uint64_t warmup_ns = 200000000;  // 0.2 s
  const uint64_t t_start = monotonic_ns();
  uint64_t t0 = 0, c0 = 0, s0 = 0;
  const uint64_t t_end =
      t_start + warmup_ns + static_cast<uint64_t>(FLAGS_duration_s * 1e9);
  for (;;) {
    uint64_t now = monotonic_ns();
    if (t0 == 0 && now >= t_start + warmup_ns) {
      t0 = now;
      c0 = completed;
      s0 = server_bytes.load();
    }
    if (now >= t_end) break;
    while (outstanding < FLAGS_depth && cl.qp->post_send(&wr, nullptr).ok()) {
      ++outstanding;
    }
    int n = cl.scq->poll(64, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "write failed: %s\n",
                     wc_status_name(wc[i].status));
        std::exit(1);
      }
    }
    outstanding -= n;
    completed += n;
  }
  double secs = (monotonic_ns() - t0) / 1e9;
  uint64_t srv = server_bytes.load() - s0;
  stop = true;
  server.join();
  // RC: completions mean delivered. UC: count what the receiver got.
  double bytes = type == QpType::kRC ? (completed - c0) * double(size) : srv;
  return bytes / secs;
}

// Raw UDP: one socket each way, the same datagram sizes as the software NIC
// uses for a `size`-byte message (sendmmsg/recvmmsg batches of 32).
double raw_udp_bw(uint32_t size, uint32_t mtu, Cores cores) {
  int rx = socket(AF_INET, SOCK_DGRAM, 0);
  int bufsz = 16 << 20;
  setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof(bufsz));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(rx, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(rx, reinterpret_cast<sockaddr*>(&a), &len);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rx_bytes{0};
  std::thread receiver([&] {
    pin(cores.server);
    constexpr int kBatch = 32;
    std::vector<uint8_t> bufs(kBatch * 65536ull);
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    for (int i = 0; i < kBatch; ++i) {
      iov[i] = {bufs.data() + i * 65536ull, 65536};
      std::memset(&msgs[i], 0, sizeof(msgs[i]));
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t bytes = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      int n = recvmmsg(rx, msgs, kBatch, MSG_DONTWAIT, nullptr);
      for (int i = 0; i < n; ++i) bytes += msgs[i].msg_len;
      rx_bytes.store(bytes, std::memory_order_relaxed);
    }
  });
  pin(cores.client);
  int tx = socket(AF_INET, SOCK_DGRAM, 0);
  setsockopt(tx, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof(bufsz));
  connect(tx, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::vector<uint8_t> payload(size ? size : 1);
  // The datagrams of one message, as the NIC would cut it.
  std::vector<iovec> iov;
  for (uint32_t off = 0; off < size || (size == 0 && off == 0);) {
    uint32_t frag = std::min(mtu, size - off);
    iov.push_back({payload.data() + off, frag});
    off += frag;
    if (size == 0) break;
  }
  std::vector<mmsghdr> msgs(iov.size());
  for (size_t i = 0; i < iov.size(); ++i) {
    std::memset(&msgs[i], 0, sizeof(msgs[i]));
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const uint64_t warmup_ns = 200000000;
  uint64_t t_start = monotonic_ns(), t0 = 0, b0 = 0;
  uint64_t t_end =
      t_start + warmup_ns + static_cast<uint64_t>(FLAGS_duration_s * 1e9);
  for (;;) {
    uint64_t now = monotonic_ns();
    if (t0 == 0 && now >= t_start + warmup_ns) {
      t0 = now;
      b0 = rx_bytes.load();
    }
    if (now >= t_end) break;
    for (size_t i = 0; i < msgs.size();) {
      int n = sendmmsg(tx, msgs.data() + i, msgs.size() - i, 0);
      if (n <= 0) break;
      i += n;
    }
  }
  double secs = (monotonic_ns() - t0) / 1e9;
  uint64_t got = rx_bytes.load() - b0;
  stop = true;
  receiver.join();
  close(tx);
  close(rx);
  return got / secs;
}

struct Lat {
  double p50_us, p99_us;
};

Lat summarize(std::vector<uint64_t>& rtt_ns) {
  std::sort(rtt_ns.begin(), rtt_ns.end());
  auto at = [&](double q) {
    return rtt_ns[std::min(rtt_ns.size() - 1, size_t(q * rtt_ns.size()))] / 2e3;
  };
  return {at(0.5), at(0.99)};  // one-way = RTT / 2, as perftest reports
}

// One side of the SEND ping-pong: its buffer as the only SGE, 64 receives
// posted, and the (unsignaled, small ones inline) send it answers with.
struct PingPong {
  Sge sge;
  RecvWr rwr;
  SendWr wr;
  PingPong(Side& sd, uint32_t size)
      : sge{reinterpret_cast<uint64_t>(sd.buf.data()), size, sd.mr->lkey()} {
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    for (int i = 0; i < 64; ++i) sd.qp->post_recv(&rwr, nullptr);
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.signaled = false;
    wr.inline_data = size <= 256;
  }
  PingPong(const PingPong&) = delete;  // the WRs point at sge
  PingPong& operator=(const PingPong&) = delete;
};

Lat uccl_latency(QpType type, uint32_t size, Cores cores) {
  std::promise<QpInfo> server_info, client_info;
  std::atomic<bool> stop{false};
  std::thread server([&] {
    pin(cores.server);
    auto s = make_side(type, 65536);
    Side& sd = **s;
    server_info.set_value(sd.qp->local_info());
    sd.qp->connect(client_info.get_future().get());
    PingPong pp(sd, size);
    WorkCompletion wc[16];
    while (!stop.load(std::memory_order_relaxed)) {
      int n = sd.rcq->poll(16, wc);
      for (int i = 0; i < n; ++i) {
        sd.qp->post_recv(&pp.rwr, nullptr);
        sd.qp->post_send(&pp.wr, nullptr);
      }
      sd.scq->poll(16, wc);
    }
  });
  pin(cores.client);
  auto c = make_side(type, 65536);
  Side& cl = **c;
  client_info.set_value(cl.qp->local_info());
  cl.qp->connect(server_info.get_future().get());
  PingPong pp(cl, size);
  std::vector<uint64_t> rtt;
  rtt.reserve(FLAGS_lat_iters);
  WorkCompletion rwc[16], swc[16];
  for (uint32_t it = 0; it < FLAGS_lat_iters + 1000; ++it) {
    uint64_t t = monotonic_ns();
    cl.qp->post_send(&pp.wr, nullptr);
    int got = 0;
    while (got == 0) {
      got = cl.rcq->poll(16, rwc);
      cl.scq->poll(16, swc);
    }
    cl.qp->post_recv(&pp.rwr, nullptr);
    if (it >= 1000) rtt.push_back(monotonic_ns() - t);
  }
  stop = true;
  server.join();
  return summarize(rtt);
}

Lat raw_udp_latency(uint32_t size, Cores cores) {
  int s1 = socket(AF_INET, SOCK_DGRAM, 0), s2 = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{}, b{};
  a.sin_family = b.sin_family = AF_INET;
  a.sin_addr.s_addr = b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s1, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  bind(s2, reinterpret_cast<sockaddr*>(&b), sizeof(b));
  socklen_t l = sizeof(a);
  getsockname(s1, reinterpret_cast<sockaddr*>(&a), &l);
  getsockname(s2, reinterpret_cast<sockaddr*>(&b), &l);
  connect(s1, reinterpret_cast<sockaddr*>(&b), sizeof(b));
  connect(s2, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    pin(cores.server);
    std::vector<uint8_t> buf(65536);
    while (!stop.load(std::memory_order_relaxed)) {
      ssize_t n = recv(s2, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n >= 0) send(s2, buf.data(), n, 0);
    }
  });
  pin(cores.client);
  std::vector<uint8_t> buf(std::max<uint32_t>(size, 1));
  std::vector<uint64_t> rtt;
  for (uint32_t it = 0; it < FLAGS_lat_iters + 1000; ++it) {
    uint64_t t = monotonic_ns();
    send(s1, buf.data(), size, 0);
    while (recv(s1, buf.data(), buf.size(), MSG_DONTWAIT) < 0) {
    }
    if (it >= 1000) rtt.push_back(monotonic_ns() - t);
  }
  stop = true;
  echo.join();
  close(s1);
  close(s2);
  return summarize(rtt);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "WRITE bandwidth/latency over the software NIC vs raw UDP sockets.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  init_logging(argv[0]);
  QpType type;
  if (FLAGS_qp == "rc") {
    type = QpType::kRC;
  } else if (FLAGS_qp == "uc") {
    type = QpType::kUC;
  } else {
    std::fprintf(stderr, "--qp must be rc or uc\n");
    return 2;
  }
  std::vector<uint32_t> sizes;
  std::stringstream ss(FLAGS_sizes);
  for (std::string t; std::getline(ss, t, ',');) sizes.push_back(std::stoul(t));
  auto probe = open_device(FLAGS_device);
  if (!probe.ok()) {
    std::fprintf(stderr, "%s\n", probe.status().to_string().c_str());
    return 1;
  }
  const uint32_t mtu = (*probe)->info().mtu_bytes;
  probe->reset();
  Cores cores = pick_cores();
  std::printf(
      "nic_bench: %s %s %s, depth %u, %.1f s per run, cores "
      "server=%d client=%d, mtu %u, crc32c %s\n",
      FLAGS_device.c_str(), FLAGS_qp == "rc" ? "RC" : "UC",
      type == QpType::kRC ? "RDMA_WRITE" : "RDMA_WRITE_WITH_IMM", FLAGS_depth,
      FLAGS_duration_s, cores.server, cores.client, mtu,
      crc32c_impl_name(crc32c_impl()));
  std::printf("%10s %14s %14s %8s\n", "bytes", "uccl GB/s", "raw UDP GB/s",
              "ratio");
  double main_ratio = 0;
  for (uint32_t size : sizes) {
    double u = uccl_write_bw(type, size, cores);
    double r = raw_udp_bw(size, mtu, cores);
    double ratio = r > 0 ? u / r : 0;
    if (size == FLAGS_main_size) main_ratio = ratio;
    std::printf("%10u %14.3f %14.3f %8.3f\n", size, u / 1e9, r / 1e9, ratio);
    std::fflush(stdout);
  }
  Lat ul = uccl_latency(type, FLAGS_lat_size, cores);
  Lat rl = raw_udp_latency(FLAGS_lat_size, cores);
  std::printf(
      "latency %u B one-way: uccl p50 %.2f us p99 %.2f us | raw UDP "
      "p50 %.2f us p99 %.2f us\n",
      FLAGS_lat_size, ul.p50_us, ul.p99_us, rl.p50_us, rl.p99_us);
  std::printf("ratio_vs_raw_udp=%.3f\n", main_ratio);
  return 0;
}
