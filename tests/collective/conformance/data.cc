// Scenarios of one comm pair: properties and virtual NICs, data as NCCL's
// proxy moves it, striped parts, backpressure, truncation.
#include "tests/collective/conformance/conformance.h"

namespace uccl::conformance {

// makeVDevice: a virtual NIC of one device is that device; merging several
// (up to 4 before v12, 8 in v12) is refused, as are counts past the
// version's limit and unknown devices. v12's setNetAttr takes NCCL's hints.
void scenario_vdevice(Api& a, int ndev) {
  if (!a.make_vdevice) return;  // v8 has no virtual NICs
  const int limit = a.version >= 12 ? kMaxDevsPerNicV12 : kMaxDevsPerNic;
  int devs[kMaxDevsPerNicV12] = {0, 0, 0, 0, 0, 0, 0, 0};
  int d = -7;
  CHECK_THAT(a.make_vdevice(&d, 1, devs) == kSuccess && d == 0,
             "makeVDevice of device 0: %d", d);
  devs[0] = ndev;
  CHECK_THAT(a.make_vdevice(&d, 1, devs) != kSuccess, "unknown device");
  devs[0] = 0;
  CHECK_THAT(a.make_vdevice(&d, limit, devs) != kSuccess, "merging %d devices",
             limit);
  if (a.version >= 12) {
    CHECK_THAT(a.make_vdevice(&d, kMaxDevsPerNicV12 + 1, devs) != kSuccess,
               "9 devices");
    NetAttrV12 attr;
    std::memset(&attr, 0xff, sizeof(attr));  // NCCL_NET_ATTR_INIT: all -1
    attr.sendCommAttr.maxConcurrentPeers = 4;
    attr.op = kFuncAllReduce;
    CHECK_THAT(a.set_net_attr(&attr) == kSuccess, "setNetAttr");
    CHECK_THAT(a.set_net_attr(nullptr) != kSuccess, "setNetAttr(NULL)");
  }
}

void scenario_props(Api& a) {
  int n = 0;
  REQUIRE(a.devices(&n) == kSuccess && n >= 1, "devices: %d", n);
  std::vector<std::string> names;
  for (int d = 0; d < n; ++d) {
    PropertiesV12 p;
    REQUIRE(a.props(d, &p) == kSuccess, "getProperties(%d)", d);
    REQUIRE(p.name != nullptr, "name");
    for (const auto& x : names)
      CHECK_THAT(x != p.name, "duplicate name %s", p.name);
    names.push_back(p.name);
    CHECK_THAT(p.ptrSupport == kPtrHost, "ptrSupport %d", p.ptrSupport);
    CHECK_THAT(p.speed > 0, "speed %d", p.speed);
    if (std::strcmp(p.name, "udp:lo") == 0) {
      // lo has no link speed: the one for the engines the plugin chose
      // (400000 with 8, 300000 with 12: 4 or 6 NCCL channels on one host)
      // unless the user says otherwise.
      const char* s = std::getenv("UCCL_NCCL_SPEED_MBPS");
      const int engines = g_chosen_engines.load();
      const int want =
          s ? std::atoi(s)
            : static_cast<int>(uccl::nccl::unknown_link_speed_mbps(engines));
      CHECK_THAT(p.speed == want, "udp:lo speed %d, want %d (%d engines)",
                 p.speed, want, engines);
    }
    CHECK_THAT(p.maxComms > 0, "maxComms");
    CHECK_THAT(p.maxRecvs >= 1 && p.maxRecvs <= 8, "maxRecvs %d", p.maxRecvs);
    CHECK_THAT(p.netDeviceType == kNetDeviceHost, "netDeviceType");
    if (a.version >= 9) {
      CHECK_THAT(p.maxP2pBytes > 0 && p.maxP2pBytes <= (size_t{1} << 40),
                 "maxP2pBytes %zu", p.maxP2pBytes);
      CHECK_THAT(p.maxCollBytes > 0 && p.maxCollBytes <= (size_t{1} << 40),
                 "maxCollBytes %zu", p.maxCollBytes);
      CHECK_THAT(p.vProps.ndevs == 1 && p.vProps.devs[0] == d, "vProps");
    }
    // v12: no rail or plane (NCCL_NET_ID_UNDEF); the harness sets the same
    // for older versions, which have neither field.
    CHECK_THAT(p.railId == kNetIdUndef && p.planeId == kNetIdUndef,
               "railId %d planeId %d", p.railId, p.planeId);
    std::printf("  device %d: %s speed %d Mb/s pci %s maxRecvs %d\n", d, p.name,
                p.speed, p.pciPath ? p.pciPath : "(none)", p.maxRecvs);
  }
  PropertiesV12 p;
  CHECK_THAT(a.props(n, &p) != kSuccess, "getProperties(out of range)");
  scenario_vdevice(a, n);
}

// The proxy's pattern: the receiver keeps 8 receives posted (NCCL_STEPS),
// the sender up to 32 sends; sizes vary (0 B included); every byte checked.
void scenario_data(Api& a, int steps) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const size_t kSlot = 4 << 20;
  Buffers sb, rb;
  sb.bufs.assign(32, std::vector<uint8_t>(kSlot));
  rb.bufs.assign(8, std::vector<uint8_t>(kSlot));
  // One receive region, registered twice below, overlapping (NCCL does this).
  std::vector<uint8_t> big(8 * kSlot);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  for (auto& b : sb.bufs) {
    void* mh = nullptr;
    REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    sb.mhs.push_back(mh);
  }
  void *mh_big = nullptr, *mh_part = nullptr;
  REQUIRE(a.reg_mr(rc, big.data(), big.size(), kPtrHost, &mh_big) == kSuccess,
          "regMr big");
  REQUIRE(a.reg_mr(rc, big.data() + kSlot, 2 * kSlot, kPtrHost, &mh_part) ==
              kSuccess,
          "regMr overlapping");
  void* cuda_mh = nullptr;
  CHECK_THAT(a.reg_mr(rc, big.data(), 4096, kPtrCuda, &cuda_mh) != kSuccess,
             "CUDA memory must be refused (ptrSupport is HOST)");
  std::vector<void*> sreq(steps, nullptr), rreq(steps, nullptr);
  int sent = 0, recvd = 0, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 120000000000ull;
  while ((sdone < steps || rdone < steps) && uccl::monotonic_ns() < until) {
    if (recvd < steps && recvd - rdone < 8) {
      void* data = big.data() + (recvd % 8) * kSlot;
      size_t size = kSlot;
      int tag = 7;
      void* mh = (recvd % 8 == 1 || recvd % 8 == 2) ? mh_part : mh_big;
      rreq[recvd] = reinterpret_cast<void*>(kOptionalRecvCompletion);
      int r = a.irecv(rc, 1, &data, &size, &tag, &mh, &rreq[recvd]);
      REQUIRE(r == kSuccess, "irecv step %d", recvd);
      CHECK_THAT(
          rreq[recvd] != reinterpret_cast<void*>(kOptionalRecvCompletion),
          "irecv left NCCL's optional-completion marker");
      if (rreq[recvd]) ++recvd;
    }
    if (sent < steps && sent - sdone < 32) {
      const size_t n = step_size(sent);
      auto& b = sb.bufs[sent % 32];
      uccl::fill_pattern(b.data(), n, 1000 + sent);
      int r = a.isend(sc, b.data(), n, 7, sb.mhs[sent % 32], &sreq[sent]);
      REQUIRE(r == kSuccess, "isend step %d", sent);
      if (sreq[sent]) ++sent;
    }
    if (sdone < sent) {
      int done = 0, size = -1;
      REQUIRE(a.test(sreq[sdone], &done, &size) == kSuccess, "send test");
      if (done) {
        CHECK_THAT(size == static_cast<int>(step_size(sdone)), "send size %d",
                   size);
        ++sdone;
      }
    }
    if (rdone < recvd) {
      int done = 0, size = -1;
      REQUIRE(a.test(rreq[rdone], &done, &size) == kSuccess, "recv test %d",
              rdone);
      if (done) {
        const size_t n = step_size(rdone);
        CHECK_THAT(size == static_cast<int>(n), "step %d: size %d, want %zu",
                   rdone, size, n);
        int64_t bad = uccl::find_pattern_mismatch(
            big.data() + (rdone % 8) * kSlot, n, 1000 + rdone);
        CHECK_THAT(bad < 0, "step %d: bad byte at %lld", rdone,
                   static_cast<long long>(bad));
        // iflush: host memory, nothing to do: NULL request.
        void* fr = reinterpret_cast<void*>(0x2);
        void* data = big.data();
        int fs = static_cast<int>(n);
        CHECK_THAT(a.iflush(rc, 1, &data, &fs, &mh_big, &fr) == kSuccess &&
                       fr == nullptr,
                   "iflush");
        ++rdone;
      }
    }
  }
  CHECK_THAT(sdone == steps && rdone == steps, "sends %d/%d receives %d/%d",
             sdone, steps, rdone, steps);
  closer.dismiss();
  for (void* mh : sb.mhs) CHECK_THAT(a.dereg_mr(sc, mh) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, mh_part) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, mh_big) == kSuccess, "deregMr");
  close_pair(a, sc, rc, lc);
  std::printf("  %d messages each way checked\n", steps);
}

// UCCL_NCCL_PARTS: on one comm, 40 messages of about 1 MiB (striped), 40 of
// about 1 KiB (whole), 40 of about 1 MiB; 8 receives posted at a time
// (NCCL's depth), the sender up to 32 ahead; every byte checked. Each side's
// close line counts the messages posted with all parts at once and those
// done with part 0 (short messages posted so), which follow from the mode:
// auto takes all parts at once where the message 32 before was striped.
void scenario_parts(Api& a) {
  const char* env = std::getenv("UCCL_NCCL_PARTS");
  const std::string mode = env ? env : "auto";
  constexpr int kMsgs = 120;
  auto size_of = [](int i) -> size_t {
    return i >= 40 && i < 80 ? 1000 + i : (1u << 20) + i;
  };
  int want_all = 48, want_early = 32;  // auto: [32, 72) and [112, 120)
  if (mode == "all") {
    want_all = kMsgs;
    want_early = 40;
  } else if (mode == "first") {
    want_all = want_early = 0;
  }
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const size_t kSlot = 2 << 20;
  std::vector<uint8_t> sbuf(32 * kSlot), rbuf(8 * kSlot);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  std::vector<void*> sreq(kMsgs, nullptr), rreq(kMsgs, nullptr);
  int sent = 0, recvd = 0, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 120000000000ull;
  while ((sdone < kMsgs || rdone < kMsgs) && uccl::monotonic_ns() < until) {
    if (recvd < kMsgs && recvd - rdone < 8) {
      void* data = rbuf.data() + (recvd % 8) * kSlot;
      size_t size = kSlot;
      int tag = 0;
      REQUIRE(
          a.irecv(rc, 1, &data, &size, &tag, &rmh, &rreq[recvd]) == kSuccess,
          "irecv %d", recvd);
      if (rreq[recvd]) ++recvd;
    }
    if (sent < kMsgs && sent - sdone < 32) {
      uint8_t* b = sbuf.data() + (sent % 32) * kSlot;
      uccl::fill_pattern(b, size_of(sent), 3000 + sent);
      REQUIRE(a.isend(sc, b, size_of(sent), 0, smh, &sreq[sent]) == kSuccess,
              "isend %d", sent);
      if (sreq[sent]) ++sent;
    }
    int done = 0, size = -1;
    if (sdone < sent) {
      REQUIRE(a.test(sreq[sdone], &done, &size) == kSuccess, "send test");
      if (done) {
        CHECK_THAT(size == static_cast<int>(size_of(sdone)), "send %d size %d",
                   sdone, size);
        ++sdone;
      }
    }
    if (rdone < recvd) {
      REQUIRE(a.test(rreq[rdone], &done, &size) == kSuccess, "recv test %d",
              rdone);
      if (done) {
        CHECK_THAT(size == static_cast<int>(size_of(rdone)),
                   "message %d: size %d, want %zu", rdone, size,
                   size_of(rdone));
        const int64_t bad = uccl::find_pattern_mismatch(
            rbuf.data() + (rdone % 8) * kSlot, size_of(rdone), 3000 + rdone);
        CHECK_THAT(bad < 0, "message %d: bad byte at %lld", rdone,
                   static_cast<long long>(bad));
        ++rdone;
      }
    }
  }
  CHECK_THAT(sdone == kMsgs && rdone == kMsgs, "sends %d/%d receives %d/%d",
             sdone, kMsgs, rdone, kMsgs);
  closer.dismiss();
  CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
  close_pair(a, sc, rc, lc);
  for (int side = 0; side < 2; ++side) {
    const char* name = side == 0 ? "send" : "recv";
    CHECK_THAT(g_closed_counts[side][0] == kMsgs, "%s: %d messages logged",
               name, g_closed_counts[side][0].load());
    CHECK_THAT(g_closed_counts[side][1] == want_all,
               "%s: %d messages with all parts at once, want %d (%s)", name,
               g_closed_counts[side][1].load(), want_all, mode.c_str());
    CHECK_THAT(g_closed_counts[side][2] == want_early,
               "%s: %d messages done with part 0, want %d (%s)", name,
               g_closed_counts[side][2].load(), want_early, mode.c_str());
  }
  std::printf(
      "  %d messages checked; %d with all parts at once, %d done with "
      "part 0 (%s)\n",
      kMsgs, g_closed_counts[1][1].load(), g_closed_counts[1][2].load(),
      mode.c_str());
}

// 32 requests per comm: the 33rd isend returns a NULL request (try later).
void scenario_backpressure(Api& a) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  std::vector<uint8_t> b(64 * 1024), rbuf(64 * 1024 * 8);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  uccl::fill_pattern(b.data(), b.size(), 5);
  std::vector<void*> s;
  for (int i = 0; i < kMaxRequests; ++i) {
    void* r = nullptr;
    REQUIRE(a.isend(sc, b.data(), 1024 + i, 0, smh, &r) == kSuccess, "isend %d",
            i);
    CHECK_THAT(r != nullptr, "isend %d of %d got no request", i, kMaxRequests);
    s.push_back(r);
  }
  void* extra = reinterpret_cast<void*>(0x3);
  REQUIRE(a.isend(sc, b.data(), 10, 0, smh, &extra) == kSuccess, "isend 33");
  CHECK_THAT(extra == nullptr, "the 33rd isend must return a NULL request");
  // Drain: 8 receives in flight at a time.
  int posted = 0, done = 0;
  std::vector<void*> r(kMaxRequests, nullptr);
  const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
  while (done < kMaxRequests && uccl::monotonic_ns() < until) {
    if (posted < kMaxRequests && posted - done < 8) {
      void* d = rbuf.data() + (posted % 8) * 65536;
      size_t sz = 65536;
      int tag = 0;
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &r[posted]) == kSuccess,
              "irecv");
      if (r[posted]) ++posted;
    }
    if (done < posted) {
      int dn = 0, size = 0;
      REQUIRE(a.test(r[done], &dn, &size) == kSuccess, "test");
      if (dn) {
        CHECK_THAT(size == 1024 + done, "size %d", size);
        CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data() + (done % 8) * 65536,
                                               size, 5) < 0,
                   "bytes of message %d", done);
        ++done;
      }
    }
  }
  for (void* x : s)
    CHECK_THAT(wait_req(a, x, nullptr) == kSuccess, "send done");
  CHECK_THAT(done == kMaxRequests, "received %d", done);
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// A send larger than the posted receive is an error at both ends.
void scenario_truncation(Api& a) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  std::vector<uint8_t> sbuf(8192), rbuf(8192);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  void *sr = nullptr, *rr = nullptr;
  void* d = rbuf.data();
  size_t sz = 100;
  int tag = 0;
  REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr, "irecv");
  REQUIRE(a.isend(sc, sbuf.data(), 200, 0, smh, &sr) == kSuccess && sr,
          "isend");
  const int g0 = g_warnings.load();
  CHECK_THAT(wait_req(a, rr, nullptr) > 0, "receiver must see an error");
  CHECK_THAT(wait_req(a, sr, nullptr) > 0, "sender must see an error");
  CHECK_THAT(g_warnings.load() > g0, "the error must be logged (WARN)");
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

}  // namespace uccl::conformance
