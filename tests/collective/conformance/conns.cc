// Scenarios of connections: port scans, an endpoint per GPU, flushes,
// grouped receives, closing comms with requests in flight.
#include "tests/collective/conformance/conformance.h"

namespace uccl::conformance {

// One message from sc to rc, checked byte for byte: both buffers registered,
// the receive (rbuf, which may be longer) and the send posted, then both
// tested in turn until done, as NCCL's proxy does (a striped message's
// receiver posts parts 1..K-1 from test() once part 0 shows the stripe).
void exchange_once(Api& a, void* sc, void* rc, std::vector<uint8_t>& sbuf,
                   std::vector<uint8_t>& rbuf, const char* what) {
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "%s: regMr", what);
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "%s: regMr", what);
  void *sr = nullptr, *rr = nullptr;
  void* d = rbuf.data();
  size_t sz = rbuf.size();
  int tag = 0;
  REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr,
          "%s: irecv", what);
  REQUIRE(a.isend(sc, sbuf.data(), sbuf.size(), 0, smh, &sr) == kSuccess && sr,
          "%s: isend", what);
  int got = -1, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
  while ((!sdone || !rdone) && uccl::monotonic_ns() < until) {
    if (!sdone) {
      REQUIRE(a.test(sr, &sdone, nullptr) == kSuccess, "%s: test send", what);
    }
    if (!rdone) {
      REQUIRE(a.test(rr, &rdone, &got) == kSuccess, "%s: test recv", what);
    }
  }
  REQUIRE(sdone && rdone, "%s: send %s, receive %s after 60 s", what,
          sdone ? "done" : "pending", rdone ? "done" : "pending");
  CHECK_THAT(got == static_cast<int>(sbuf.size()), "%s: received %d bytes",
             what, got);
  CHECK_THAT(std::memcmp(rbuf.data(), sbuf.data(), sbuf.size()) == 0,
             "%s: bytes differ", what);
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
}

// A port scan of the listen comm's bootstrap port (connects that close at
// once, garbage, a silent connection) must not end the listen comm: it
// still accepts NCCL's own connections, and they carry data.
void scenario_portscan(Api& a) {
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
  uint16_t port = 0;  // ConnectHandle::port (collective/net_plugin.cc)
  std::memcpy(&port, handle + 12, sizeof(port));
  REQUIRE(port != 0, "no port in the handle");
  auto knock = [&](const char* bytes, size_t n) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 && n) {
      (void)!send(fd, bytes, n, 0);
    }
    return fd;
  };
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  int silent = knock(nullptr, 0);
  for (int i = 0; i < 20; ++i) {
    close(i % 2 ? knock(junk, sizeof(junk)) : knock(nullptr, 0));
  }
  void* rc = nullptr;
  REQUIRE(a.accept(lc, &rc) == kSuccess && rc == nullptr,
          "accept after a port scan");
  void* sc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while ((sc == nullptr || rc == nullptr) && uccl::monotonic_ns() < until) {
    if (sc == nullptr)
      REQUIRE(a.connect(0, handle, &sc) == kSuccess, "connect");
    if (rc == nullptr) REQUIRE(a.accept(lc, &rc) == kSuccess, "accept");
  }
  REQUIRE(sc != nullptr && rc != nullptr, "connect/accept after a port scan");
  std::vector<uint8_t> sbuf(100000), rbuf(100000);
  uccl::fill_pattern(sbuf.data(), sbuf.size(), 3);
  exchange_once(a, sc, rc, sbuf, rbuf, "after a port scan");
  close(silent);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// One process driving two GPUs (ncclCommInitAll): each GPU's calls get an
// endpoint of their own, keyed by the caller's CUDA device, and comms
// between them carry data. A caller with no CUDA context shares a third.
void scenario_per_gpu(Api& a) {
  REQUIRE(g_fake_set_device != nullptr, "fake libcuda not loaded");
  g_fake_set_device(0);
  char handle[kHandleMaxSize];
  void *lc = nullptr, *rc = nullptr, *sc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen on GPU 0");
  std::atomic<bool> connected{false};
  std::thread gpu1([&] {  // GPU 1's proxy thread connects
    g_fake_set_device(1);
    const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
    while (sc == nullptr && uccl::monotonic_ns() < until) {
      if (a.connect(0, handle, &sc) != kSuccess) break;
    }
    connected = sc != nullptr;
  });
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (rc == nullptr && uccl::monotonic_ns() < until) {
    if (a.accept(lc, &rc) != kSuccess) break;
  }
  gpu1.join();
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  REQUIRE(connected.load() && rc != nullptr, "GPU 1 -> GPU 0 comm");
  CHECK_THAT(g_endpoints_up[1] == 1 && g_endpoints_up[2] == 1,
             "endpoints: GPU 0 %d, GPU 1 %d", g_endpoints_up[1].load(),
             g_endpoints_up[2].load());
  // GPU 0 again: its endpoint; a thread without a context: a shared one.
  char h2[kHandleMaxSize];
  void* lc2 = nullptr;
  REQUIRE(a.listen(0, h2, &lc2) == kSuccess, "second listen on GPU 0");
  CHECK_THAT(g_endpoints_up[1] == 1, "GPU 0 got a second endpoint");
  a.close_listen(lc2);
  std::thread none([&] {
    char h3[kHandleMaxSize];
    void* lc3 = nullptr;
    if (a.listen(0, h3, &lc3) == kSuccess) a.close_listen(lc3);
  });
  none.join();
  CHECK_THAT(g_endpoints_up[0] == 1, "no-context endpoint: %d",
             g_endpoints_up[0].load());
  // Data across the two GPUs' endpoints, every byte checked.
  std::vector<uint8_t> sbuf(1 << 20), rbuf(1 << 20);
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(
      a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess &&
          a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
      "regMr");
  for (int m = 0; m < 20; ++m) {
    const size_t len = (m * 77773) % sbuf.size();
    uccl::fill_pattern(sbuf.data(), len, 40 + m);
    int got = -1;
    REQUIRE(send_one(a, sc, rc, smh, rmh, sbuf.data(), len, rbuf.data(),
                     rbuf.size(), &got),
            "message %d", m);
    CHECK_THAT(got == static_cast<int>(len), "message %d: %d bytes", m, got);
    CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data(), len, 40 + m) == -1,
               "message %d corrupted", m);
  }
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
}

// iflush after each receive, as NCCL calls it for GPU memory: with
// UCCL_NCCL_FLUSH=read a one-byte read back through the endpoint's
// loopback connection (collective/gpu_direct.h) that must complete; with
// the default, host memory needs none (a NULL request).
void scenario_flush(Api& a) {
  const char* mode = std::getenv("UCCL_NCCL_FLUSH");
  const bool reads = mode != nullptr && std::string(mode) == "read";
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  std::vector<uint8_t> sbuf(1 << 20), rbuf(2 << 20);
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(
      a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess &&
          a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
      "regMr");
  int flushed = 0;
  for (int m = 0; m < 40; ++m) {
    const size_t len = 1 + (m * 52361) % sbuf.size();
    uccl::fill_pattern(sbuf.data(), len, 90 + m);
    // Receive at an offset of the region: the read-back's offset follows.
    uint8_t* at = rbuf.data() + (m % 3) * 4096;
    void* data = at;
    int got = -1;
    REQUIRE(send_one(a, sc, rc, smh, rmh, sbuf.data(), len, at, sbuf.size(),
                     &got) &&
                got == static_cast<int>(len),
            "message %d", m);
    void* fr = reinterpret_cast<void*>(0x1);
    int fsize = got;
    REQUIRE(a.iflush(rc, 1, &data, &fsize, &rmh, &fr) == kSuccess, "iflush");
    if (!reads) {
      CHECK_THAT(fr == nullptr, "host memory needs no flush");
      continue;
    }
    REQUIRE(fr != nullptr, "iflush %d: no request", m);
    REQUIRE(wait_req(a, fr, nullptr) == kSuccess, "flush %d", m);
    ++flushed;
    CHECK_THAT(uccl::find_pattern_mismatch(at, len, 90 + m) == -1,
               "message %d corrupted", m);
  }
  CHECK_THAT(!reads || flushed == 40, "%d flushes", flushed);
  closer.dismiss();
  CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
  close_pair(a, sc, rc, lc);
  std::printf("  40 messages, %d flushes read back\n", flushed);
}

// maxRecvs > 1 (UCCL_NCCL_MAX_RECVS=8): grouped receives, tags pick buffers.
void scenario_grouped(Api& a) {
  PropertiesV12 p;
  REQUIRE(a.props(0, &p) == kSuccess, "props");
  REQUIRE(p.maxRecvs == 8, "run with UCCL_NCCL_MAX_RECVS=8 (maxRecvs %d)",
          p.maxRecvs);
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const int n = 4;
  std::vector<uint8_t> sbuf(4 * 65536), rbuf(4 * 65536);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  for (int round = 0; round < 3; ++round) {
    void* data[n];
    size_t sizes[n];
    int tags[n];
    void* mhs[n];
    for (int i = 0; i < n; ++i) {
      data[i] = rbuf.data() + i * 65536;
      sizes[i] = 65536;
      tags[i] = 10 + i;
      mhs[i] = rmh;
    }
    void* rr = nullptr;
    REQUIRE(a.irecv(rc, n, data, sizes, tags, mhs, &rr) == kSuccess && rr,
            "grouped irecv");
    const int order[n] = {2, 0, 3, 1};  // sent out of tag order
    std::vector<void*> sr;
    for (int k = 0; k < n; ++k) {
      const int i = order[k];
      uint8_t* b = sbuf.data() + i * 65536;
      const size_t len = 1000 * (i + 1) + round;
      uccl::fill_pattern(b, len, 50 + i + round * 10);
      void* r = nullptr;
      REQUIRE(a.isend(sc, b, len, 10 + i, smh, &r) == kSuccess && r, "isend");
      sr.push_back(r);
    }
    int got[n];
    CHECK_THAT(wait_req(a, rr, got) == kSuccess, "grouped receive");
    for (int i = 0; i < n; ++i) {
      const size_t len = 1000 * (i + 1) + round;
      CHECK_THAT(got[i] == static_cast<int>(len), "buffer %d size %d", i,
                 got[i]);
      CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data() + i * 65536, len,
                                             50 + i + round * 10) < 0,
                 "buffer %d (tag %d) has another message's bytes", i, 10 + i);
    }
    for (void* r : sr) CHECK_THAT(wait_req(a, r, nullptr) == kSuccess, "send");
  }
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// Close orders NCCL may use: with requests pending, receiver first, sender
// first, and a listen comm closed before anything connected.
void scenario_close(Api& a) {
  for (int order = 0; order < 2; ++order) {
    void *sc, *rc, *lc;
    REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
    // Separate buffers: the two sides run on different engine threads.
    std::vector<uint8_t> sbuf(1 << 20), buf(1 << 20);
    CloseOnReturn closer(a, {sc}, {rc}, {lc});
    void *smh, *rmh;
    REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
            "regMr");
    REQUIRE(a.reg_mr(rc, buf.data(), buf.size(), kPtrHost, &rmh) == kSuccess,
            "regMr");
    // A completed exchange, then pending ones in the direction closed.
    void *sr = nullptr, *rr = nullptr;
    void* d = buf.data();
    size_t sz = buf.size();
    int tag = 0;
    REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr,
            "irecv");
    REQUIRE(a.isend(sc, sbuf.data(), 4096, 0, smh, &sr) == kSuccess && sr,
            "isend");
    CHECK_THAT(wait_req(a, rr, nullptr) == kSuccess, "recv");
    CHECK_THAT(wait_req(a, sr, nullptr) == kSuccess, "send");
    // A handle belongs to the comm it was registered on; one left
    // registered on each comm is deregistered by the close.
    void *left_s = nullptr, *left_r = nullptr;
    REQUIRE(a.reg_mr(sc, sbuf.data(), 8192, kPtrHost, &left_s) == kSuccess,
            "regMr");
    REQUIRE(a.reg_mr(rc, buf.data(), 8192, kPtrHost, &left_r) == kSuccess,
            "regMr");
    CHECK_THAT(a.dereg_mr(rc, left_s) != kSuccess,
               "deregMr of the send comm's handle on the recv comm");
    const int closed_mrs = g_closed_mrs.load();
    void* pending = nullptr;
    closer.dismiss();  // each branch closes everything, in its order
    if (order == 0) {
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &pending) == kSuccess,
              "irecv");
      CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_recv(rc) == kSuccess,
                 "closeRecv with a receive pending");
      CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend after the peer left");
    } else {
      REQUIRE(a.isend(sc, sbuf.data(), 4096, 0, smh, &pending) == kSuccess,
              "isend");
      CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend with a send pending");
      CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_recv(rc) == kSuccess, "closeRecv after the peer left");
    }
    CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
    CHECK_THAT(g_closed_mrs.load() == closed_mrs + 2,
               "closing freed %d memory handles, want 2",
               g_closed_mrs.load() - closed_mrs);
  }
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess && lc, "listen");
  CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen unused");
}

}  // namespace uccl::conformance
