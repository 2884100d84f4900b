// Software NIC QP helpers shared by the soft_qp*.cc files: verbs opcodes
// to wire and completion opcodes, the RNR timer encoding.
#pragma once

#include <cstdint>

#include "transport/nic.h"
#include "transport/udp/wire.h"

namespace uccl::transport::udp {

// IB spec 9.7.5.2.8: min_rnr_timer encoding -> microseconds.
inline uint64_t rnr_delay_us(uint8_t code) {
  static const uint32_t kTable[32] = {
      655360, 10,    20,    30,     40,     60,     80,     120,
      160,    240,   320,   480,    640,    960,    1280,   1920,
      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kTable[code & 31];
}

inline WcOpcode wc_opcode_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
    case WrOpcode::kWriteWithImm:
      return WcOpcode::kWrite;
    case WrOpcode::kRead:
      return WcOpcode::kRead;
    default:
      return WcOpcode::kSend;
  }
}

inline WireOp wire_op_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
      return WireOp::kWrite;
    case WrOpcode::kWriteWithImm:
      return WireOp::kWriteImm;
    case WrOpcode::kSend:
      return WireOp::kSend;
    case WrOpcode::kSendWithImm:
      return WireOp::kSendImm;
    case WrOpcode::kRead:
      return WireOp::kReadReq;
  }
  return WireOp::kSend;
}

inline bool is_send(WireOp op) {
  return op == WireOp::kSend || op == WireOp::kSendImm;
}

}  // namespace uccl::transport::udp
