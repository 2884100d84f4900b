// Where this process's engine threads run, read from /proc/self/task, for
// tests of core placement (each engine pins itself to one core when it starts).
#pragma once
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "util/cpu.h"

namespace uccl::testing {

// The core of each "uccl-eng-*" thread pinned to one CPU (one entry per
// thread, sorted), once `want` threads are pinned or after 5 s.
inline std::vector<int> pinned_engine_cores(size_t want) {
  std::vector<int> cores;
  for (int i = 0; i < 500; ++i) {
    cores.clear();
    DIR* d = opendir("/proc/self/task");
    if (d == nullptr) break;
    while (dirent* e = readdir(d)) {
      const std::string task = std::string("/proc/self/task/") + e->d_name;
      std::ifstream comm(task + "/comm");
      std::string name;
      if (!std::getline(comm, name) || name.rfind("uccl-eng-", 0) != 0) {
        continue;
      }
      std::ifstream status(task + "/status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
        auto list = parse_cpu_list(line.substr(line.find(':') + 1));
        if (list.ok() && list->size() == 1) cores.push_back(list->front());
      }
    }
    closedir(d);
    if (cores.size() >= want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::sort(cores.begin(), cores.end());
  return cores;
}

}  // namespace uccl::testing
