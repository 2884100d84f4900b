// A peer that writes malformed eager headers, receive descriptors or inline
// messages (engine/wire.h) over the software NIC: the other side refuses them,
// fails only that connection with a clear error, counts it, and keeps serving
// the others.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine/wire.h"
#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

using Fault = engine::UcclRDMAEngine::WireFault;

uint64_t protocol_errors(Endpoint* ep) {
  uint64_t n = 0;
  for (const EngineStats& s : ep->engine_stats()) n += s.protocol_errors;
  return n;
}

FlowStats stats(Endpoint* ep, ConnId c) {
  auto s = ep->conn_stats(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : FlowStats{};
}

// Two working connections (one engine each side) with eager sends of up
// to `eager_bytes`; nullptr (after a test failure) if they cannot be set up.
std::unique_ptr<Pair> two_connections(int64_t eager_bytes) {
  EndpointConfig cfg = test_config(1, 2);
  cfg.eager_bytes = eager_bytes;
  auto p = Pair::make(cfg, 2);
  if (!p) return nullptr;
  exchange(p.get(), 0, {1, 100}, 10);
  exchange(p.get(), 1, {1, 100}, 20);
  return p;
}

TEST(HostilePeerTest, HookRefusesBadArguments) {
  auto p = Pair::make(test_config(1));
  ASSERT_TRUE(p);
  EXPECT_EQ(EndpointTestAccess::inject_wire_fault(p->client.get(), 1, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      EndpointTestAccess::inject_wire_fault(p->client.get(), 0, 99).code(),
      StatusCode::kInvalidArgument);
}

class MalformedEagerTest : public ::testing::TestWithParam<Fault> {};

// Connection 0 gets one damaged eager message while the receiver has a
// receive of another tag posted on it (so the send goes eager, and the
// receive shows what the application sees). Connection 1, on the same
// engines, must not notice.
TEST_P(MalformedEagerTest, FailsOnlyItsConnectionAndIsCounted) {
  auto p = two_connections(16384);
  ASSERT_TRUE(p);
  Endpoint* client = p->client.get();
  Endpoint* server = p->server.get();
  // Connection 0's sender holds eager slots.
  const uint64_t deadline = monotonic_ns() + 20000000000ull;
  while (stats(client, p->c_conns[0]).eager_slots_free == 0) {
    ASSERT_LT(monotonic_ns(), deadline) << "eager slots never granted";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(protocol_errors(server), 0u);
  const uint64_t eager0 = stats(client, p->c_conns[0]).sends_eager;
  const uint64_t taken0 = stats(server, p->s_conns[0]).eager_received;

  Buf sb(client, 4096), rb(server, 4096);
  std::memset(rb.ptr(), 0xee, rb.data.size());
  fill_pattern(sb.ptr(), 1000, 7);
  Request other_tag;  // tag 5; the damaged send carries tag 0
  void* data = rb.ptr();
  size_t size = 4096;
  int tag = 5;
  MrHandle* mh = rb.mh;
  ASSERT_TRUE(
      server->recv_async(p->s_conns[0], 1, &data, &size, &tag, &mh, &other_tag)
          .ok());
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(
                  client, 0, static_cast<uint32_t>(GetParam()))
                  .ok());
  Request sr;
  ASSERT_TRUE(
      client->send_async(p->c_conns[0], sb.ptr(), 1000, sb.mh, &sr, 0).ok());

  // The receiver refuses it before taking it (no receive can ever match
  // it): the posted receive fails with a protocol error, its buffer is
  // untouched, and the error is counted.
  Status rs = server->wait(&other_tag, 20000);
  EXPECT_EQ(rs.code(), StatusCode::kProtocolError) << rs;
  EXPECT_NE(rs.message().find("malformed eager message"), std::string::npos)
      << rs;
  for (size_t i = 0; i < rb.data.size(); ++i) {
    ASSERT_EQ(rb.data[i], 0xee) << "byte " << i << " was written";
  }
  EXPECT_EQ(stats(server, p->s_conns[0]).eager_received, taken0);
  EXPECT_EQ(protocol_errors(server), 1u);
  EXPECT_EQ(protocol_errors(client), 0u);
  EXPECT_EQ(stats(client, p->c_conns[0]).sends_eager, eager0 + 1)
      << "the damaged send did not go eager";
  // The sender learns it through the liveness channel, within a timeout.
  Status ss = client->wait(&sr, 20000);
  EXPECT_FALSE(ss.ok());
  EXPECT_NE(ss.code(), StatusCode::kTimedOut) << ss;
  // Further use of the failed connection (a receive of the damaged
  // message's tag, 0) is refused, not hung.
  Request again;
  EXPECT_EQ(
      server->recv_async(p->s_conns[0], rb.ptr(), 4096, rb.mh, &again).code(),
      StatusCode::kRemoteError);

  // The other connection, on the same engines, carries on byte for byte,
  // eager and rendezvous alike.
  exchange(p.get(), 1, {0, 1, 1000, 16384, 70000}, 30);
  EXPECT_EQ(protocol_errors(server), 1u);
}

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kEagerBadMagic:
      return "EagerBadMagic";
    case Fault::kEagerLenPastChunk:
      return "EagerLenPastChunk";
    case Fault::kEagerLenShortOfChunk:
      return "EagerLenShortOfChunk";
    case Fault::kDescNoBuffers:
      return "DescNoBuffers";
    case Fault::kDescEntriesWrap:
      return "DescEntriesWrap";
    case Fault::kDescBadSlot:
      return "DescBadSlot";
    case Fault::kDescUnknownType:
      return "DescUnknownType";
    case Fault::kInlineBadBuf:
      return "InlineBadBuf";
    case Fault::kInlineNoRecv:
      return "InlineNoRecv";
    case Fault::kInlineOverLength:
      return "InlineOverLength";
    default:
      return "None";
  }
}

std::string param_name(const ::testing::TestParamInfo<Fault>& i) {
  return fault_name(i.param);
}

INSTANTIATE_TEST_SUITE_P(Faults, MalformedEagerTest,
                         ::testing::Values(Fault::kEagerBadMagic,
                                           Fault::kEagerLenPastChunk,
                                           Fault::kEagerLenShortOfChunk),
                         param_name);

class MalformedDescriptorTest : public ::testing::TestWithParam<Fault> {};

// The receiver's descriptor for connection 0 is damaged. Eager sends are
// off, so the sender's send is waiting for exactly that descriptor; the
// sender must refuse it, fail the connection (its send with the protocol
// error, the receiver's receive through liveness), count it once, and leave
// connection 1 working.
TEST_P(MalformedDescriptorTest, FailsOnlyItsConnectionAndIsCounted) {
  auto p = two_connections(0);
  ASSERT_TRUE(p);
  Endpoint* client = p->client.get();
  Endpoint* server = p->server.get();
  ASSERT_EQ(protocol_errors(client), 0u);

  Buf sb(client, 4096), rb(server, 4096);
  std::memset(rb.ptr(), 0xee, rb.data.size());
  fill_pattern(sb.ptr(), 1000, 7);
  Request sr;
  ASSERT_TRUE(
      client->send_async(p->c_conns[0], sb.ptr(), 1000, sb.mh, &sr).ok());
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(
                  server, 0, static_cast<uint32_t>(GetParam()))
                  .ok());
  Request rr;
  ASSERT_TRUE(
      server->recv_async(p->s_conns[0], rb.ptr(), 4096, rb.mh, &rr).ok());

  // The sender refuses the descriptor: nothing is sent into it.
  Status ss = client->wait(&sr, 20000);
  EXPECT_EQ(ss.code(), StatusCode::kProtocolError) << ss;
  EXPECT_EQ(protocol_errors(client), 1u);
  EXPECT_EQ(protocol_errors(server), 0u);
  Status rs = server->wait(&rr, 20000);
  EXPECT_FALSE(rs.ok());
  EXPECT_NE(rs.code(), StatusCode::kTimedOut) << rs;
  for (size_t i = 0; i < rb.data.size(); ++i) {
    ASSERT_EQ(rb.data[i], 0xee) << "byte " << i << " was written";
  }
  Request again;
  EXPECT_EQ(
      client->send_async(p->c_conns[0], sb.ptr(), 10, sb.mh, &again).code(),
      StatusCode::kRemoteError);

  exchange(p.get(), 1, {0, 1, 1000, 70000}, 30);
  EXPECT_EQ(protocol_errors(client), 1u);
}

INSTANTIATE_TEST_SUITE_P(Faults, MalformedDescriptorTest,
                         ::testing::Values(Fault::kDescNoBuffers,
                                           Fault::kDescEntriesWrap,
                                           Fault::kDescBadSlot,
                                           Fault::kDescUnknownType),
                         param_name);

class MalformedInlineTest : public ::testing::TestWithParam<Fault> {};

// Connection 0's sender damages one inline message (it sends inline but
// never eagerly, so the send waits for the receive's descriptor and then
// goes inline). The receiver must refuse it before writing a byte, fail
// only that connection (its receive with the protocol error, the sender's
// send through liveness), count it once, and keep connection 1 working.
TEST_P(MalformedInlineTest, FailsOnlyItsConnectionAndIsCounted) {
  EndpointConfig scfg = test_config(1, 2);
  scfg.eager_bytes = 16384;
  EndpointConfig ccfg = scfg;
  ccfg.eager_bytes = 0;
  ccfg.inline_bytes = engine::kMaxInlineBytes;
  auto p = Pair::make(scfg, ccfg, 2);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {1, 100}, 10);
  exchange(p.get(), 1, {1, 100}, 20);
  Endpoint* client = p->client.get();
  Endpoint* server = p->server.get();
  const uint64_t inline0 = stats(client, p->c_conns[0]).sends_inline;
  ASSERT_GT(inline0, 0u) << "the warm-up sent nothing inline";

  Buf sb(client, 4096), rb(server, 4096);
  std::memset(rb.ptr(), 0xee, rb.data.size());
  fill_pattern(sb.ptr(), 500, 7);
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(
                  client, 0, static_cast<uint32_t>(GetParam()))
                  .ok());
  Request sr, rr;
  ASSERT_TRUE(
      client->send_async(p->c_conns[0], sb.ptr(), 500, sb.mh, &sr).ok());
  ASSERT_TRUE(
      server->recv_async(p->s_conns[0], rb.ptr(), 4096, rb.mh, &rr).ok());

  Status rs = server->wait(&rr, 20000);
  EXPECT_EQ(rs.code(), StatusCode::kProtocolError) << rs;
  for (size_t i = 0; i < rb.data.size(); ++i) {
    ASSERT_EQ(rb.data[i], 0xee) << "byte " << i << " was written";
  }
  EXPECT_EQ(protocol_errors(server), 1u);
  EXPECT_EQ(protocol_errors(client), 0u);
  EXPECT_EQ(stats(client, p->c_conns[0]).sends_inline, inline0 + 1)
      << "the damaged send did not go inline";
  // The (hostile) sender's send completed when the peer's NIC took it, or
  // failed with the connection; either way it does not hang.
  Status ss = client->wait(&sr, 20000);
  EXPECT_NE(ss.code(), StatusCode::kTimedOut) << ss;

  exchange(p.get(), 1, {0, 1, 1000, 16384, 70000}, 30);
  EXPECT_EQ(protocol_errors(server), 1u);
}

INSTANTIATE_TEST_SUITE_P(Faults, MalformedInlineTest,
                         ::testing::Values(Fault::kInlineBadBuf,
                                           Fault::kInlineNoRecv,
                                           Fault::kInlineOverLength),
                         param_name);

}  // namespace
}  // namespace uccl::testing

namespace uccl::testing {
namespace {

// ACKs arrive on a UD QP that anyone can send to: ud_source_is() takes one
// only from the connection's peer UD QP, GID and (software NIC) UDP port.
// A chunk whose tag (its whole CSN, SendWr::guard_tag) contradicts its
// immediate's CSN was not sent by a peer engine: the target's guard refuses
// it before a byte lands and counts it, and touches no window state (no
// ACK names it). The writer resends the chunk and the write completes
// byte-exact.
TEST(HostilePeerTest, AChunkWhoseTagContradictsItsImmediateIsRefused) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  constexpr size_t kLen = 256 << 10;  // four chunks
  Buf region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(), kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  std::memset(region.ptr(), 0, kLen);
  fill_pattern(local.ptr(), kLen, 61);
  const uint64_t errors = protocol_errors(p->server.get());
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(
                  p->client.get(), 0,
                  static_cast<uint32_t>(Fault::kChunkTagContradicts))
                  .ok());
  Request w;
  ASSERT_TRUE(p->client
                  ->write_async(p->c_conns[0], local.ptr(), kLen, local.mh,
                                *adv, 0, &w, true)
                  .ok());
  ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
  EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 61), -1);
  EXPECT_EQ(*p->server->writes_landed(p->s_conns[0]), 1u);
  EXPECT_EQ(protocol_errors(p->server.get()), errors + 1);
  const std::string nic = p->server->nic_counters();
  EXPECT_EQ(transport::counter_sum(nic, "drop_refused"), 1u) << nic;
  const FlowStats cs = stats(p->client.get(), p->c_conns[0]);
  EXPECT_GE(cs.tlp_retransmits + cs.rto_retransmits + cs.fast_retransmits, 1u);
}

TEST(UdSourceTest, AnAckCountsOnlyFromThePeersQpAddressAndPort) {
  transport::PortAddress peer;
  transport::ipv4_to_gid(htonl(0x7f000001), peer.gid);
  peer.udp_port = 4791;
  uint8_t grh[transport::kGrhBytes] = {};
  auto set_source = [&](uint32_t ip, uint16_t port) {
    transport::ipv4_to_gid(htonl(ip), grh + 8);
    grh[2] = static_cast<uint8_t>(port >> 8);
    grh[3] = static_cast<uint8_t>(port);
  };
  transport::WorkCompletion w;
  w.src_qp = 9;
  w.with_grh = true;
  set_source(0x7f000001, 4791);
  EXPECT_TRUE(engine::ud_source_is(w, grh, 9, &peer));
  EXPECT_FALSE(engine::ud_source_is(w, grh, 10, &peer)) << "other QPN";
  set_source(0x7f000001, 4792);
  EXPECT_FALSE(engine::ud_source_is(w, grh, 9, &peer)) << "other port";
  set_source(0x7f000002, 4791);
  EXPECT_FALSE(engine::ud_source_is(w, grh, 9, &peer)) << "other address";
  // verbs: no UDP port in the address; the GID alone names the sender.
  transport::PortAddress vpeer = peer;
  vpeer.udp_port = 0;
  set_source(0x7f000001, 1234);
  EXPECT_TRUE(engine::ud_source_is(w, grh, 9, &vpeer));
  // No GRH reported: the QPN alone.
  w.with_grh = false;
  set_source(0x0a000001, 1);
  EXPECT_TRUE(engine::ud_source_is(w, grh, 9, &peer));
  EXPECT_FALSE(engine::ud_source_is(w, grh, 8, &peer));
}

}  // namespace
}  // namespace uccl::testing
