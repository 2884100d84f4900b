// CPU pinning and NUMA topology helpers: parse core lists ("0-3,8"), pin
// threads, and find the cores near a NIC from sysfs (root injectable for
// tests).
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl {

// Parses a Linux cpu list such as "0-3,8,10-11" into sorted unique ids.
Result<std::vector<int>> parse_cpu_list(const std::string& text);
// The inverse of parse_cpu_list: compresses runs ("0-3,8").
std::string format_cpu_list(const std::vector<int>& cpus);

// Pins the calling thread (or `thread`) to one CPU.
Status pin_current_thread(int cpu);
Status pin_thread(pthread_t thread, int cpu);
// OK when a thread of this process may be pinned to `cpu` (tried on a
// scratch thread, so the answer follows the process's cpuset, not the
// calling thread's own affinity, which may have been narrowed).
Status check_pinnable(int cpu);
// CPU the calling thread runs on now, -1 if unknown.
int current_cpu();
// CPUs the calling thread may run on (sched_getaffinity), sorted: the
// process's, unless that thread was narrowed (avoid_cpus_thread).
std::vector<int> allowed_cpus();

// Takes `avoid` out of thread `tid`'s allowed CPUs (0: the calling thread;
// a thread of another process only where the caller may change its
// affinity), unless none would remain (then nothing changes). Returns the
// CPUs the thread may now use.
Result<std::vector<int>> avoid_cpus_thread(pid_t tid,
                                           const std::vector<int>& avoid);

// A file's identity: its device (major, minor) and inode.
struct FileId {
  unsigned dev_major = 0;
  unsigned dev_minor = 0;
  uint64_t inode = 0;
  bool operator==(const FileId& o) const {
    return dev_major == o.dev_major && dev_minor == o.dev_minor &&
           inode == o.inode;
  }
};
Result<FileId> file_id(const std::string& path);
// Files some process holds an flock on: the granted FLOCK lines of
// <proc_root>/locks ("1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode>
// ..." with major and minor in hex; waiters, "1: -> FLOCK ...", are not
// holders). Empty when the file cannot be read.
std::vector<FileId> flocked_files(const std::string& proc_root = "/proc");

// Topology lookups read under `sysfs_root` (normally "/sys"); -1 or empty
// when unknown (e.g. no NUMA support, virtual NIC).
int numa_node_of_cpu(int cpu, const std::string& sysfs_root = "/sys");
std::vector<int> cpus_of_numa_node(int node,
                                   const std::string& sysfs_root = "/sys");
int numa_node_of_netdev(const std::string& ifname,
                        const std::string& sysfs_root = "/sys");
// PCI path of a network interface ("/sys/devices/pci0000:00/..."), or "".
std::string pci_path_of_netdev(const std::string& ifname,
                               const std::string& sysfs_root = "/sys");

// CPUs this process's cgroup may use (its CPU quota over its period,
// rounded up). cgroup v2: the lowest cpu.max of the process's cgroup (the
// "0::<path>" line of <proc_root>/self/cgroup) and its ancestors under
// <sysfs_root>/fs/cgroup; a container with its own cgroup namespace sees
// "/", its own. Else v1: <sysfs_root>/fs/cgroup/cpu/cpu.cfs_quota_us over
// cpu.cfs_period_us. 0 when there is no quota or it is unknown:
// containers are often limited this way, not by affinity, so
// allowed_cpus() alone overstates what they may use.
int cgroup_cpu_limit(const std::string& sysfs_root = "/sys",
                     const std::string& proc_root = "/proc");

// The CPUs this process may keep busy: allowed_cpus(), or the cgroup's
// quota (cgroup_cpu_limit) where that is lower.
int usable_cpu_count();

// NVIDIA GPUs on this host: PCI functions under <root>/bus/pci/devices of
// vendor 0x10de and display class (0x03xxxx: 3D or VGA controller; NVSwitch
// bridges and audio functions are not counted). 0 when none or unknown.
int count_nvidia_gpus(const std::string& sysfs_root = "/sys");

// Default cores for `n` engine threads near `numa_node` (-1 = anywhere):
// the highest-numbered allowed CPUs of that node first (core 0 usually takes
// interrupts), then the rest, wrapping when there are fewer CPUs than engines.
std::vector<int> choose_engine_cores(int n, int numa_node,
                                     const std::vector<int>& allowed,
                                     const std::string& sysfs_root = "/sys");

}  // namespace uccl
