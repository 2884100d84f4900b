// The simulator tests' setups: a dumbbell of `senders` hosts into one
// receiver at 100 Gb/s, a packet per chunk (the papers' model).
#pragma once

#include <cstdint>
#include <string>

#include "cc/sim/sim.h"

namespace uccl::sim {

inline SimConfig dumbbell(uint32_t senders, const std::string& cc) {
  SimConfig c;
  c.chunk_bytes = c.mtu_bytes;
  c.senders = senders;
  c.receivers = 1;
  c.host_gbps = 100;
  c.link_delay_us = 1;
  c.buffer_kb = 1024;
  c.cc = cc;
  c.progress = false;
  return c;
}

}  // namespace uccl::sim
