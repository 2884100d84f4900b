// Tests for CPU lists, pinning and NUMA lookups; topology is read from a fake
// sysfs tree built in a temp dir so results do not depend on the machine.
#include "util/cpu.h"

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace uccl {
namespace {

TEST(CpuListTest, ParsesRangesAndSingles) {
  auto r = parse_cpu_list("0-3,8, 10-11\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list(*r), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5, 1, 2, 2, 3}), "1-3,5");
  auto empty = parse_cpu_list("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(CpuListTest, RejectsGarbage) {
  for (const char* bad : {"a", "3-1", "1-", "-2", "1,,x", "0-99999999"}) {
    auto r = parse_cpu_list(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(PinTest, PinsToAnAllowedCpu) {
  std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  int target = cpus.back();
  std::thread t([&] {
    ASSERT_TRUE(pin_current_thread(target).ok());
    // The scheduler must move us there before we next run.
    sched_yield();
    EXPECT_EQ(current_cpu(), target);
  });
  t.join();
}

TEST(PinTest, InvalidCpuIsAnError) {
  EXPECT_EQ(pin_current_thread(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(pin_current_thread(CPU_SETSIZE + 5).ok());
}

TEST(AvoidCpusTest, NarrowsTheCallingThreadUnlessNoneWouldRemain) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  std::thread t([&] {
    // Every CPU avoided: nothing changes.
    auto same = avoid_cpus_thread(0, cpus);
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_EQ(*same, cpus);
    EXPECT_EQ(allowed_cpus(), cpus);
    if (cpus.size() < 2) return;  // one CPU: nothing else to test
    // The last one and a CPU out of range avoided: the rest remain.
    auto now = avoid_cpus_thread(0, {cpus.back(), CPU_SETSIZE + 3, -1});
    ASSERT_TRUE(now.ok()) << now.status();
    const std::vector<int> rest(cpus.begin(), cpus.end() - 1);
    EXPECT_EQ(*now, rest);
    EXPECT_EQ(allowed_cpus(), rest);  // the thread's own mask
  });
  t.join();
  EXPECT_EQ(allowed_cpus(), cpus) << "other threads keep theirs";
}

// By thread id: another thread of this process is narrowed, the caller
// keeps its CPUs; a thread that does not exist is an error.
TEST(AvoidCpusTest, NarrowsAnotherThreadByItsId) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::vector<int> seen;
  std::thread t([&] {
    tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    while (!done.load()) std::this_thread::yield();
    seen = allowed_cpus();
  });
  while (tid.load() == 0) std::this_thread::yield();
  auto now = avoid_cpus_thread(tid.load(), {cpus.back()});
  ASSERT_TRUE(now.ok()) << now.status();
  const std::vector<int> want =
      cpus.size() < 2 ? cpus : std::vector<int>(cpus.begin(), cpus.end() - 1);
  EXPECT_EQ(*now, want);
  done.store(true);
  t.join();
  EXPECT_EQ(seen, want);
  EXPECT_EQ(allowed_cpus(), cpus) << "the caller keeps its CPUs";
  // An exited thread: join() can return before the kernel reaps it, and
  // until then it still has an affinity, so wait (bounded) for its task
  // entry to go.
  const std::string task = "/proc/self/task/" + std::to_string(tid.load());
  for (int i = 0; i < 5000 && access(task.c_str(), F_OK) == 0; ++i) {
    usleep(1000);
  }
  ASSERT_NE(access(task.c_str(), F_OK), 0) << task << " still there after 5 s";
  auto gone = avoid_cpus_thread(tid.load(), {cpus.back()});
  EXPECT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("sched_getaffinity"),
            std::string::npos);
}

TEST(FlockedFilesTest, ReadsGrantedFlocksFromProcLocks) {
  char tmpl[] = "/tmp/uccl_locks_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  {
    std::ofstream f(root + "/locks");
    f << "1: FLOCK  ADVISORY  WRITE 23494 00:1b:4 0 EOF\n"
         "2: POSIX  ADVISORY  WRITE 100 08:01:77 0 EOF\n"
         "2: -> FLOCK  ADVISORY  WRITE 555 00:1b:9 0 EOF\n"
         "3: FLOCK  ADVISORY  WRITE 23495 fd:02:123456789012 0 EOF\n"
         "4: FLOCK  ADVISORY  WRITE 7 zz:02:5 0 EOF\n"
         "5: FLOCK\n";
  }
  const std::vector<FileId> got = flocked_files(root);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (FileId{0x00, 0x1b, 4}));
  EXPECT_EQ(got[1], (FileId{0xfd, 0x02, 123456789012ull}));
  EXPECT_TRUE(flocked_files(root + "/missing").empty());
  std::remove((root + "/locks").c_str());
  rmdir(root.c_str());
}

TEST(FlockedFilesTest, SeesAFlockThisProcessHolds) {
  char tmpl[] = "/tmp/uccl_flock_XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  auto id = file_id(tmpl);
  ASSERT_TRUE(id.ok()) << id.status();
  auto held = [&] {
    const std::vector<FileId> all = flocked_files();
    return std::find(all.begin(), all.end(), *id) != all.end();
  };
  EXPECT_FALSE(held());
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_TRUE(held());
  ASSERT_EQ(flock(fd, LOCK_UN), 0);
  EXPECT_FALSE(held());
  close(fd);
  unlink(tmpl);
  EXPECT_EQ(file_id(tmpl).status().code(), StatusCode::kNotFound);
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/uccl_sysfs_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    // Two nodes: node0 = cpus 0-3, node1 = cpus 4-7; NIC eth9 on node 1.
    write("devices/system/node/node0/cpulist", "0-3\n");
    write("devices/system/node/node1/cpulist", "4-7\n");
    for (int c = 0; c < 8; ++c) {
      mkdirs("devices/system/cpu/cpu" + std::to_string(c) + "/node" +
             std::to_string(c / 4));
    }
    write("class/net/eth9/device/numa_node", "1\n");
    write("class/net/veth0/device/numa_node", "-1\n");
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void mkdirs(const std::string& rel) {
    std::string path = root_;
    size_t pos = 0;
    while (pos != std::string::npos) {
      pos = rel.find('/', pos + 1);
      path = root_ + "/" + rel.substr(0, pos);
      mkdir(path.c_str(), 0755);
    }
  }
  void write(const std::string& rel, const std::string& text) {
    mkdirs(rel.substr(0, rel.rfind('/')));
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string root_;
};

TEST_F(FakeSysfs, NumaLookups) {
  EXPECT_EQ(numa_node_of_cpu(2, root_), 0);
  EXPECT_EQ(numa_node_of_cpu(6, root_), 1);
  EXPECT_EQ(numa_node_of_cpu(99, root_), -1);
  EXPECT_EQ(cpus_of_numa_node(1, root_), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(cpus_of_numa_node(5, root_).empty());
  EXPECT_EQ(numa_node_of_netdev("eth9", root_), 1);
  EXPECT_EQ(numa_node_of_netdev("veth0", root_), -1);
  EXPECT_EQ(numa_node_of_netdev("missing", root_), -1);
}

TEST_F(FakeSysfs, EngineCoresPreferTheNicsNode) {
  std::vector<int> allowed{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(choose_engine_cores(3, 1, allowed, root_),
            (std::vector<int>{7, 6, 5}));
  // More engines than node-local cores: spill to the other node.
  EXPECT_EQ(choose_engine_cores(6, 1, allowed, root_),
            (std::vector<int>{7, 6, 5, 4, 3, 2}));
  // Unknown node: any core, highest first.
  EXPECT_EQ(choose_engine_cores(2, -1, allowed, root_),
            (std::vector<int>{7, 6}));
  // Node's cores not allowed (cgroup): fall back to what is allowed.
  EXPECT_EQ(choose_engine_cores(2, 1, {0, 1}, root_), (std::vector<int>{1, 0}));
  // Fewer cores than engines: wrap.
  EXPECT_EQ(choose_engine_cores(3, -1, {2}, root_),
            (std::vector<int>{2, 2, 2}));
  EXPECT_TRUE(choose_engine_cores(0, 0, allowed, root_).empty());
}

TEST_F(FakeSysfs, CgroupCpuLimitFromQuotaOverPeriod) {
  // Writes one cgroup file (relative to the fake root, which also stands
  // for /proc) and reads the limit back.
  auto with = [&](const std::string& rel, const std::string& text) {
    write(rel, text + "\n");
    return cgroup_cpu_limit(root_, root_);
  };
  EXPECT_EQ(cgroup_cpu_limit(root_, root_), 0);  // no cgroup files: no limit
  write("fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(with("fs/cgroup/cpu/cpu.cfs_quota_us", "-1"), 0);      // v1, none
  EXPECT_EQ(with("fs/cgroup/cpu/cpu.cfs_quota_us", "250000"), 3);  // 2.5
  // v2 wins where both exist.
  EXPECT_EQ(with("fs/cgroup/cpu.max", "max 100000"), 0);
  EXPECT_EQ(with("fs/cgroup/cpu.max", "1600000 100000"), 16);
  EXPECT_EQ(with("fs/cgroup/cpu.max", "50000 100000"), 1);
  for (const char* bad : {"", "12x 100000", "100000", "0 100000", "5 0"}) {
    EXPECT_EQ(with("fs/cgroup/cpu.max", bad), 0) << "'" << bad << "'";
  }
  // The process's own cgroup (from <proc>/self/cgroup) and its ancestors:
  // the lowest quota binds.
  write("fs/cgroup/cpu.max", "max 100000\n");
  EXPECT_EQ(with("self/cgroup", "0::/job.slice/rank3.scope"), 0);  // none
  EXPECT_EQ(with("fs/cgroup/job.slice/rank3.scope/cpu.max", "800000 100000"),
            8);
  EXPECT_EQ(with("fs/cgroup/job.slice/cpu.max", "400000 100000"), 4);
  EXPECT_EQ(with("fs/cgroup/job.slice/cpu.max", "max 100000"), 8);
  // Malformed: the walk ends at the root.
  EXPECT_EQ(with("self/cgroup", "0::relative"), 0);
}

TEST_F(FakeSysfs, CountsNvidiaDisplayFunctionsOnly) {
  EXPECT_EQ(count_nvidia_gpus(root_), 0);  // no bus/pci at all
  auto dev = [&](const std::string& addr, const char* vendor, const char* cls) {
    write("bus/pci/devices/" + addr + "/vendor", std::string(vendor) + "\n");
    write("bus/pci/devices/" + addr + "/class", std::string(cls) + "\n");
  };
  dev("0000:18:00.0", "0x10de", "0x030200");  // H100/H200: 3D controller
  dev("0000:2a:00.0", "0x10de", "0x030000");  // VGA-class GPU
  dev("0000:2a:00.1", "0x10de", "0x040300");  // its HDMI audio
  dev("0000:05:00.0", "0x10de", "0x068000");  // NVSwitch
  dev("0000:03:00.0", "0x1a03", "0x030000");  // the BMC's VGA
  dev("0000:3b:00.0", "0x15b3", "0x020700");  // a ConnectX NIC
  mkdirs("bus/pci/devices/0000:00:00.0");     // no vendor file
  EXPECT_EQ(count_nvidia_gpus(root_), 2);
  EXPECT_EQ(count_nvidia_gpus(root_ + "/missing"), 0);
}

}  // namespace
}  // namespace uccl
