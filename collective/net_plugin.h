// The NCCL net plugin's implementation, version-neutral (v11 semantics):
// devices, non-blocking listen/connect/accept, isend/irecv/test over UCCL
// Endpoints; net_exports.cc wraps it in NCCL's v8..v11 function tables.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/gpu_direct.h"
#include "collective/nccl_net_abi.h"
#include "collective/net_event.h"
#include "uccl/endpoint.h"
#include "uccl/status.h"
#include "uccl/striped.h"

namespace uccl::nccl {

// Knobs (defined in net_plugin.cc, listed by `uccl_devinfo --knobs`):
//   UCCL_NCCL_DEVICES    comma list of devices to expose ("" = automatic)
//   UCCL_NCCL_ENGINES    engine threads per device (0 = 3/4 of the rank's
//                        share of the CPUs, 1-8: auto_engines)
//   UCCL_NCCL_CONNS      UCCL connections per NCCL comm (0 = half the
//                        engines, 1-6: auto_conns)
//   UCCL_NCCL_MAX_RECVS  grouped receives offered to NCCL (default 1)
//   UCCL_NCCL_MAX_BYTES  largest message NCCL may hand us (default 1 GiB)
//   UCCL_NCCL_STRIPE_KB  KiB of a message per connection (0 = 1 MiB / K in
//                        whole chunks, collective/stripe.h)
//   UCCL_NCCL_PARTS      how receivers post a message's parts (PartsMode)
//   UCCL_NCCL_SPEED_MBPS, UCCL_NCCL_SPREAD: see there

struct PluginDevice;
struct DeviceEndpoint;
struct FlushLink;
struct PluginComm;
struct PluginListen;

// One outstanding isend/irecv, from its comm's fixed pool: a message over
// the comm's connections (uccl/striped.h), or a grouped receive (n > 1, one
// connection, tags pick the buffers) as one engine request.
struct PluginRequest {
  StripedRequest s;
  Request grouped;
  PluginComm* comm = nullptr;
  std::atomic<bool> used{false};
  int n = 0;                     // NCCL buffers (grouped receives)
  bool flush = false;            // an iflush: `grouped` is its read-back
  void* event = nullptr;         // profiler handle
  ncclabi::UcclNetEventV1 ev{};  // what the profiler event carries
};

// What a regMr returns: the registration on the comm's endpoint (owned by
// that comm until deregMr or its close).
struct PluginMr {
  MrHandle* mh = nullptr;
  bool gpu = false;  // CUDA memory (peer memory or dma-buf)
  uint8_t* base = nullptr;
  size_t len = 0;
  // Advertised to the flush link at its first flush (set under mrs_mu,
  // read without it once true).
  std::atomic<bool> advertised{false};
  RemoteRegion region;
};

class NetPlugin {
 public:
  static NetPlugin& get();

  // Once per process (later calls only update the logger/profiler).
  ncclabi::NcclResult init(ncclabi::Logger logger,
                           ncclabi::ProfilerCallback profiler);
  ncclabi::NcclResult devices(int* ndev);
  // The newest layout (v12); older versions' exports convert it.
  ncclabi::NcclResult properties(int dev, ncclabi::PropertiesV12* props);
  ncclabi::NcclResult listen(int dev, void* handle, void** listen_comm);
  ncclabi::NcclResult connect(int dev, void* handle, void** send_comm);
  ncclabi::NcclResult accept(void* listen_comm, void** recv_comm);
  ncclabi::NcclResult reg_mr(void* comm, void* data, size_t size, int type,
                             void** mhandle);
  // regMrDmaBuf: a dma-buf of GPU memory on devices that take one, else
  // as regMr.
  ncclabi::NcclResult reg_mr_dmabuf(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle);
  ncclabi::NcclResult dereg_mr(void* comm, void* mhandle);
  ncclabi::NcclResult isend(void* send_comm, void* data, size_t size, int tag,
                            void* mhandle, void* phandle, void** request);
  ncclabi::NcclResult irecv(void* recv_comm, int n, void** data,
                            const size_t* sizes, const int* tags,
                            void** mhandles, void** phandles, void** request);
  ncclabi::NcclResult iflush(void* recv_comm, int n, void** data,
                             const int* sizes, void** mhandles, void** request);
  ncclabi::NcclResult test(void* request, int* done, int* sizes);
  // Cancels what is pending, waits (bounded) until the engines let go of
  // the comm's requests, and deregisters the memory handles still
  // registered on it. A handle belongs to the comm it was registered on:
  // deregMr on another comm is an error (kInvalidUsage).
  ncclabi::NcclResult close_comm(void* comm);
  ncclabi::NcclResult close_listen(void* listen_comm);
  // A virtual NIC of devs[0..ndevs) (v9-v11: up to 4, v12: up to 8).
  ncclabi::NcclResult make_vdevice(int* d, int ndevs, const int* devs);

  // Logs through NCCL's logger (or stderr before init).
  void log(int level, const char* file, int line, const std::string& msg);
  int max_recvs() const { return max_recvs_; }
  // True once initialised with only software-NIC devices (the tuner's
  // measurements apply there, not to verbs NICs).
  bool software_nic_only();

  // For tests and the conformance harness: the live endpoint of a device.
  Endpoint* endpoint_for_testing(int dev);

 private:
  NetPlugin() = default;
  ~NetPlugin();
  // The loopback link iflush reads through, made on first use (mu_ held).
  Result<FlushLink*> flush_link(PluginComm* c);
  // d's endpoint for the calling thread's GPU, started on first use.
  Result<DeviceEndpoint*> endpoint(PluginDevice* d);
  // init()'s steps.
  Status add_devices(std::string* why);
  Status read_settings(std::string* engines_why);
  // A free request of c's pool (one done early is reused once its empty
  // parts finished), or nullptr.
  PluginRequest* alloc_request(PluginComm* c);
  // A registration (or its error) recorded on c as NCCL's memory handle.
  ncclabi::NcclResult add_mr(PluginComm* c, const Result<MrHandle*>& mh,
                             void* data, size_t size, bool gpu, void** mhandle);
  // NCCL's profiler (NetPlugin events, collective/net_event.h): started at
  // the post, updated with the outcome and stopped at completion.
  void profile_start(PluginRequest* r, void* phandle, int op, size_t bytes);
  void profile_stop(PluginRequest* r, size_t bytes, ncclabi::NcclResult result);
  // Engine placement (UCCL_NCCL_SPREAD): a new comm's lane, send and
  // receive comms each taking turns per device (mu_ held), and the engine
  // of its connection i of k (lane_engine in collective/stripe.h).
  static uint32_t next_lane(DeviceEndpoint* e, bool send);
  static int comm_engine(const DeviceEndpoint* e, bool send, uint32_t lane,
                         int i, int k);
  void log_comm(const PluginComm* c);  // where its connections run
  // Once per calling thread (NCCL's proxy threads), where
  // UCCL_NCCL_STEER_THREADS allows: keeps it off the cores engines run on;
  // from the first send or receive (data_path), the process's main thread
  // too, once (UCCL_NCCL_STEER_MAIN).
  void steer_thread(bool data_path);
  // Takes `avoid` out of thread `tid`'s CPUs and logs it as `who` + `tid`,
  // or warns.
  void steer(pid_t tid, const std::vector<int>& avoid, const char* who);
  std::atomic<bool> main_steered_{false};  // done, or not to be (init())
  ncclabi::NcclResult fail(const char* what, const Status& st,
                           ncclabi::NcclResult code = ncclabi::kSystemError);

  std::mutex mu_;
  bool inited_ = false;
  std::atomic<ncclabi::Logger> logger_{nullptr};
  std::atomic<ncclabi::ProfilerCallback> profiler_{nullptr};
  std::vector<std::unique_ptr<PluginDevice>> devs_;
  int engines_per_device_ = 1;  // UCCL_NCCL_ENGINES, or auto_engines
  int conns_per_comm_ = 1;
  PartsMode parts_mode_ = PartsMode::kAuto;  // UCCL_NCCL_PARTS
  FlushMode flush_mode_ = FlushMode::kAuto;  // UCCL_NCCL_FLUSH
  bool spread_ = true;                       // UCCL_NCCL_SPREAD
  int64_t stripe_kb_ = 0;                    // UCCL_NCCL_STRIPE_KB
  bool steer_threads_ = true;                // UCCL_NCCL_STEER_THREADS
  int max_recvs_ = 1;
  uint64_t max_bytes_ = 0;
  std::atomic<uint64_t> next_tag_{1};
};

}  // namespace uccl::nccl
