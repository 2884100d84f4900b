// Tests of the NCCL profiler probe (nccl_profiler_probe.cc): it is loaded
// the way NCCL loads it and fed good and bad NetPlugin events.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

// The probe's ABI, as NCCL sees it (see the probe for the layouts).
struct SocketDescr {
  uint8_t type;
  alignas(8) int fd;
  int op;
  size_t length;
};
static_assert(offsetof(SocketDescr, fd) == 8 &&
                  offsetof(SocketDescr, length) == 16,
              "ncclProfilerNetSockDescr_v1_t");
struct EventDescr {
  uint64_t type;
  void* parent;
  int rank;
  int64_t id;  // net_plugin.id, or proxy_step.step in its low bytes
  void* data;
  unsigned char rest[72];
};
static_assert(sizeof(EventDescr) == 24 + 88, "v5 descriptor size");
using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);
struct Profiler {
  const char* name;
  int (*init)(void**, uint64_t, int*, const char*, int, int, int, Logger);
  int (*start_event)(void*, void**, EventDescr*);
  int (*stop_event)(void*);
  int (*record_event_state)(void*, int, void*);
  int (*finalize)(void*);
};

constexpr uint64_t kProxyOp = 1u << 3, kProxyStep = 1u << 4,
                   kNetPlugin = 1u << 7;
constexpr int64_t kSockV1 = (int64_t{2} << 16) | 1;

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = ::testing::TempDir() + "probe_test_report";
    setenv("PROFILER_PROBE_OUT", out_.c_str(), 1);
    lib_ = dlopen(UCCL_PROBE_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    p_ = static_cast<Profiler*>(dlsym(lib_, "ncclProfiler_v5"));
    ASSERT_NE(p_, nullptr);
    int mask = 0;
    ASSERT_EQ(p_->init(&ctx_, 7, &mask, "test", 1, 2, 1, nullptr), 0);
    EXPECT_EQ(mask, static_cast<int>(kProxyOp | kProxyStep | kNetPlugin));
  }

  // The report's counters after a finalize.
  std::map<std::string, long> report() {
    p_->finalize(ctx_);
    std::ifstream f(out_ + "." + std::to_string(getpid()));
    std::map<std::string, long> m;
    std::string kv;
    while (f >> kv) {
      auto eq = kv.find('=');
      if (eq != std::string::npos)
        m[kv.substr(0, eq)] = std::stol(kv.substr(eq + 1));
    }
    return m;
  }

  void* start(uint64_t type, void* parent, int64_t id, void* data) {
    EventDescr d{};
    d.type = type;
    d.parent = parent;
    d.rank = 1;
    d.id = id;
    d.data = data;
    void* h = reinterpret_cast<void*>(1);
    EXPECT_EQ(p_->start_event(ctx_, &h, &d), 0);
    return h;
  }

  std::string out_;
  void* lib_ = nullptr;
  Profiler* p_ = nullptr;
  void* ctx_ = nullptr;
};

TEST_F(ProbeTest, CountsGoodNetEventsAndEachKindOfMistake) {
  auto base = report();
  EXPECT_EQ(base["rank"], 1);

  // Good: a step, a send and a receive inside it, stopped in turn.
  void* op = start(kProxyOp, nullptr, 0, nullptr);
  void* step = start(kProxyStep, op, 0, nullptr);
  ASSERT_NE(step, nullptr);
  SocketDescr send{1, 5, 0, 4096}, recv{1, 5, 1, 100};
  void* a = start(kNetPlugin, step, kSockV1, &send);
  void* b = start(kNetPlugin, step, kSockV1, &recv);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, a);
  EXPECT_EQ(p_->stop_event(a), 0);
  EXPECT_EQ(p_->stop_event(b), 0);
  auto m = report();
  EXPECT_EQ(m["net_start"] - base["net_start"], 2);
  EXPECT_EQ(m["net_stop"] - base["net_stop"], 2);
  EXPECT_EQ(m["net_send"] - base["net_send"], 1);
  EXPECT_EQ(m["net_recv"] - base["net_recv"], 1);
  EXPECT_EQ(m["net_bytes"] - base["net_bytes"], 4196);
  EXPECT_EQ(m["bad_descr"], 0);
  EXPECT_EQ(m["bad_parent"], 0);
  EXPECT_EQ(m["bad_stop"], 0);

  // Each mistake is counted as its own kind.
  SocketDescr bad_op{1, 5, 7, 1}, bad_type{3, 5, 0, 1};
  void* c1 = start(kNetPlugin, step, kSockV1 + 1, &send);           // version 2
  void* c2 = start(kNetPlugin, step, int64_t{1} << 16 | 1, &send);  // IB
  void* c3 = start(kNetPlugin, step, kSockV1, nullptr);
  void* c4 = start(kNetPlugin, step, kSockV1, &bad_op);
  void* c5 = start(kNetPlugin, step, kSockV1, &bad_type);
  m = report();
  EXPECT_EQ(m["bad_descr"], 5);
  EXPECT_EQ(m["bad_parent"], 0);
  for (void* h : {c1, c2, c3, c4, c5}) p_->stop_event(h);

  void* d1 = start(kNetPlugin, op, kSockV1, &send);       // parent: an op
  void* d2 = start(kNetPlugin, nullptr, kSockV1, &send);  // no parent
  EXPECT_EQ(p_->stop_event(step), 0);
  void* d3 = start(kNetPlugin, step, kSockV1, &send);  // a stopped step
  m = report();
  EXPECT_EQ(m["bad_parent"], 3);
  EXPECT_EQ(m["bad_descr"], 5);

  for (void* h : {d1, d2, d3}) p_->stop_event(h);
  EXPECT_EQ(report()["bad_stop"], 0);
  p_->stop_event(d1);  // twice
  int not_a_handle = 0;
  p_->stop_event(&not_a_handle);
  m = report();
  EXPECT_EQ(m["bad_stop"], 2);
  EXPECT_EQ(m["net_start"] - m["net_stop"], 0)
      << "every start above was stopped once";
  EXPECT_EQ(m["busy"], 0);
}

}  // namespace
