// p2p vectored transfers on loopback: sendv/recvv pair slice by slice in
// order, writev/readv land each slice at its own remote offset, and a bad
// slice anywhere refuses the whole call before anything moves.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/p2p/p2p_fixture.h"
#include "uccl/p2p.h"
#include "util/pattern.h"

namespace uccl::p2p {
namespace {

// Slice lengths: empty, tiny, a page, past the stripe (both engines).
const std::vector<size_t> kLens = {0, 1, 4096, 700000, 33};

size_t total(const std::vector<size_t>& lens) {
  size_t t = 0;
  for (size_t n : lens) t += n;
  return t;
}

TEST(P2pVectored, SendvRecvvPairSliceBySlice) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  const size_t sum = total(kLens);
  Mem sb(p->client.get(), sum), rb(p->server.get(), sum + 64 * kLens.size());
  std::vector<IoSlice> out, in;
  size_t so = 0, ro = 0;
  for (size_t i = 0; i < kLens.size(); ++i) {
    fill_pattern(sb.ptr(so), kLens[i], 300 + i);
    out.push_back({sb.id, sb.ptr(so), kLens[i]});
    // Each receive slice has room to spare: a message ends where it ends.
    in.push_back({rb.id, rb.ptr(ro), kLens[i] + 64});
    so += kLens[i];
    ro += kLens[i] + 64;
  }
  auto r = p->server->recvv_async(p->s_conn, in);
  auto s = p->client->sendv_async(p->c_conn, out);
  ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
  size_t sent = 0, got = 0;
  wait_both(p.get(), *s, *r, &sent, &got);
  if (HasFatalFailure()) return;
  EXPECT_EQ(sent, sum);
  EXPECT_EQ(got, sum);
  ro = 0;
  for (size_t i = 0; i < kLens.size(); ++i) {
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(ro), kLens[i], 300 + i), -1) << i;
    ro += kLens[i] + 64;
  }
  // The pool is whole again: a plain message after them still pairs.
  send_recv(p.get(), {5000}, 400);
}

TEST(P2pVectored, WritevReadvLandAtTheirOffsets) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  constexpr size_t kRegion = 2 << 20;
  Mem region(p->server.get(), kRegion), local(p->client.get(), kRegion);
  auto adv = p->server->advertise(region.id, 0, kRegion);
  ASSERT_TRUE(adv.ok()) << adv.status();
  // Slices reversed: local slice i goes to remote offset kRegion - end(i).
  std::vector<IoSlice> src;
  std::vector<RemoteSlice> dst;
  size_t off = 0;
  for (size_t i = 0; i < kLens.size(); ++i) {
    if (kLens[i] == 0) continue;  // one-sided slices move bytes
    fill_pattern(local.ptr(off), kLens[i], 500 + i);
    src.push_back({local.id, local.ptr(off), kLens[i]});
    dst.push_back({*adv, kRegion - off - kLens[i]});
    off += kLens[i];
  }
  auto w = p->client->writev_async(p->c_conn, src, dst);
  ASSERT_TRUE(w.ok()) << w.status();
  size_t n = 0;
  ASSERT_TRUE(p->client->wait(*w, 30000, &n).ok());
  EXPECT_EQ(n, off);
  send_recv(p.get(), {8}, 60);  // the target learns of the writes after them
  for (size_t i = 0, o = 0; i < kLens.size(); ++i) {
    if (kLens[i] == 0) continue;
    EXPECT_EQ(find_pattern_mismatch(region.ptr(kRegion - o - kLens[i]),
                                    kLens[i], 500 + i),
              -1)
        << i;
    o += kLens[i];
  }
  std::memset(local.ptr(), 0, kRegion);
  auto r = p->client->readv_async(p->c_conn, src, dst);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(p->client->wait(*r, 30000, &n).ok());
  EXPECT_EQ(n, off);
  for (size_t i = 0, o = 0; i < kLens.size(); ++i) {
    if (kLens[i] == 0) continue;
    EXPECT_EQ(find_pattern_mismatch(local.ptr(o), kLens[i], 500 + i), -1) << i;
    o += kLens[i];
  }
}

TEST(P2pVectored, OneBadSliceRefusesTheWholeCall) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  Mem sb(p->client.get(), 8192), other(p->client.get(), 64);
  Mem region(p->server.get(), 8192);
  auto adv = p->server->advertise(region.id, 0, 8192);
  ASSERT_TRUE(adv.ok());
  const IoSlice good{sb.id, sb.ptr(), 100};
  auto code = [](const Result<XferHandle>& r) {
    return r.ok() ? StatusCode::kOk : r.status().code();
  };
  // Empty, too long, a slice outside its memory, an unknown memory id.
  EXPECT_EQ(code(p->client->sendv_async(p->c_conn, {})),
            StatusCode::kInvalidArgument);
  std::vector<IoSlice> many(kMaxSlices + 1, good);
  EXPECT_EQ(code(p->client->sendv_async(p->c_conn, many)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code(p->client->sendv_async(p->c_conn, {good, {other.id, sb.ptr(), 10}})),
      StatusCode::kOutOfRange);
  EXPECT_EQ(code(p->client->sendv_async(p->c_conn, {good, {999, sb.ptr(), 1}})),
            StatusCode::kInvalidArgument);
  // Counts that differ, and a remote range past the advertised region.
  EXPECT_EQ(code(p->client->writev_async(p->c_conn, {good, good}, {{*adv, 0}})),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(p->client->writev_async(p->c_conn, {good, good},
                                         {{*adv, 0}, {*adv, 8150}})),
            StatusCode::kOutOfRange);
  // None of them sent a slice: the next message is the first to arrive.
  Mem rb(p->server.get(), 64);
  fill_pattern(sb.ptr(), 10, 77);
  auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), 64);
  auto s = p->client->send_async(p->c_conn, sb.id, sb.ptr(), 10);
  ASSERT_TRUE(r.ok() && s.ok());
  size_t got = 0;
  wait_both(p.get(), *s, *r, nullptr, &got);
  EXPECT_EQ(got, 10u);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), 10, 77), -1);
}

TEST(P2pVectored, ASliceTooBigForItsReceiveFailsTheHandle) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  Mem sb(p->client.get(), 4096), rb(p->server.get(), 4096);
  auto r = p->server->recvv_async(
      p->s_conn, {{rb.id, rb.ptr(), 100}, {rb.id, rb.ptr(100), 10}});
  auto s = p->client->sendv_async(
      p->c_conn, {{sb.id, sb.ptr(), 100}, {sb.id, sb.ptr(100), 50}});
  ASSERT_TRUE(r.ok() && s.ok());
  const uint64_t deadline = monotonic_ns() + 30000000000ull;
  Status rs = Status::OK();
  bool r_done = false, s_done = false;
  while (!(r_done && s_done) && monotonic_ns() < deadline) {
    if (!s_done) {
      auto d = p->client->poll(*s);
      s_done = !d.ok() || *d;
    }
    if (!r_done) {
      auto d = p->server->poll(*r);
      r_done = !d.ok() || *d;
      if (!d.ok()) rs = d.status();
    }
  }
  ASSERT_TRUE(r_done);
  EXPECT_FALSE(rs.ok()) << "a 50-byte message into a 10-byte slice";
  // The handle is spent with its error reported once.
  EXPECT_EQ(p->server->poll(*r).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uccl::p2p
