// Engine cores: which cores an endpoint's engines are pinned to, claimed
// across the processes of a host through flock'ed files.
#include "engine/engine_cores.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "engine/endpoint_config.h"
#include "util/cpu.h"

namespace uccl::engine {
namespace {

// Engines of all endpoints in this process spread over cores: each takes
// the least-used core in its preference order.
std::mutex g_core_mu;
std::map<int, int> g_core_users;

// The file through which a process claims `core` in lock directory `dir`.
std::string core_lock_path(const std::string& dir, int core) {
  return dir + "/uccl-core-" + std::to_string(core) + ".lock";
}

// Takes an flock on <dir>/uccl-core-<core>.lock; -1 if another process
// holds it (the kernel drops the lock when that process exits).
int try_lock_core(const std::string& dir, int core) {
  if (dir.empty()) return -2;  // claims disabled: every core is free
  const std::string path = core_lock_path(dir, core);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -2;  // no lock directory: do without
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

// Picks n cores in preference order: first cores no engine of this process
// uses and no other UCCL process has claimed, then (all taken) the ones
// this process uses least. Lock fds to hold go to *locks.
std::vector<int> claim_cores(int n, const std::vector<int>& preference,
                             std::vector<int>* locks) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  const std::string dir = engine::core_lock_dir();
  std::vector<int> out;
  for (int i = 0; i < n && !preference.empty(); ++i) {
    int best = -1;
    for (int c : preference) {
      if (g_core_users[c] > 0) continue;
      const int fd = try_lock_core(dir, c);
      if (fd == -1) continue;
      if (fd >= 0) locks->push_back(fd);
      best = c;
      break;
    }
    if (best < 0) {
      best = preference[0];
      for (int c : preference) {
        if (g_core_users[c] < g_core_users[best]) best = c;
      }
    }
    ++g_core_users[best];
    out.push_back(best);
  }
  return out;
}

// Cores given in the config (UCCL_ENGINE_CORES) count as used too.
void use_cores(const std::vector<int>& cores) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  for (int c : cores) ++g_core_users[c];
}

void release_cores(const std::vector<int>& cores) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  for (int c : cores) --g_core_users[c];
}

std::vector<int> cores_claimed_on_host() {
  std::set<int> cores;
  {
    std::lock_guard<std::mutex> lock(g_core_mu);
    for (const auto& [core, users] : g_core_users) {
      if (users > 0) cores.insert(core);
    }
  }
  const std::string dir = engine::core_lock_dir();
  const std::vector<FileId> held =
      dir.empty() ? std::vector<FileId>() : flocked_files();
  const long ncpus = held.empty() ? 0 : sysconf(_SC_NPROCESSORS_CONF);
  for (int core = 0; core < ncpus; ++core) {
    auto id = file_id(core_lock_path(dir, core));
    if (id.ok() && std::find(held.begin(), held.end(), *id) != held.end()) {
      cores.insert(core);
    }
  }
  return std::vector<int>(cores.begin(), cores.end());
}

}  // namespace uccl::engine
