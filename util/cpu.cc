// CPU pinning and NUMA topology helpers (see cpu.h). Everything here reads
// sysfs text files; nothing aborts when a file is missing.
#include "util/cpu.h"

#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "util/strings.h"

namespace uccl {
namespace {

bool read_first_line(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::getline(f, *out);
  return true;
}

bool parse_nonneg_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::atoi(s.c_str());
  return true;
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  for (const std::string& item : split_list(text, ',')) {
    size_t dash = item.find('-');
    int lo, hi;
    if (dash == std::string::npos) {
      if (!parse_nonneg_int(item, &lo)) {
        return InvalidArgument("bad cpu '" + item + "' in cpu list '" + text +
                               "'");
      }
      hi = lo;
    } else if (!parse_nonneg_int(item.substr(0, dash), &lo) ||
               !parse_nonneg_int(item.substr(dash + 1), &hi) || hi < lo) {
      return InvalidArgument("bad range '" + item + "' in cpu list '" + text +
                             "'");
    }
    if (hi - lo > 65536) {
      return InvalidArgument("range '" + item + "' too large in cpu list");
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(const std::vector<int>& cpus_in) {
  std::vector<int> cpus(cpus_in);
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Status pin_thread(pthread_t thread, int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) {
    return InvalidArgument("cpu " + std::to_string(cpu) + " out of range");
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(thread, sizeof(set), &set);
  if (rc != 0) return ErrnoStatus("pin to cpu " + std::to_string(cpu), rc);
  return Status::OK();
}

Status pin_current_thread(int cpu) { return pin_thread(pthread_self(), cpu); }

Status check_pinnable(int cpu) {
  Status st;
  std::thread([&] { st = pin_current_thread(cpu); }).join();
  return st;
}

int current_cpu() { return sched_getcpu(); }

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

Result<std::vector<int>> avoid_cpus_thread(pid_t tid,
                                           const std::vector<int>& avoid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) {
    return Internal(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  cpu_set_t narrowed = set;
  for (int c : avoid) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_CLR(c, &narrowed);
  }
  std::vector<int> out;
  const bool any = CPU_COUNT(&narrowed) > 0;
  const cpu_set_t& now = any ? narrowed : set;
  if (any && !CPU_EQUAL(&narrowed, &set) &&
      sched_setaffinity(tid, sizeof(narrowed), &narrowed) != 0) {
    return Internal(std::string("sched_setaffinity: ") + std::strerror(errno));
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &now)) out.push_back(c);
  }
  return out;
}

Result<FileId> file_id(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return NotFound(path + ": " + std::strerror(errno));
  }
  FileId id;
  id.dev_major = major(st.st_dev);
  id.dev_minor = minor(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  return id;
}

std::vector<FileId> flocked_files(const std::string& proc_root) {
  std::vector<FileId> out;
  std::ifstream f(proc_root + "/locks");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string ordinal, kind, mode, access, pid, where;
    if (!(ls >> ordinal >> kind >> mode >> access >> pid >> where)) continue;
    if (kind != "FLOCK") continue;  // POSIX locks, or "->": a waiter
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    char tail = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu%c", &maj, &min, &ino, &tail) !=
        3) {
      continue;
    }
    FileId id;
    id.dev_major = maj;
    id.dev_minor = min;
    id.inode = ino;
    out.push_back(id);
  }
  return out;
}

int numa_node_of_cpu(int cpu, const std::string& sysfs_root) {
  std::string dir =
      sysfs_root + "/devices/system/cpu/cpu" + std::to_string(cpu);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  int node = -1;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    int n;
    if (name.rfind("node", 0) == 0 && parse_nonneg_int(name.substr(4), &n)) {
      node = n;
      break;
    }
  }
  closedir(d);
  return node;
}

std::vector<int> cpus_of_numa_node(int node, const std::string& sysfs_root) {
  std::string line;
  if (node < 0 || !read_first_line(sysfs_root + "/devices/system/node/node" +
                                       std::to_string(node) + "/cpulist",
                                   &line)) {
    return {};
  }
  auto r = parse_cpu_list(line);
  return r.ok() ? *r : std::vector<int>{};
}

int numa_node_of_netdev(const std::string& ifname,
                        const std::string& sysfs_root) {
  std::string line;
  if (!read_first_line(
          sysfs_root + "/class/net/" + ifname + "/device/numa_node", &line)) {
    return -1;
  }
  int n;
  return parse_nonneg_int(line, &n) ? n : -1;  // "-1" means unknown too
}

std::string pci_path_of_netdev(const std::string& ifname,
                               const std::string& sysfs_root) {
  std::string link = sysfs_root + "/class/net/" + ifname + "/device";
  char* real = realpath(link.c_str(), nullptr);
  if (real == nullptr) return "";
  std::string out = real;
  free(real);
  return out;
}

int cgroup_cpu_limit(const std::string& sysfs_root,
                     const std::string& proc_root) {
  // quota/period CPUs, rounded up; 0 for no (or a nonsensical) quota.
  auto cpus = [](long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    const long long n = (quota + period - 1) / period;
    return static_cast<int>(std::min<long long>(n, 1 << 20));
  };
  // v2: "<quota|max> <period>" in cpu.max, at the process's cgroup and
  // every ancestor (a parent's quota binds its children too).
  std::string path;  // the process's cgroup, "" for the root
  {
    std::ifstream f(proc_root + "/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("0::", 0) == 0) path = line.substr(3);
    }
  }
  bool v2 = false;
  int limit = 0;
  for (;;) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    std::string line;
    if (read_first_line(sysfs_root + "/fs/cgroup" + path + "/cpu.max", &line)) {
      v2 = true;
      std::istringstream in(line);
      std::string quota;
      long long period = 0;
      if (in >> quota >> period && quota != "max") {
        char* end = nullptr;
        const long long q = std::strtoll(quota.c_str(), &end, 10);
        const int n = *end == '\0' ? cpus(q, period) : 0;
        if (n > 0 && (limit == 0 || n < limit)) limit = n;
      }
    }
    if (path.empty()) break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  if (v2) return limit;
  std::string q, p;
  if (read_first_line(sysfs_root + "/fs/cgroup/cpu/cpu.cfs_quota_us", &q) &&
      read_first_line(sysfs_root + "/fs/cgroup/cpu/cpu.cfs_period_us", &p)) {
    return cpus(std::atoll(q.c_str()), std::atoll(p.c_str()));  // -1: none
  }
  return 0;
}

int usable_cpu_count() {
  const int cpus = static_cast<int>(allowed_cpus().size());
  const int quota = cgroup_cpu_limit();
  return quota > 0 && quota < cpus ? quota : cpus;
}

int count_nvidia_gpus(const std::string& sysfs_root) {
  const std::string dir = sysfs_root + "/bus/pci/devices";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string dev = dir + "/" + e->d_name;
    std::string vendor, cls;
    if (!read_first_line(dev + "/vendor", &vendor) ||
        !read_first_line(dev + "/class", &cls)) {
      continue;
    }
    // "0x10de" and "0x030200" (class, subclass, programming interface).
    if (vendor.rfind("0x10de", 0) == 0 && cls.rfind("0x03", 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

std::vector<int> choose_engine_cores(int n, int numa_node,
                                     const std::vector<int>& allowed,
                                     const std::string& sysfs_root) {
  std::vector<int> out;
  if (n <= 0 || allowed.empty()) return out;
  std::vector<int> near, far;
  std::vector<int> node_cpus = cpus_of_numa_node(numa_node, sysfs_root);
  std::set<int> node_set(node_cpus.begin(), node_cpus.end());
  for (int c : allowed) {
    (numa_node < 0 || node_set.count(c) ? near : far).push_back(c);
  }
  if (near.empty()) near.swap(far);
  // Highest-numbered first: low cores tend to take interrupts and the
  // application's own threads.
  std::sort(near.rbegin(), near.rend());
  std::sort(far.rbegin(), far.rend());
  std::vector<int> order(near);
  order.insert(order.end(), far.begin(), far.end());
  for (int i = 0; i < n; ++i) out.push_back(order[i % order.size()]);
  return out;
}

}  // namespace uccl
