// Engine cores: claims and releases of the cores engines are pinned to, so
// engines of every endpoint and every UCCL process on a host spread out.
#pragma once

#include <vector>

namespace uccl::engine {

// Picks n cores in preference order: first cores no engine of this process
// uses and no other UCCL process has claimed (UCCL_CORE_LOCK_DIR), then
// (all taken) the ones this process uses least. Lock fds to hold go to
// *locks (closing one releases its claim).
std::vector<int> claim_cores(int n, const std::vector<int>& preference,
                             std::vector<int>* locks);
// Cores given in the config (UCCL_ENGINE_CORES) count as used too.
void use_cores(const std::vector<int>& cores);
void release_cores(const std::vector<int>& cores);
// Cores this process's engines use or another UCCL process has claimed.
std::vector<int> cores_claimed_on_host();

}  // namespace uccl::engine
