// The NCCL tuner exported beside the net plugin (ncclTunerPlugin_v4): moves
// NCCL's all_reduce off LL where UCCL's software NIC is measured slower, and
// tiny all_reduce onto Tree/LL where NCCL's model calls Ring and Tree a tie.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace uccl::nccl {

// What one communicator's tuner does, decided once at its init.
struct TunerPolicy {
  bool active = false;
  std::string why;  // for the log: what it does, or why it does nothing
  size_t nranks = 0;
  // all_reduce above this many bytes per rank runs Simple, not LL/LL128.
  uint64_t ll_max_bytes_per_rank = 0;
  // all_reduce of at most this many bytes (the buffer) runs Tree/LL where
  // NCCL allows it; 0: never.
  uint64_t tree_max_bytes = 0;
};

// Decides the policy. `getenv` reads the process environment (a parameter
// so tests can give their own). Active only when all of these hold:
//  - UCCL_NCCL_TUNER is on, and UCCL_NCCL_LL_MAX_KB > 0 or
//    UCCL_NCCL_TREE_MAX_BYTES > 0;
//  - the user chose no protocol or algorithm (NCCL_PROTO, NCCL_ALGO unset)
//    and no other net (NCCL_NET unset or "UCCL");
//  - the communicator's traffic crosses the network: nnodes > 1, or one
//    node with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1;
//  - the plugin is initialised and every device it offers is a software
//    NIC (`software_nic_only`: the crossover was measured there, not on
//    verbs NICs).
TunerPolicy make_tuner_policy(
    size_t nranks, size_t nnodes, bool software_nic_only,
    const std::function<const char*(const char*)>& getenv);

// Applies the policy to one collective's cost table (float[num_algo]
// [num_proto], -1 = not allowed; NCCL takes the cheapest allowed entry).
// For an all_reduce of
//  - more than ll_max_bytes_per_rank * nranks bytes where some algorithm
//    allows Simple: disallows LL and LL128 for every algorithm;
//  - at most tree_max_bytes where Tree/LL is allowed: makes Tree/LL the
//    cheapest entry (just below the cheapest other one; nothing else
//    changes).
// The Tree rule is checked first, so a tree_max_bytes above the LL limit
// keeps LL up to it. Returns whether the table changed; anything else is
// left to NCCL.
bool apply_tuner_policy(const TunerPolicy& p, int coll, size_t nbytes,
                        float* table, int num_algo, int num_proto);

}  // namespace uccl::nccl
