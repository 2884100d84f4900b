// NCCL's profiler-plugin ABI, versions 5 (NCCL 2.28) and 4 (2.27), declared
// from NCCL's profiler_v5.h / profiler_v4.h; every size and offset asserted.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace uccl::profiler::abi {

using Logger = void (*)(int level, unsigned long flags, const char* file,
                        int line, const char* fmt, ...);
constexpr int kLogWarn = 2;
constexpr int kLogInfo = 3;
constexpr unsigned long kLogInit = 1;  // NCCL_INIT

constexpr int kSuccess = 0;
constexpr int kInternalError = 3;
constexpr int kInvalidArgument = 4;

// Event types (ncclProfileGroup ...): a bit each, also the activation mask.
enum EventType : uint64_t {
  kGroup = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,
  kNetPlugin = 1u << 7,
  kGroupApi = 1u << 8,
  kCollApi = 1u << 9,
  kP2pApi = 1u << 10,
  kKernelLaunch = 1u << 11,
};
constexpr uint64_t kAllV5Types = (1u << 12) - 1;
constexpr uint64_t kAllV4Types = (1u << 8) - 1;  // v4: up to NetPlugin

// ncclProfilerEventState_t (shared by v4 and v5).
enum State : int {
  kProxyOpInProgress = 19,
  kSendGpuWait = 8,    // the GPU has not filled the step's buffer yet
  kSendPeerWait = 20,  // the receiver has not granted buffer space yet
  kSendWait = 9,       // posted to the network, not done
  kRecvWait = 10,      // posted to the network, not done
  kRecvFlushWait = 11,
  kRecvGpuWait = 12,  // received, the GPU has not consumed it yet
  kCtrlIdle = 13,
  kCtrlActive = 14,
  kCtrlSleep = 15,
  kCtrlWakeup = 16,
  kCtrlAppend = 17,
  kCtrlAppendEnd = 18,
  kNetPluginUpdate = 21,
  kKernelChStop = 22,
  kGroupStartApiStop = 23,
  kGroupEndApiStart = 24,
};

// ncclProfilerEventDescr_v5_t.
struct DescrV5 {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;  // GPU globaltimer, ns
    } kernelCh;
    struct {
      int64_t id;  // bits 16-31 net type, 0-15 version
      void* data;
    } netPlugin;
  };
};
static_assert(offsetof(DescrV5, parentObj) == 8, "ncclProfilerEventDescr_v5");
static_assert(offsetof(DescrV5, rank) == 16, "ncclProfilerEventDescr_v5");
static_assert(offsetof(DescrV5, coll) == 24, "ncclProfilerEventDescr_v5");
static_assert(offsetof(DescrV5, coll.count) == 56, "v5 coll");
static_assert(offsetof(DescrV5, coll.nChannels) == 80, "v5 coll");
static_assert(offsetof(DescrV5, coll.algo) == 88, "v5 coll");
static_assert(offsetof(DescrV5, coll.parentGroup) == 104, "v5 coll");
static_assert(offsetof(DescrV5, p2p.peer) == 56, "v5 p2p");
static_assert(offsetof(DescrV5, proxyOp.channelId) == 28, "v5 proxyOp");
static_assert(offsetof(DescrV5, proxyOp.isSend) == 44, "v5 proxyOp");
static_assert(offsetof(DescrV5, kernelCh.pTimer) == 32, "v5 kernelCh");
static_assert(offsetof(DescrV5, netPlugin.data) == 32, "v5 netPlugin");
static_assert(sizeof(DescrV5) == 112, "ncclProfilerEventDescr_v5");

// ncclProfilerEventDescr_v4_t: an 8-bit type, and no API events.
struct DescrV4 {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
};
static_assert(offsetof(DescrV4, coll) == 24, "ncclProfilerEventDescr_v4");
static_assert(sizeof(DescrV4) == 104, "ncclProfilerEventDescr_v4");

// ncclProfilerEventStateArgs_v4_t / _v5_t (the same union).
union StateArgs {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};
static_assert(sizeof(StateArgs) == 8, "ncclProfilerEventStateArgs");

struct ProfilerV5 {
  const char* name;
  int (*init)(void** context, uint64_t commId, int* eActivationMask,
              const char* commName, int nNodes, int nranks, int rank,
              Logger logfn);
  int (*startEvent)(void* context, void** eHandle, DescrV5* eDescr);
  int (*stopEvent)(void* eHandle);
  int (*recordEventState)(void* eHandle, int eState, StateArgs* eStateArgs);
  int (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV5) == 48, "ncclProfiler_v5");

struct ProfilerV4 {
  const char* name;
  int (*init)(void** context, int* eActivationMask, const char* commName,
              uint64_t commHash, int nNodes, int nranks, int rank,
              Logger logfn);
  int (*startEvent)(void* context, void** eHandle, DescrV4* eDescr);
  int (*stopEvent)(void* eHandle);
  int (*recordEventState)(void* eHandle, int eState, StateArgs* eStateArgs);
  int (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV4) == 48, "ncclProfiler_v4");

// NCCL's socket NetPlugin descriptor (net type 2, version 1).
constexpr int64_t kNetTypeSock = int64_t{2} << 16;
struct SockDescrV1 {
  uint8_t type;  // 1: ncclProfileSocket
  struct {
    int fd;
    int op;  // 0 send, 1 receive
    size_t length;
  } sock;
};
static_assert(offsetof(SockDescrV1, sock.length) == 16, "net_socket_v1");

}  // namespace uccl::profiler::abi
