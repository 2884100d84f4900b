// NCCL's net-plugin ABI (versions 8 to 12) and tuner ABI (v4), declared by
// us from the layout facts in docs/nccl-net-abi.md, NCCL's net_v12.h and
// tuner_v4.h; every size and offset is static_asserted.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl::ncclabi {

// ncclResult_t (an int enum on the C side).
enum NcclResult : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,    // the network failed (peer gone, transfer error)
  kInternalError = 3,  // NCCL misused the plugin
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};

// ncclDebugLogLevel and the NET subsystem flag.
enum LogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5,
};
constexpr unsigned long kLogSubsysNet = 16;

using Logger = void (*)(int level, unsigned long flags, const char* file,
                        int line, const char* fmt, ...);
// ncclProfilerCallback_t: type 0 start (pHandle = the parent NCCL gave
// isend/irecv), 1 stop, 2 update (extData passed to the profiler's
// recordEventState). pluginId: bits 0-15 descriptor version, 16-31 type;
// the plugin's descriptor is collective/net_event.h.
using ProfilerCallback = int (*)(void** eHandle, int type, void* pHandle,
                                 int64_t pluginId, void* extData);
constexpr int kProfilerStart = 0;
constexpr int kProfilerStop = 1;
constexpr int kProfilerUpdate = 2;

constexpr int kHandleMaxSize = 128;   // NCCL_NET_HANDLE_MAXSIZE
constexpr int kMaxRequests = 32;      // NCCL_NET_MAX_REQUESTS, per comm
constexpr int kPtrHost = 1;           // NCCL_PTR_HOST
constexpr int kPtrCuda = 2;           // NCCL_PTR_CUDA
constexpr int kPtrDmaBuf = 4;         // NCCL_PTR_DMABUF
constexpr int kNetDeviceHost = 0;     // netDeviceType: no device offload
constexpr int kMaxDevsPerNic = 4;     // NCCL_NET_MAX_DEVS_PER_NIC (v9-v11)
constexpr int kMaxDevsPerNicV12 = 8;  // NCCL_NET_MAX_DEVS_PER_NIC_V12
constexpr int16_t kNetIdUndef = -1;   // NCCL_NET_ID_UNDEF (railId, planeId)
// Value NCCL pre-sets in *request for a receive whose completion it does
// not need (LL/LL128); irecv must overwrite it.
constexpr uintptr_t kOptionalRecvCompletion = 0x1;

struct DeviceHandle {  // ncclNetDeviceHandle_v8..v11
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};
static_assert(sizeof(DeviceHandle) == 32, "ncclNetDeviceHandle");

struct CommConfig {  // ncclNetCommConfig_v10/v11
  int trafficClass;  // -1 undefined
};
static_assert(sizeof(CommConfig) == 4, "ncclNetCommConfig");

struct VDeviceProps {  // ncclNetVDeviceProps_v9..v11
  int ndevs;
  int devs[kMaxDevsPerNic];
};
static_assert(sizeof(VDeviceProps) == 20, "ncclNetVDeviceProps");

struct PropertiesV8 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;  // Mb/s
  int port;
  float latency;  // us
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
};
static_assert(sizeof(PropertiesV8) == 64, "ncclNetProperties_v8");
static_assert(offsetof(PropertiesV8, pciPath) == 8, "v8 props");
static_assert(offsetof(PropertiesV8, guid) == 16, "v8 props");
static_assert(offsetof(PropertiesV8, ptrSupport) == 24, "v8 props");
static_assert(offsetof(PropertiesV8, regIsGlobal) == 28, "v8 props");
static_assert(offsetof(PropertiesV8, speed) == 32, "v8 props");
static_assert(offsetof(PropertiesV8, port) == 36, "v8 props");
static_assert(offsetof(PropertiesV8, latency) == 40, "v8 props");
static_assert(offsetof(PropertiesV8, maxComms) == 44, "v8 props");
static_assert(offsetof(PropertiesV8, maxRecvs) == 48, "v8 props");
static_assert(offsetof(PropertiesV8, netDeviceType) == 52, "v8 props");
static_assert(offsetof(PropertiesV8, netDeviceVersion) == 56, "v8 props");

struct PropertiesV9 {  // also v10
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
};
static_assert(sizeof(PropertiesV9) == 104, "ncclNetProperties_v9");
static_assert(offsetof(PropertiesV9, forceFlush) == 32, "v9 props");
static_assert(offsetof(PropertiesV9, speed) == 36, "v9 props");
static_assert(offsetof(PropertiesV9, port) == 40, "v9 props");
static_assert(offsetof(PropertiesV9, latency) == 44, "v9 props");
static_assert(offsetof(PropertiesV9, maxComms) == 48, "v9 props");
static_assert(offsetof(PropertiesV9, maxRecvs) == 52, "v9 props");
static_assert(offsetof(PropertiesV9, netDeviceType) == 56, "v9 props");
static_assert(offsetof(PropertiesV9, netDeviceVersion) == 60, "v9 props");
static_assert(offsetof(PropertiesV9, vProps) == 64, "v9 props");
static_assert(offsetof(PropertiesV9, maxP2pBytes) == 88, "v9 props");
static_assert(offsetof(PropertiesV9, maxCollBytes) == 96, "v9 props");

struct PropertiesV11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};
static_assert(sizeof(PropertiesV11) == 112, "ncclNetProperties_v11");
static_assert(offsetof(PropertiesV11, vProps) == 64, "v11 props");
static_assert(offsetof(PropertiesV11, maxP2pBytes) == 88, "v11 props");
static_assert(offsetof(PropertiesV11, maxCollBytes) == 96, "v11 props");
static_assert(offsetof(PropertiesV11, maxMultiRequestSize) == 104, "v11 props");

struct NetAttrV11;  // setNetAttr's argument: not used (we pass NULL)

// v12 (NCCL 2.30): a virtual NIC of up to 8 devices, and the NIC's rail and
// plane at the end of the properties.
struct VDevicePropsV12 {  // ncclNetVDeviceProps_v12
  int ndevs;
  int devs[kMaxDevsPerNicV12];
};
static_assert(sizeof(VDevicePropsV12) == 36, "ncclNetVDeviceProps_v12");

struct PropertiesV12 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDevicePropsV12 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;   // kNetIdUndef: no rail
  int16_t planeId;  // kNetIdUndef: no plane
};
static_assert(sizeof(PropertiesV12) == 128, "ncclNetProperties_v12");
static_assert(offsetof(PropertiesV12, netDeviceVersion) == 60, "v12 props");
static_assert(offsetof(PropertiesV12, vProps) == 64, "v12 props");
static_assert(offsetof(PropertiesV12, maxP2pBytes) == 104, "v12 props");
static_assert(offsetof(PropertiesV12, maxCollBytes) == 112, "v12 props");
static_assert(offsetof(PropertiesV12, maxMultiRequestSize) == 120, "v12 props");
static_assert(offsetof(PropertiesV12, railId) == 124, "v12 props");
static_assert(offsetof(PropertiesV12, planeId) == 126, "v12 props");

// setNetAttr's hints (v12): expected peers and flows per direction and the
// collective about to run; -1 (NCCL_NET_ATTR_UNDEF) where NCCL has none.
struct NetCommAttrV12 {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
};
struct NetAttrV12 {
  NetCommAttrV12 sendCommAttr;
  NetCommAttrV12 recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
};
static_assert(sizeof(NetAttrV12) == 44, "ncclNetAttr_v12");
static_assert(offsetof(NetAttrV12, op) == 32, "ncclNetAttr_v12");

// Function tables, in NCCL's field order.
struct NetV8 {
  const char* name;
  int (*init)(Logger logger);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PropertiesV8* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(int dev, void* handle, void** sendComm,
                 DeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type,
                     uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
               void** request);
  int (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags,
               void** mhandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
};
static_assert(sizeof(NetV8) == 152, "ncclNet_v8");
static_assert(offsetof(NetV8, isend) == 80, "ncclNet_v8");
static_assert(offsetof(NetV8, irecvConsumed) == 144, "ncclNet_v8");

struct NetV9 {
  const char* name;
  int (*init)(Logger logger);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PropertiesV9* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(int dev, void* handle, void** sendComm,
                 DeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type,
                     uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
               void** mhandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
  int (*makeVDevice)(int* d, VDeviceProps* props);
};
static_assert(sizeof(NetV9) == 160, "ncclNet_v9");
static_assert(offsetof(NetV9, makeVDevice) == 152, "ncclNet_v9");

struct NetV10 {
  const char* name;
  int (*init)(Logger logger, ProfilerCallback profiler);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PropertiesV9* props);
  int (*listen)(int dev, void* handle, void** listenComm);
  int (*connect)(int dev, CommConfig* config, void* handle, void** sendComm,
                 DeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type,
                     uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void* phandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
               void** mhandles, void** phandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
  int (*makeVDevice)(int* d, VDeviceProps* props);
};
static_assert(sizeof(NetV10) == 160, "ncclNet_v10");

struct NetV11 {
  const char* name;
  int (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger logger,
              ProfilerCallback profiler);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PropertiesV11* props);
  int (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  int (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                 DeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type,
                     uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void* phandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
               void** mhandles, void** phandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
  int (*makeVDevice)(int* d, VDeviceProps* props);
  int (*finalize)(void* ctx);
  int (*setNetAttr)(void* ctx, NetAttrV11* attr);
};
static_assert(sizeof(NetV11) == 176, "ncclNet_v11");
static_assert(offsetof(NetV11, listen) == 32, "ncclNet_v11");
static_assert(offsetof(NetV11, isend) == 80, "ncclNet_v11");
static_assert(offsetof(NetV11, makeVDevice) == 152, "ncclNet_v11");
static_assert(offsetof(NetV11, finalize) == 160, "ncclNet_v11");
static_assert(offsetof(NetV11, setNetAttr) == 168, "ncclNet_v11");

// v12: v11's functions with v12's properties, virtual-NIC props and
// attributes.
struct NetV12 {
  const char* name;
  int (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger logger,
              ProfilerCallback profiler);
  int (*devices)(int* ndev);
  int (*getProperties)(int dev, PropertiesV12* props);
  int (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  int (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                 DeviceHandle** sendDevComm);
  int (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  int (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  int (*regMrDmaBuf)(void* comm, void* data, size_t size, int type,
                     uint64_t offset, int fd, void** mhandle);
  int (*deregMr)(void* comm, void* mhandle);
  int (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void* phandle, void** request);
  int (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
               void** mhandles, void** phandles, void** request);
  int (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                void** request);
  int (*test)(void* request, int* done, int* sizes);
  int (*closeSend)(void* sendComm);
  int (*closeRecv)(void* recvComm);
  int (*closeListen)(void* listenComm);
  int (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  int (*irecvConsumed)(void* recvComm, int n, void* request);
  int (*makeVDevice)(int* d, VDevicePropsV12* props);
  int (*finalize)(void* ctx);
  int (*setNetAttr)(void* ctx, NetAttrV12* attr);
};
static_assert(sizeof(NetV12) == 176, "ncclNet_v12");
static_assert(offsetof(NetV12, getProperties) == 24, "ncclNet_v12");
static_assert(offsetof(NetV12, isend) == 80, "ncclNet_v12");
static_assert(offsetof(NetV12, makeVDevice) == 152, "ncclNet_v12");
static_assert(offsetof(NetV12, finalize) == 160, "ncclNet_v12");
static_assert(offsetof(NetV12, setNetAttr) == 168, "ncclNet_v12");

// ---------------------------------------------------------------- tuner
// ncclTuner_v4_t (NCCL 2.23 and later load it; 2.28 still does). NCCL looks
// for it in the net plugin's library when NCCL_TUNER_PLUGIN is unset, and
// calls init once per communicator, getCollInfo per collective. The cost
// table is float[numAlgo][numProto], contiguous, in microseconds; an entry
// of -1 (kAlgoProtoIgnore) is a choice NCCL must not make.
constexpr unsigned long kLogSubsysTuning = 64;
constexpr int kFuncAllReduce = 4;  // ncclFunc_t
constexpr int kAlgoTree = 0;       // NCCL_ALGO_TREE (Ring is 1)
constexpr int kProtoLL = 0;        // NCCL_PROTO_LL
constexpr int kProtoLL128 = 1;     // NCCL_PROTO_LL128
constexpr int kProtoSimple = 2;    // NCCL_PROTO_SIMPLE
constexpr float kAlgoProtoIgnore = -1.0f;

struct TunerV4 {
  const char* name;
  int (*init)(size_t nRanks, size_t nNodes, Logger logFunction, void** ctx);
  int (*getCollInfo)(void* ctx, int collType, size_t nBytes, int numPipeOps,
                     float** collCostTable, int numAlgo, int numProto,
                     int regBuff, int* nChannels);
  int (*destroy)(void* ctx);
};
static_assert(sizeof(TunerV4) == 32, "ncclTuner_v4");
static_assert(offsetof(TunerV4, init) == 8, "ncclTuner_v4");
static_assert(offsetof(TunerV4, getCollInfo) == 16, "ncclTuner_v4");
static_assert(offsetof(TunerV4, destroy) == 24, "ncclTuner_v4");

}  // namespace uccl::ncclabi
