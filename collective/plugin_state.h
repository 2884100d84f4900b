// The NCCL plugin's internal state shared by the net_plugin*.cc files: the
// connect handle's layout, devices, comms, listens and connects in progress.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "collective/net_plugin.h"

namespace uccl::nccl {

struct ConnectStage;

inline constexpr uint32_t kHandleMagic = 0x55434e48;  // "UCNH"
inline constexpr uint16_t kHandleVersion =
    3;  // 2: the acceptor's stripe; 3: flags
inline constexpr uint64_t kStageMagic = 0x5543434f4e4e4543ull;

// The handshake tag of a comm's connection i (a listen comm's tag below
// 2^56, connection index in the low byte).
inline uint64_t conn_tag(uint64_t comm_tag, int i) {
  return (comm_tag << 8) | static_cast<uint64_t>(i);
}

// What listen() writes into NCCL's 128-byte handle; the connector's copy
// also carries its progress between connect() calls (zero when written).
struct ConnectHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t nconns;  // connections the acceptor waits for
  uint32_t ipv4_be;
  uint16_t port;
  uint16_t max_recvs;  // the acceptor's, so both sides agree
  uint64_t tag;        // the listen comm; connection i sends conn_tag(tag, i)
  uint64_t stage_magic;
  ConnectStage* stage;
  uint32_t stripe_bytes;  // the acceptor's: connectors cut messages by it
  uint32_t flags;         // the acceptor's kHandleFlag*: connectors follow
};
// flags: the acceptor's PartsMode (UCCL_NCCL_PARTS) in the low two bits.
inline constexpr uint32_t kHandleFlagPartsMask = 3;
static_assert(sizeof(ConnectHandle) <= ncclabi::kHandleMaxSize,
              "NCCL handle size");
static_assert(offsetof(ConnectHandle, port) == 12, "handle layout");
static_assert(offsetof(ConnectHandle, stage) == 32, "handle layout");
static_assert(offsetof(ConnectHandle, stripe_bytes) == 40, "handle layout");
static_assert(offsetof(ConnectHandle, flags) == 44, "handle layout");

// One endpoint (engines, bootstrap port) of a device. A process that drives
// several GPUs (one NCCL rank each) gets one per GPU, keyed by the CUDA
// device current on NCCL's calling thread, so each rank has engines of its
// own as it would in a process of its own; otherwise one (gpu -1 where
// CUDA is not in use).
// A connection of an endpoint to itself and a small host buffer: iflush
// reads a byte of received memory back through it (collective/gpu_direct.h).
struct FlushLink {
  ConnId conn = 0;      // the connecting side: reads go out on it
  ConnId accepted = 0;  // the accepting side: it serves them
  std::vector<uint8_t> buf = std::vector<uint8_t>(64);
  MrHandle* mh = nullptr;
};

struct DeviceEndpoint {
  int gpu = -1;
  std::unique_ptr<Endpoint> ep;
  std::unique_ptr<FlushLink> flush;  // made at the first flush; mu_
  uint16_t port = 0;
  ~DeviceEndpoint() {  // the link's connections and buffer, before ep
    if (flush && ep) {
      if (flush->conn) ep->close(flush->conn);
      if (flush->accepted) ep->close(flush->accepted);
      if (flush->mh) ep->dereg_mr(flush->mh);
    }
  }
  // The next send / receive comm's lane (lane_engine, stripe.h); mu_.
  uint32_t next_send_lane = 0;
  uint32_t next_recv_lane = 0;
};

struct PluginDevice {
  std::string name;     // as NCCL sees it ("udp:eth0")
  std::string ep_name;  // UCCL device string
  std::string ip;       // where peers reach our bootstrap listener
  std::string pci;
  uint64_t speed_mbps = 0;  // reported; 0 until init where the link has none
  uint64_t guid = 0;
  // A software NIC device: its idle engines block on their socket and wake
  // at the first datagram or command (UcclRDMAEngine::idle_wait); verbs
  // devices' engines sleep blind.
  bool soft_nic = false;
  std::string nic_params;  // the backend's options (verbs: gid_index=N)
  int ptr_support = ncclabi::kPtrHost;  // NCCL_PTR_* (gpu_direct.h)
  std::vector<std::unique_ptr<DeviceEndpoint>> eps;  // mu_
  char name_c[64] = {};
  char pci_c[256] = {};
};

struct PluginComm {
  PluginDevice* dev = nullptr;
  Endpoint* ep = nullptr;
  bool is_send = false;
  std::vector<ConnId> conns;
  // The connections as one (uccl/striped.h): the receiving side's stripe
  // and PartsMode. A message posted with all K parts at once that is
  // shorter than a stripe completes with its part 0; its other parts are
  // empty and finish in the background, keeping their request.
  std::unique_ptr<StripedConn> group;
  int pool_size = 0;
  // Requests NCCL holds (handed out, not yet reported done), at most
  // max_held: NCCL's 32 per comm (x maxRecvs), so the 33rd post gets NULL.
  int held = 0, max_held = 0;
  std::unique_ptr<PluginRequest[]> pool;
  // Registrations made on this comm and not deregistered yet; closing the
  // comm deregisters what is left (NCCL deregisters first, but a failing
  // caller may not).
  std::mutex mrs_mu;
  std::unordered_set<PluginMr*> mrs;
  // iflush's loopback link (its endpoint's), looked up once: later flushes
  // take no lock.
  FlushLink* flush = nullptr;
};

struct PluginListen {
  PluginDevice* dev = nullptr;
  Endpoint* ep = nullptr;
  uint64_t tag = 0;
  std::vector<ConnId> conns;  // by index; 0 = not accepted yet
  bool placed = false;        // its tags have engine placements
  size_t stripe = 0;          // ours, in the handle: connectors cut by it
  PartsMode parts_mode = PartsMode::kFirst;  // ours, in the handle
};

struct ConnectStage {
  PluginDevice* dev = nullptr;
  Endpoint* ep = nullptr;
  std::vector<uint64_t> pending;
  std::vector<ConnId> conns;
  size_t stripe = 0;  // from the handle
  PartsMode parts_mode = PartsMode::kFirst;
};

// A comm of `conns` (a StripedConn over them) with NCCL's request pool.
Result<PluginComm*> make_comm(PluginDevice* d, Endpoint* ep, bool is_send,
                              std::vector<ConnId> conns, size_t stripe,
                              PartsMode parts_mode, int max_recvs);
// The stripe this process offers comms of k connections on an endpoint
// whose engines cut chunks of chunk_bytes: UCCL_NCCL_STRIPE_KB when set,
// else the default (collective/stripe.h).
size_t stripe_for(int k, uint32_t chunk_bytes, int64_t stripe_kb);

}  // namespace uccl::nccl
