// The engine's checks of what a peer sends, one case each: the bootstrap's
// hello and QP message (engine/bootstrap.h), and control messages
// (engine/wire.h). Each refusal names what is wrong.
#include "engine/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "engine/bootstrap.h"

namespace uccl::engine {
namespace {

BootHello good_hello() {
  BootHello h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kBootMagic;
  h.version = kBootVersion;
  h.size = sizeof(BootHello);
  h.paths = 4;
  return h;
}

BootQps good_qps(uint32_t n) {
  BootQps q{};
  q.magic = kBootMagic;
  q.num_qps = n;
  return q;
}

void expect_refused(const Status& st, StatusCode code,
                    const std::string& says) {
  EXPECT_EQ(st.code(), code) << st;
  EXPECT_NE(st.message().find(says), std::string::npos) << st;
}

TEST(BootstrapChecks, HelloPrefixAndHello) {
  BootHello h = good_hello();
  EXPECT_TRUE(check_hello_prefix(reinterpret_cast<uint8_t*>(&h)).ok());
  EXPECT_TRUE(check_hello(h, false).ok());
  BootHello bad = h;
  bad.magic = 0x20544547;  // "GET "
  expect_refused(check_hello_prefix(reinterpret_cast<uint8_t*>(&bad)),
                 StatusCode::kProtocolError, "not a UCCL endpoint");
  bad = h;
  bad.version = kBootVersion + 1;
  expect_refused(check_hello_prefix(reinterpret_cast<uint8_t*>(&bad)),
                 StatusCode::kProtocolError, "bootstrap version");
  bad = h;
  bad.size = sizeof(BootHello) + 8;
  expect_refused(check_hello_prefix(reinterpret_cast<uint8_t*>(&bad)),
                 StatusCode::kProtocolError, "bootstrap version");
  expect_refused(check_hello(h, true), StatusCode::kInvalidArgument,
                 "QP mode mismatch: peer uses UC, we use RC");
  for (uint32_t paths : {0u, static_cast<uint32_t>(kMaxPaths) + 1, ~0u}) {
    bad = h;
    bad.paths = paths;
    expect_refused(check_hello(bad, false), StatusCode::kProtocolError,
                   "asked for " + std::to_string(paths) + " paths");
  }
}

TEST(BootstrapChecks, QpMessage) {
  EXPECT_TRUE(check_qps(good_qps(4), 4).ok());
  BootQps q = good_qps(4);
  q.magic ^= 1;
  expect_refused(check_qps(q, 4), StatusCode::kProtocolError, "bad QP message");
  expect_refused(check_qps(good_qps(3), 4), StatusCode::kProtocolError,
                 "peer created 3 QPs, agreed on 4");
  q = good_qps(4);
  q.engine = 16;
  expect_refused(check_qps(q, 4), StatusCode::kProtocolError, "out of range");
  q = good_qps(4);
  q.flow_id = Imm::kMaxFlows;
  expect_refused(check_qps(q, 4), StatusCode::kProtocolError, "out of range");
}

// Control messages back to back in one SEND: each is taken at its own
// length; one cut short, or claiming more entries than fit, is refused.
TEST(CtrlWire, BatchSplitsAtEachMessagesLength) {
  uint8_t buf[256] = {};
  CtrlMsg a{};
  a.type = static_cast<uint32_t>(CtrlType::kRecvDesc);
  a.n = 2;
  a.region = 1;  // one grant after the two buffers
  a.bufs[0].size = 100;
  a.bufs[2].tag = 7;
  const uint32_t la = offsetof(CtrlMsg, bufs) + 3 * sizeof(RecvBuf);
  std::memcpy(buf, &a, la);
  CtrlMsg b{};
  b.type = static_cast<uint32_t>(CtrlType::kAckReq);
  const uint32_t lb = offsetof(CtrlMsg, bufs);
  std::memcpy(buf + la, &b, lb);
  CtrlMsg m;
  ASSERT_EQ(parse_ctrl_msg(buf, la + lb, &m), la);
  EXPECT_EQ(m.n, 2u);
  EXPECT_EQ(m.bufs[2].tag, 7);
  EXPECT_EQ(m.bufs[3].size, 0u) << "bytes of the next message leaked in";
  EXPECT_EQ(ctrl_msg_problem(m), nullptr);
  ASSERT_EQ(parse_ctrl_msg(buf + la, lb, &m), lb);
  EXPECT_EQ(m.type, static_cast<uint32_t>(CtrlType::kAckReq));
  EXPECT_EQ(ctrl_msg_problem(m), nullptr);
  // Cut short: the header, or the entries it claims.
  EXPECT_EQ(parse_ctrl_msg(buf, lb - 1, &m), 0u);
  EXPECT_EQ(parse_ctrl_msg(buf, la - 1, &m), 0u);
  // n + region past the 8 entries a message holds, also where it wraps.
  a.n = 5;
  a.region = 4;
  std::memcpy(buf, &a, sizeof(a));
  EXPECT_EQ(parse_ctrl_msg(buf, sizeof(buf), &m), 0u);
  a.n = 1;
  a.region = ~0u;
  std::memcpy(buf, &a, sizeof(a));
  EXPECT_EQ(parse_ctrl_msg(buf, sizeof(buf), &m), 0u);
}

TEST(CtrlWire, ProblemsNameTheMessage) {
  CtrlMsg m{};
  m.type = 99;
  EXPECT_STREQ(ctrl_msg_problem(m), "unknown control message type");
  m.type = static_cast<uint32_t>(CtrlType::kRecvDesc);
  m.n = 0;
  EXPECT_STREQ(ctrl_msg_problem(m), "malformed control message");
  m.n = 1;
  m.slot = Imm::kSlots;
  EXPECT_STREQ(ctrl_msg_problem(m), "malformed control message");
  m.slot = Imm::kSlots - 1;
  EXPECT_EQ(ctrl_msg_problem(m), nullptr);
}

TEST(CtrlWire, EagerChunkHeader) {
  EagerHdr h{kEagerMagic, 3, 100, 0};
  EXPECT_TRUE(eager_chunk_ok(h, 116, 4096));
  EXPECT_FALSE(eager_chunk_ok(h, 117, 4096)) << "length disagrees";
  EXPECT_FALSE(eager_chunk_ok(h, 116, 115)) << "larger than the slot";
  EXPECT_FALSE(eager_chunk_ok(h, 8, 4096)) << "shorter than a header";
  h.magic ^= 1;
  EXPECT_FALSE(eager_chunk_ok(h, 116, 4096));
}

}  // namespace
}  // namespace uccl::engine
