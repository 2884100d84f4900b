// The software NIC tests' helpers: its counters and MTU, and one checked
// transfer of every opcode between two sides.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "tests/transport/nic_test_util.h"
#include "transport/udp/soft_nic.h"
#include "util/pattern.h"

namespace uccl::transport::testing {

inline uint32_t mtu_of(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->mtu();
}
inline const udp::SoftCounters& cnt(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->counters();
}
inline uint64_t udp_rx(Side* s) { return cnt(s).rx_packets; }

// Device options injecting faults (transport/faults.h specs) on transmit
// and receive.
inline DeviceOptions with_faults(const std::string& tx, const std::string& rx,
                                 uint64_t seed) {
  DeviceOptions o = Side::no_faults();
  o.faults.tx = *FaultSpec::parse(tx);
  o.faults.rx = *FaultSpec::parse(rx);
  o.faults.seed = seed;
  return o;
}

inline bool needs_recv(WrOpcode op) {
  return op == WrOpcode::kWriteWithImm || op == WrOpcode::kSend ||
         op == WrOpcode::kSendWithImm;
}

// Runs one transfer of `len` bytes from a to b (READ: b's data into a) and
// checks the bytes and completions.
inline void transfer_once(Side* a, Side* b, WrOpcode op, uint32_t len,
                          uint64_t seed) {
  SCOPED_TRACE(std::string(wr_opcode_name(op)) + " len=" + std::to_string(len));
  a->send_wcs.clear();
  b->recv_wcs.clear();
  Side* src = op == WrOpcode::kRead ? b : a;
  Side* dst = op == WrOpcode::kRead ? a : b;
  fill_pattern(src->buf.data(), len, seed);
  std::memset(dst->buf.data(), 0, std::min<size_t>(dst->buf.size(), len + 64));
  if (needs_recv(op)) {
    ASSERT_TRUE(b->post_recv(7, 0, len).ok());
  }
  uint64_t b_rx_before = udp_rx(b);
  ASSERT_TRUE(
      a->post_send(op, 42, 0, len, b->addr(), b->mr->rkey(), 0xabcd1234).ok());
  ASSERT_TRUE(drive({a, b}, [&] { return !a->send_wcs.empty(); }))
      << "no send completion";
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess)
      << wc_status_name(a->send_wcs[0].status);
  EXPECT_EQ(a->send_wcs[0].wr_id, 42u);
  if (needs_recv(op)) {
    ASSERT_TRUE(drive({a, b}, [&] { return !b->recv_wcs.empty(); }))
        << "no receive completion";
    const WorkCompletion& wc = b->recv_wcs[0];
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_EQ(wc.opcode, op == WrOpcode::kWriteWithImm ? WcOpcode::kRecvWriteImm
                                                       : WcOpcode::kRecv);
    EXPECT_EQ(wc.with_imm, op != WrOpcode::kSend);
    if (wc.with_imm) {
      EXPECT_EQ(wc.imm_data, 0xabcd1234u);
    }
    EXPECT_GT(wc.timestamp_ns, 0u);
  } else if (op == WrOpcode::kWrite && a->qp->type() == QpType::kUC) {
    // UC WRITE has no remote completion: wait for every packet to arrive.
    uint64_t want =
        b_rx_before + std::max<uint64_t>(1, (len + mtu_of(a) - 1) / mtu_of(a));
    ASSERT_TRUE(drive({a, b}, [&] { return udp_rx(b) >= want; }));
  }
  EXPECT_EQ(find_pattern_mismatch(dst->buf.data(), len, seed), -1);
}

}  // namespace uccl::transport::testing
