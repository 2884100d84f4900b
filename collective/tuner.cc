// The NCCL tuner's policy: when it is active, and what it changes in NCCL's
// cost table (tiny all_reduce on Tree/LL, large ones off LL/LL128).
#include "collective/tuner.h"

#include <strings.h>

#include <cstring>

#include "collective/nccl_net_abi.h"
#include "collective/plugin_knobs.h"
#include "util/knobs.h"

namespace uccl::nccl {
namespace {

bool is_one(const char* v) { return v != nullptr && std::strcmp(v, "1") == 0; }

}  // namespace

TunerPolicy make_tuner_policy(
    size_t nranks, size_t nnodes, bool software_nic_only,
    const std::function<const char*(const char*)>& getenv) {
  TunerPolicy p;
  p.nranks = nranks;
  p.ll_max_bytes_per_rank =
      static_cast<uint64_t>(knob_ll_max_kb().get()) * 1024;
  p.tree_max_bytes = static_cast<uint64_t>(knob_tree_max_bytes().get());
  const char* net = getenv("NCCL_NET");
  if (!knob_tuner().get() ||
      (p.ll_max_bytes_per_rank == 0 && p.tree_max_bytes == 0)) {
    p.why =
        "off (UCCL_NCCL_TUNER=0, or UCCL_NCCL_LL_MAX_KB=0 and "
        "UCCL_NCCL_TREE_MAX_BYTES=0)";
  } else if (getenv("NCCL_PROTO") != nullptr ||
             getenv("NCCL_ALGO") != nullptr) {
    p.why = "inactive: NCCL_PROTO or NCCL_ALGO is set";
  } else if (net != nullptr && strcasecmp(net, "UCCL") != 0) {
    p.why = std::string("inactive: NCCL_NET=") + net;
  } else if (nranks < 2) {
    p.why = "inactive: one rank";
  } else if (nnodes < 2 && !(is_one(getenv("NCCL_P2P_DISABLE")) &&
                             is_one(getenv("NCCL_SHM_DISABLE")))) {
    p.why = "inactive: one node, so NCCL's GPU paths carry the traffic";
  } else if (!software_nic_only) {
    p.why =
        "inactive: not only software-NIC devices (verbs NICs were not "
        "measured)";
  } else {
    p.active = true;
    if (p.tree_max_bytes > 0) {
      p.why = "all_reduce up to " + std::to_string(p.tree_max_bytes) +
              " B runs Tree/LL";
    }
    if (p.ll_max_bytes_per_rank > 0) {
      p.why += std::string(p.why.empty() ? "" : "; ") + "all_reduce above " +
               std::to_string(p.ll_max_bytes_per_rank / 1024) +
               " KiB per rank runs Simple (not LL/LL128)";
    }
  }
  return p;
}

bool apply_tuner_policy(const TunerPolicy& p, int coll, size_t nbytes,
                        float* table, int num_algo, int num_proto) {
  using namespace ncclabi;  // NOLINT
  if (!p.active || coll != kFuncAllReduce || table == nullptr ||
      num_proto <= kProtoSimple || num_algo <= kAlgoTree) {
    return false;
  }
  if (p.tree_max_bytes > 0 && nbytes <= p.tree_max_bytes) {
    const int ti = kAlgoTree * num_proto + kProtoLL;
    float& tree = table[ti];
    if (tree < 0) return false;  // NCCL has no Tree here: its choice
    float best = -1;             // the cheapest other allowed entry
    for (int i = 0; i < num_algo * num_proto; ++i) {
      if (i != ti && table[i] >= 0 && (best < 0 || table[i] < best)) {
        best = table[i];
      }
    }
    if (best < 0) return false;  // Tree/LL is NCCL's only choice
    const float want = best > 0.01f ? best - 0.01f : 0.0f;
    if (tree <= want) return false;  // already NCCL's choice
    tree = want;
    return true;
  }
  if (p.ll_max_bytes_per_rank == 0 ||
      nbytes / p.nranks <= p.ll_max_bytes_per_rank) {
    return false;
  }
  bool simple = false;
  for (int a = 0; a < num_algo; ++a) {
    simple = simple || table[a * num_proto + kProtoSimple] >= 0;
  }
  if (!simple) return false;  // leave NCCL a choice it can make
  bool changed = false;
  for (int a = 0; a < num_algo; ++a) {
    for (int proto : {kProtoLL, kProtoLL128}) {
      float& cost = table[a * num_proto + proto];
      if (cost >= 0) {
        cost = kAlgoProtoIgnore;
        changed = true;
      }
    }
  }
  return changed;
}

}  // namespace uccl::nccl
