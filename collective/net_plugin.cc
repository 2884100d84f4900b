// NCCL net plugin over UCCL Endpoints: one NCCL device per NIC, each NCCL
// comm a set of UCCL connections spread over the device's engines.
//
// Message placement: a comm is K UCCL connections on K different engines
// (by default half the engines, auto_conns) used as one StripedConn
// (uccl/striped.h): every message is cut into K parts, part j on
// connection j, so one message moves on several engines at once (NCCL keeps
// only a few messages in flight per channel, so per-message latency is what
// bounds its bandwidth). The stripe and the PartsMode are the receiving
// side's (UCCL_NCCL_STRIPE_KB, UCCL_NCCL_PARTS), carried to the sender in
// the listen handle; by default the stripe is 1 MiB / K, NCCL's large
// all_reduce message over the K engines, in whole chunks where that keeps
// the parts even (collective/stripe.h).
// With UCCL_NCCL_MAX_RECVS > 1 NCCL may group receives with tags; such comms
// use one connection (K = 1) and the engine matches the tags.
#include "collective/net_plugin.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_set>

#include "collective/plugin_knobs.h"
#include "collective/stripe.h"
#include "transport/nic.h"
#include "transport/udp/netif.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl::nccl {

using namespace ncclabi;  // NOLINT: the ABI's names are short and plentiful

struct ConnectStage;

namespace {

constexpr uint32_t kHandleMagic = 0x55434e48;  // "UCNH"
constexpr uint16_t kHandleVersion = 3;  // 2: the acceptor's stripe; 3: flags
constexpr uint64_t kStageMagic = 0x5543434f4e4e4543ull;

// The handshake tag of a comm's connection i (a listen comm's tag below
// 2^56, connection index in the low byte).
uint64_t conn_tag(uint64_t comm_tag, int i) {
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
constexpr uint32_t kHandleFlagPartsMask = 3;
static_assert(sizeof(ConnectHandle) <= kHandleMaxSize, "NCCL handle size");
static_assert(offsetof(ConnectHandle, port) == 12, "handle layout");
static_assert(offsetof(ConnectHandle, stage) == 32, "handle layout");
static_assert(offsetof(ConnectHandle, stripe_bytes) == 40, "handle layout");
static_assert(offsetof(ConnectHandle, flags) == 44, "handle layout");

}  // namespace

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
  std::unique_ptr<Endpoint> ep;
  uint16_t port = 0;
  // The next send / receive comm's lane (lane_engine, stripe.h); mu_.
  uint32_t next_send_lane = 0;
  uint32_t next_recv_lane = 0;
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

namespace {

Result<PluginComm*> make_comm(PluginDevice* d, Endpoint* ep, bool is_send,
                              std::vector<ConnId> conns, size_t stripe,
                              PartsMode parts_mode, int max_recvs) {
  auto c = std::make_unique<PluginComm>();
  c->dev = d;
  c->ep = ep;
  c->is_send = is_send;
  c->conns = conns;
  // NCCL keeps up to 32 requests per comm; a sender may see 32 x maxRecvs.
  // Where messages may go with empty parts, as many again may still be
  // finishing those.
  c->max_held = kMaxRequests * max_recvs;
  c->pool_size = c->max_held * (parts_mode == PartsMode::kFirst ? 1 : 2);
  UCCL_ASSIGN_OR_RETURN(
      c->group, StripedConn::create(ep, std::move(conns), stripe, parts_mode,
                                    c->pool_size));
  c->pool.reset(new PluginRequest[c->pool_size]);
  for (int i = 0; i < c->pool_size; ++i) c->pool[i].comm = c.get();
  return c.release();
}

// The stripe this process offers comms of k connections on an endpoint
// whose engines cut chunks of chunk_bytes: the knob, or the default
// (collective/stripe.h: NCCL's 1 MiB all_reduce message over k, in whole
// chunks where that keeps the parts even).
size_t stripe_for(int k, uint32_t chunk_bytes) {
  const int64_t kb = knob_stripe_kb().get();
  if (kb > 0) return static_cast<size_t>(kb) * 1024;
  return default_stripe_bytes(k, chunk_bytes);
}

void forward_log(int severity, const char* file, int line, const char* msg,
                 size_t len) {
  NetPlugin::get().log(severity >= 1 ? kLogWarn : kLogInfo, file, line,
                       std::string(msg, len));
}

}  // namespace

NetPlugin& NetPlugin::get() {
  // Destroyed at exit or dlclose, which stops the engine threads first.
  static NetPlugin plugin;
  return plugin;
}

NetPlugin::~NetPlugin() {
  set_log_forwarder(nullptr);
  for (auto& d : devs_) d->ep.reset();
}

void NetPlugin::log(int level, const char* file, int line,
                    const std::string& msg) {
  Logger l = logger_.load(std::memory_order_acquire);
  if (l != nullptr) {
    l(level, kLogSubsysNet, file, line, "NET/UCCL %s", msg.c_str());
  } else if (level <= kLogWarn) {
    std::fprintf(stderr, "NET/UCCL %s\n", msg.c_str());
  }
}

NcclResult NetPlugin::fail(const char* what, const Status& st,
                           NcclResult code) {
  log(kLogWarn, __FILE__, __LINE__, std::string(what) + ": " + st.to_string());
  return code;
}

bool NetPlugin::software_nic_only() {
  std::lock_guard<std::mutex> l(mu_);
  if (!inited_ || devs_.empty()) return false;
  for (const auto& d : devs_) {
    if (d->name.rfind("udp", 0) != 0) return false;
  }
  return true;
}

NcclResult NetPlugin::init(Logger logger, ProfilerCallback profiler) {
  std::lock_guard<std::mutex> lock(mu_);
  if (logger) logger_.store(logger, std::memory_order_release);
  profiler_.store(profiler, std::memory_order_release);
  if (inited_) return kSuccess;
  init_logging("nccl-net-uccl");
  if (logger) set_log_forwarder(&forward_log);
  for (const std::string& bad : unknown_uccl_env_vars()) {
    log(kLogWarn, __FILE__, __LINE__,
        "unknown environment variable " + bad + " (a typo?)");
  }
  Status kst = check_knobs();
  if (!kst.ok()) return fail("bad UCCL_* setting", kst, kInvalidArgument);

  std::vector<std::string> names;
  const std::string want = knob_devices().get();
  const std::vector<transport::DeviceInfo> all = transport::list_devices();
  if (!want.empty()) {
    size_t pos = 0;
    while (pos <= want.size()) {
      size_t e = want.find(',', pos);
      if (e == std::string::npos) e = want.size();
      if (e > pos) names.push_back(want.substr(pos, e - pos));
      pos = e + 1;
    }
  } else {
    for (const auto& d : all) {
      if (d.backend == "verbs" && d.active) names.push_back(d.name);
    }
    for (const auto& d : all) {
      if (d.backend == "udp" && d.netdev != "lo") names.push_back(d.name);
    }
    if (names.empty()) names.push_back("udp:lo");
  }
  // Where peers reach us: the device's own address, else the first
  // non-loopback one (verbs devices: the bootstrap runs over TCP/IP).
  std::string host_ip = "127.0.0.1";
  for (const auto& d : all) {
    if (d.backend == "udp" && d.netdev != "lo" && !d.ip.empty()) {
      host_ip = d.ip;
      break;
    }
  }
  for (const std::string& n : names) {
    auto d = std::make_unique<PluginDevice>();
    d->name = n;
    d->ep_name = n;
    d->ip = host_ip;
    d->soft_nic = n.compare(0, 3, "udp") == 0;
    for (const auto& info : all) {
      if (info.name != n && !(n == "udp" && info.netdev == "lo")) continue;
      if (!info.ip.empty() && info.backend == "udp" && n != "udp") {
        d->ip = info.ip;
      }
      d->pci = info.pci_path;
      d->soft_nic = info.backend == "udp";
      d->speed_mbps = info.link_speed_known ? info.link_speed_mbps : 0;
      d->guid = info.guid;
    }
    if (knob_speed_mbps().get() > 0) {
      d->speed_mbps = static_cast<uint64_t>(knob_speed_mbps().get());
    }
    if (d->guid == 0) d->guid = std::hash<std::string>()(n);
    std::snprintf(d->name_c, sizeof(d->name_c), "%s", n.c_str());
    std::snprintf(d->pci_c, sizeof(d->pci_c), "%s", d->pci.c_str());
    devs_.push_back(std::move(d));
  }
  max_recvs_ = static_cast<int>(knob_max_recvs().get());
  std::string engines_why = "UCCL_NCCL_ENGINES";
  if (knob_engines().get() > 0) {
    engines_per_device_ = static_cast<int>(knob_engines().get());
  } else {
    const int cpus = usable_cpu_count();
    const int gpus = count_nvidia_gpus();
    const int ranks = local_ranks(std::getenv, gpus);
    engines_per_device_ = auto_engines(cpus, ranks);
    engines_why = "auto: " + std::to_string(cpus) + " CPUs over " +
                  std::to_string(ranks) + " local rank(s), " +
                  std::to_string(gpus) + " GPU(s) on the host";
  }
  // Links without a speed report the one that gives NCCL as many channels
  // as these engines serve (stripe.h).
  for (auto& d : devs_) {
    if (d->speed_mbps == 0) {
      d->speed_mbps = unknown_link_speed_mbps(engines_per_device_);
    }
  }
  conns_per_comm_ = max_recvs_ > 1 ? 1
                    : knob_conns().get() > 0
                        ? static_cast<int>(knob_conns().get())
                        : auto_conns(engines_per_device_);
  max_bytes_ = static_cast<uint64_t>(knob_max_bytes().get());
  const std::string parts = knob_parts().get();
  if (parts == "auto") {
    parts_mode_ = PartsMode::kAuto;
  } else if (parts == "first") {
    parts_mode_ = PartsMode::kFirst;
  } else if (parts == "all") {
    parts_mode_ = PartsMode::kAll;
  } else {
    return fail("bad UCCL_* setting",
                InvalidArgument("UCCL_NCCL_PARTS=" + parts +
                                ": expected auto, first or all"),
                kInvalidArgument);
  }
  spread_ = knob_spread().get();
  // Nothing to do for the main thread unless both knobs ask for it.
  main_steered_.store(!(knob_steer().get() && knob_steer_main().get()));
  std::random_device rd;
  next_tag_.store((static_cast<uint64_t>(rd()) << 20) & ((1ull << 56) - 1));
  std::string list;
  for (const auto& d : devs_) list += " " + d->name + "(" + d->ip + ")";
  log(kLogInfo, __FILE__, __LINE__,
      "devices:" + list + "; " + std::to_string(engines_per_device_) +
          " engines per device (" + engines_why + "), " +
          std::to_string(conns_per_comm_) + " connections per comm (" +
          (knob_stripe_kb().get() > 0
               ? std::to_string(knob_stripe_kb().get() * 1024) + " B stripes"
               : std::string("stripes of 1 MiB / K in whole chunks")) +
          "), maxRecvs " + std::to_string(max_recvs_));
  inited_ = true;
  return kSuccess;
}

NcclResult NetPlugin::devices(int* ndev) {
  if (ndev == nullptr) return kInternalError;
  std::lock_guard<std::mutex> lock(mu_);
  *ndev = static_cast<int>(devs_.size());
  return kSuccess;
}

NcclResult NetPlugin::properties(int dev, PropertiesV11* p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (p == nullptr || dev < 0 || dev >= static_cast<int>(devs_.size())) {
    return kInternalError;
  }
  PluginDevice* d = devs_[dev].get();
  std::memset(p, 0, sizeof(*p));
  p->name = d->name_c;
  p->pciPath = d->pci.empty() ? nullptr : d->pci_c;
  p->guid = d->guid;
  // Host memory only: the software NIC's kernel sockets cannot reach GPU
  // memory, so NCCL stages through host buffers (verbs GPUDirect is future
  // work).
  p->ptrSupport = kPtrHost;
  p->regIsGlobal = 0;
  p->forceFlush = 0;
  p->speed = static_cast<int>(std::min<uint64_t>(d->speed_mbps, INT32_MAX));
  p->port = 1;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = max_recvs_;
  p->netDeviceType = kNetDeviceHost;
  p->netDeviceVersion = 0;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = max_bytes_;
  p->maxCollBytes = max_bytes_;
  p->maxMultiRequestSize = 1;
  return kSuccess;
}

uccl::Result<Endpoint*> NetPlugin::endpoint(PluginDevice* d) {
  // Called with mu_ held.
  if (d->ep) return d->ep.get();
  EndpointConfig cfg = EndpointConfig::from_knobs();
  cfg.device = d->ep_name;
  cfg.num_engines = engines_per_device_;
  // Unless UCCL_IDLE_SLEEP_AFTER_MS / UCCL_IDLE_SLEEP_US say otherwise, an
  // engine on the software NIC sleeps once it has had nothing to do for
  // 10 ms, blocking up to 1 ms per wait and waking at the first datagram or
  // command, so a job's engines give their cores back between bursts (NCCL
  // lets its own proxy thread sleep as soon as it is idle). Against sleeping
  // only after 1 s with 20 us waits, NCCL's 64 KiB-256 MiB all_reduce moved
  // within 3% and its 4 B / 64 B latency fell 5-7%; a PyTorch loop of
  // 4 B-1 KiB all_reduce (bound by its host) ran 1.4x faster on one VM,
  // 1.0-1.2x on another, the same on a third and 0.8-0.9x on a fourth
  // (BENCHMARKS.md, NCCL section). Verbs devices' engines sleep blind, so
  // only after a second: blind 20 us sleeps after the default 20000 empty
  // loops put about one NCCL process pair in four (7 of 26) into a steady
  // ~100 us per hop.
  if (cfg.idle_sleep_after_ms < 0) {
    cfg.idle_sleep_after_ms = d->soft_nic ? 10 : 1000;
  }
  if (cfg.idle_sleep_us < 0 && d->soft_nic) cfg.idle_sleep_us = 1000;
  auto ep = Endpoint::create(cfg);
  if (!ep.ok()) return ep.status().with_context("device " + d->name);
  auto port = (*ep)->listen(0);
  if (!port.ok()) return port.status().with_context("device " + d->name);
  d->port = *port;
  d->ep = std::move(*ep);
  // What the engines took (the knobs fill what cfg left unset).
  std::string idle = "idle engines never sleep";
  const auto st = d->ep->engine_stats(0);  // all engines take the same
  if (st.ok() && st->idle_sleep_ns > 0) {
    idle = "idle engines sleep after " +
           std::to_string(st->idle_sleep_after_ns / 1000000) + " ms, " +
           std::to_string(st->idle_sleep_ns / 1000) + " us per wait" +
           (d->soft_nic ? " (woken early by datagrams and commands)" : "");
  }
  log(kLogInfo, __FILE__, __LINE__,
      "device " + d->name + ": endpoint up, bootstrap on " + d->ip + ":" +
          std::to_string(d->port) + "; " + idle);
  return d->ep.get();
}

uint32_t NetPlugin::next_lane(PluginDevice* d, bool send) {
  return send ? d->next_send_lane++ : d->next_recv_lane++;
}

int NetPlugin::comm_engine(const PluginDevice* d, bool send, uint32_t lane,
                           int i, int k) {
  return lane_engine(send, lane, i, k, d->ep->config().num_engines);
}

void NetPlugin::log_comm(const PluginComm* c) {
  auto e = c->ep->engine_of(c->conns[0]);
  log(kLogInfo, __FILE__, __LINE__,
      std::string(c->is_send ? "send comm to " : "recv comm from ") +
          c->ep->peer_ip(c->conns[0]) + ": " + std::to_string(c->conns.size()) +
          " connections, " + std::to_string(c->group->stripe_bytes()) +
          " B stripes, connection 0 on engine " +
          (e.ok() ? std::to_string(*e) : std::string("?")));
}

void NetPlugin::steer_thread(bool data_path) {
  thread_local bool steered = !knob_steer().get();
  if (steered && (!data_path || main_steered_.load(std::memory_order_relaxed)))
    return;
  // Engines exist by now (the endpoint starts them at listen); where none
  // is pinned there is nothing to keep off, then or later.
  const std::vector<int> avoid = Endpoint::engine_cores_on_host();
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  if (!steered) {
    steered = true;
    if (!avoid.empty()) steer(self, avoid, "thread ");
  }
  // The process's main thread (where a PyTorch program issues its
  // collectives), once, from the first send or receive: by then NCCL has
  // finished initialising the comm. An idle engine sleeps on its core, and
  // the kernel may then put a thread there, which the engine interrupts
  // whenever it wakes.
  if (data_path && !main_steered_.exchange(true)) {
    const pid_t main_tid = getpid();
    if (!avoid.empty() && main_tid != self) {
      steer(main_tid, avoid, "main thread ");
    }
  }
}

void NetPlugin::steer(pid_t tid, const std::vector<int>& avoid,
                      const char* who) {
  auto now = uccl::avoid_cpus_thread(tid, avoid);
  if (!now.ok()) {
    log(kLogWarn, __FILE__, __LINE__,
        std::string("cannot keep ") + who + std::to_string(tid) +
            " off the engines' cores: " + now.status().to_string());
    return;
  }
  log(kLogInfo, __FILE__, __LINE__,
      who + std::to_string(static_cast<long>(tid)) +
          " keeps off the engines' cores " + uccl::format_cpu_list(avoid) +
          ": it runs on " + uccl::format_cpu_list(*now));
}

Endpoint* NetPlugin::endpoint_for_testing(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(devs_.size())) return nullptr;
  return devs_[dev]->ep.get();
}

NcclResult NetPlugin::listen(int dev, void* handle, void** listen_comm) {
  if (handle == nullptr || listen_comm == nullptr) return kInternalError;
  std::lock_guard<std::mutex> lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(devs_.size())) return kInternalError;
  PluginDevice* d = devs_[dev].get();
  auto ep = endpoint(d);
  if (!ep.ok()) return fail("listen", ep.status());
  auto* l = new PluginListen;
  l->dev = d;
  l->ep = *ep;
  l->tag = next_tag_.fetch_add(1) & ((1ull << 56) - 1);
  l->conns.assign(conns_per_comm_, 0);
  if (spread_) {
    const uint32_t lane = next_lane(d, false);
    for (int i = 0; i < conns_per_comm_; ++i) {
      Status st = l->ep->place_accepts(
          conn_tag(l->tag, i), comm_engine(d, false, lane, i, conns_per_comm_));
      if (!st.ok()) {
        for (int j = 0; j < i; ++j)
          l->ep->place_accepts(conn_tag(l->tag, j), -1);
        delete l;
        return fail("listen", st);
      }
    }
    l->placed = true;
  }
  std::memset(handle, 0, kHandleMaxSize);
  ConnectHandle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.nconns = static_cast<uint16_t>(conns_per_comm_);
  transport::udp::parse_ipv4(d->ip, &h.ipv4_be);
  h.port = d->port;
  h.max_recvs = static_cast<uint16_t>(max_recvs_);
  h.tag = l->tag;
  l->stripe = stripe_for(conns_per_comm_, l->ep->config().chunk_bytes);
  h.stripe_bytes = static_cast<uint32_t>(l->stripe);
  l->parts_mode = parts_mode_;
  h.flags = static_cast<uint32_t>(parts_mode_);
  std::memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return kSuccess;
}

NcclResult NetPlugin::connect(int dev, void* handle, void** send_comm) {
  if (handle == nullptr || send_comm == nullptr) return kInternalError;
  steer_thread(false);
  *send_comm = nullptr;
  ConnectHandle* h = static_cast<ConnectHandle*>(handle);
  if (h->magic != kHandleMagic || h->version != kHandleVersion ||
      h->nconns < 1 || h->nconns > 16 || h->stripe_bytes < 1024 ||
      h->stripe_bytes > (1u << 30) ||
      (h->flags & kHandleFlagPartsMask) >
          static_cast<uint32_t>(PartsMode::kAuto)) {
    return fail("connect",
                ProtocolError("handle is not from a UCCL listen "
                              "of this version"),
                kInternalError);
  }
  if (h->max_recvs != max_recvs_) {
    return fail("connect",
                InvalidArgument("peer runs UCCL_NCCL_MAX_RECVS=" +
                                std::to_string(h->max_recvs) + ", we run " +
                                std::to_string(max_recvs_)),
                kInvalidUsage);
  }
  if (h->stage_magic != kStageMagic) {
    std::lock_guard<std::mutex> lock(mu_);
    if (dev < 0 || dev >= static_cast<int>(devs_.size())) return kInternalError;
    PluginDevice* d = devs_[dev].get();
    auto ep = endpoint(d);
    if (!ep.ok()) return fail("connect", ep.status());
    auto st = std::make_unique<ConnectStage>();
    st->dev = d;
    st->ep = *ep;
    const std::string ip = transport::udp::ipv4_to_string(h->ipv4_be);
    const uint32_t lane = spread_ ? next_lane(d, true) : 0;
    for (int i = 0; i < h->nconns; ++i) {
      auto p = st->ep->connect_start(
          ip, h->port, conn_tag(h->tag, i),
          spread_ ? comm_engine(d, true, lane, i, h->nconns) : -1);
      if (!p.ok()) return fail("connect", p.status());
      st->pending.push_back(*p);
    }
    st->conns.assign(h->nconns, 0);
    st->stripe = h->stripe_bytes;
    st->parts_mode = static_cast<PartsMode>(h->flags & kHandleFlagPartsMask);
    h->stage = st.release();
    h->stage_magic = kStageMagic;
  }
  ConnectStage* st = h->stage;
  int ready = 0;
  for (size_t i = 0; i < st->conns.size(); ++i) {
    if (st->conns[i] != 0) {
      ++ready;
      continue;
    }
    auto c = st->ep->connect_poll(st->pending[i]);
    if (c.ok()) {
      st->conns[i] = *c;
      ++ready;
    } else if (c.status().code() != StatusCode::kUnavailable) {
      for (ConnId x : st->conns) {
        if (x) st->ep->close(x);
      }
      h->stage_magic = 0;
      h->stage = nullptr;
      Status why = c.status();
      delete st;
      return fail("connect", why);
    }
  }
  if (ready < static_cast<int>(st->conns.size())) return kSuccess;  // later
  auto comm = make_comm(st->dev, st->ep, true, st->conns, st->stripe,
                        st->parts_mode, max_recvs_);
  h->stage_magic = 0;
  h->stage = nullptr;
  if (!comm.ok()) {
    for (ConnId x : st->conns) st->ep->close(x);
    delete st;
    return fail("connect", comm.status());
  }
  delete st;
  *send_comm = *comm;
  log_comm(*comm);
  return kSuccess;
}

NcclResult NetPlugin::accept(void* listen_comm, void** recv_comm) {
  if (listen_comm == nullptr || recv_comm == nullptr) return kInternalError;
  steer_thread(false);
  *recv_comm = nullptr;
  auto* l = static_cast<PluginListen*>(listen_comm);
  int ready = 0;
  for (size_t i = 0; i < l->conns.size(); ++i) {
    if (l->conns[i] != 0) {
      ++ready;
      continue;
    }
    auto c = l->ep->accept_poll(conn_tag(l->tag, i));
    if (c.ok()) {
      l->conns[i] = *c;
      ++ready;
    } else if (c.status().code() != StatusCode::kUnavailable) {
      return fail("accept", c.status());
    }
  }
  if (ready < static_cast<int>(l->conns.size())) return kSuccess;  // later
  auto comm = make_comm(l->dev, l->ep, false, l->conns, l->stripe,
                        l->parts_mode, max_recvs_);
  if (!comm.ok()) {
    for (ConnId x : l->conns) l->ep->close(x);
    l->conns.assign(l->conns.size(), 0);
    return fail("accept", comm.status());
  }
  *recv_comm = *comm;
  log_comm(*comm);
  l->conns.assign(l->conns.size(), 0);  // handed over
  return kSuccess;
}

NcclResult NetPlugin::reg_mr(void* comm, void* data, size_t size, int type,
                             void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(comm);
  if (type != kPtrHost) {
    return fail("regMr",
                InvalidArgument("only host memory (NCCL_PTR_HOST) "
                                "is supported; type " +
                                std::to_string(type)),
                kInternalError);
  }
  auto* m = new PluginMr;
  if (size > 0 && data != nullptr) {
    auto mh = c->ep->reg_mr(data, size);
    if (!mh.ok()) {
      delete m;
      return fail("regMr", mh.status());
    }
    m->mh = *mh;
  }
  {
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    c->mrs.insert(m);
  }
  *mhandle = m;
  return kSuccess;
}

NcclResult NetPlugin::dereg_mr(void* comm, void* mhandle) {
  if (comm == nullptr || mhandle == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(comm);
  auto* m = static_cast<PluginMr*>(mhandle);
  {
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    if (c->mrs.erase(m) == 0) {
      return fail("deregMr",
                  InvalidArgument("memory handle was not registered on this "
                                  "comm, or was deregistered already"),
                  kInvalidUsage);
    }
  }
  Status st = m->mh ? c->ep->dereg_mr(m->mh) : Status::OK();
  delete m;
  return st.ok() ? kSuccess : fail("deregMr", st);
}

PluginRequest* NetPlugin::alloc_request(PluginComm* c) {
  if (c->held >= c->max_held) return nullptr;
  for (int i = 0; i < c->pool_size; ++i) {
    PluginRequest& r = c->pool[i];
    if (r.s.finishing()) {  // done for NCCL, empty parts finishing
      if (c->group->reusable(&r.s)) return &r;
      continue;
    }
    bool expected = false;
    if (r.used.compare_exchange_strong(expected, true,
                                       std::memory_order_acquire)) {
      return &r;
    }
  }
  return nullptr;
}

void NetPlugin::profile_start(PluginRequest* r, void* phandle, int op,
                              size_t bytes) {
  ProfilerCallback prof = profiler_.load(std::memory_order_acquire);
  if (prof == nullptr || phandle == nullptr) return;
  ProfilerNetSockDescrV1 e{};
  e.type = kProfileSocket;
  e.sock.fd = static_cast<int>(r->comm->conns[0] & 0x7fffffff);
  e.sock.op = op;
  e.sock.length = bytes;
  prof(&r->event, kProfilerStart, phandle,
       kProfilerNetTypeSock | kProfilerNetSockVersion, &e);
}

void NetPlugin::profile_stop(PluginRequest* r) {
  if (r->event == nullptr) return;
  ProfilerCallback prof = profiler_.load(std::memory_order_acquire);
  if (prof) prof(&r->event, kProfilerStop, nullptr, 0, nullptr);
  r->event = nullptr;
}

NcclResult NetPlugin::isend(void* send_comm, void* data, size_t size, int tag,
                            void* mhandle, void* phandle, void** request) {
  if (send_comm == nullptr || request == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(send_comm);
  steer_thread(true);
  *request = nullptr;
  if (!c->group->broken().ok()) return fail("isend", c->group->broken());
  if (size > max_bytes_) {
    return fail("isend",
                InvalidArgument("message of " + std::to_string(size) +
                                " bytes is above maxP2pBytes"),
                kInternalError);
  }
  PluginRequest* r = alloc_request(c);
  if (r == nullptr) return kSuccess;  // NCCL retries
  auto* m = static_cast<PluginMr*>(mhandle);
  r->n = 1;
  r->event = nullptr;
  // Striped comms pair parts FIFO and ignore NCCL's tags; grouped comms
  // (maxRecvs > 1) need them to pick the buffer.
  bool taken = false;
  Status st = c->group->send(&r->s, data, size, m ? m->mh : nullptr,
                             max_recvs_ > 1 ? tag : 0, &taken);
  // Parts posted before an error may still complete into the request: it
  // stays taken, and the comm is broken anyway.
  if (!st.ok()) return fail("isend", st);
  if (!taken) {  // an engine's queue is full: NCCL retries the message
    r->used.store(false, std::memory_order_release);
    return kSuccess;
  }
  profile_start(r, phandle, 0, size);
  ++c->held;
  *request = r;
  return kSuccess;
}

NcclResult NetPlugin::irecv(void* recv_comm, int n, void** data,
                            const size_t* sizes, const int* tags,
                            void** mhandles, void** phandles, void** request) {
  if (recv_comm == nullptr || request == nullptr) return kInternalError;
  *request = nullptr;  // also clears NCCL's optional-completion marker
  steer_thread(true);
  if (n < 1 || n > max_recvs_ || data == nullptr || sizes == nullptr) {
    return fail(
        "irecv",
        InvalidArgument("n=" + std::to_string(n) + " receives (maxRecvs " +
                        std::to_string(max_recvs_) + ")"),
        kInternalError);
  }
  auto* c = static_cast<PluginComm*>(recv_comm);
  if (!c->group->broken().ok()) return fail("irecv", c->group->broken());
  if (n > 1) {
    // Grouped receives share connection 0 with striped messages: behind
    // any whose parts still wait.
    Status st = c->group->progress();
    if (!st.ok()) return fail("irecv", st);
    if (c->group->backlogged()) return kSuccess;
  }
  PluginRequest* r = alloc_request(c);
  if (r == nullptr) return kSuccess;
  r->n = n;
  r->event = nullptr;
  Status st;
  bool taken = false;
  if (n == 1) {  // striped over the comm's connections
    auto* m = mhandles ? static_cast<PluginMr*>(mhandles[0]) : nullptr;
    st = c->group->recv(&r->s, data[0], sizes[0], m ? m->mh : nullptr,
                        max_recvs_ > 1 && tags ? tags[0] : 0, &taken);
  } else {  // grouped (maxRecvs > 1): one connection, tags pick buffers
    MrHandle* mhs[kMaxRecvsPerRequest];
    int tg[kMaxRecvsPerRequest];
    for (int i = 0; i < n; ++i) {
      auto* m = mhandles ? static_cast<PluginMr*>(mhandles[i]) : nullptr;
      mhs[i] = m ? m->mh : nullptr;
      tg[i] = tags ? tags[i] : 0;
    }
    st = c->ep->recv_async(c->conns[0], n, data, sizes, tg, mhs, &r->grouped);
    taken = st.ok();
    if (st.code() == StatusCode::kResourceExhausted) st = Status::OK();
    if (!st.ok()) r->used.store(false, std::memory_order_release);
  }
  if (!st.ok()) return fail("irecv", st);
  if (!taken) {
    r->used.store(false, std::memory_order_release);
    return kSuccess;
  }
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += sizes[i];
  profile_start(r, phandles ? phandles[0] : nullptr, 1, total);
  ++c->held;
  *request = r;
  return kSuccess;
}

NcclResult NetPlugin::iflush(void* recv_comm, int n, void** data,
                             const int* sizes, void** mhandles,
                             void** request) {
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  if (recv_comm == nullptr || request == nullptr) return kInternalError;
  // Host memory: received bytes are visible as soon as the receive is done.
  *request = nullptr;
  return kSuccess;
}

NcclResult NetPlugin::test(void* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) return kInternalError;
  auto* r = static_cast<PluginRequest*>(request);
  PluginComm* c = r->comm;
  *done = 0;
  Status st;
  if (r->n > 1) {
    st = c->group->progress();
    if (!st.ok()) return fail("test", st);
    if (!r->grouped.done()) return kSuccess;
    st = r->grouped.status();
    if (sizes) {
      for (int i = 0; i < r->n; ++i) {
        sizes[i] = static_cast<int>(r->grouped.size(i));
      }
    }
  } else {
    bool d = false;
    size_t bytes = 0;
    st = c->group->test(&r->s, &d, &bytes);
    if (!d) return st.ok() ? kSuccess : fail("test", st);
    if (sizes) sizes[0] = static_cast<int>(bytes);
  }
  *done = 1;
  --c->held;
  profile_stop(r);
  // Done early (part 0 held the whole message): alloc_request reuses it
  // once its empty parts finish. Otherwise NCCL never tests it again.
  if (!r->s.finishing()) r->used.store(false, std::memory_order_release);
  if (!st.ok()) {
    const bool send = r->n == 1 && r->s.is_send();
    return fail(
        send ? "send" : "receive", st,
        st.code() == StatusCode::kTruncated ? kInternalError : kSystemError);
  }
  return kSuccess;
}

namespace {

// For the close log: how often the engine of the comm's connection 0 (its
// small messages) has slept since it started, and how many of those sleeps
// a datagram or a command ended early.
std::string idle_note(const PluginComm* c) {
  if (c->conns.empty()) return "";
  const auto e = c->ep->engine_of(c->conns[0]);
  if (!e.ok()) return "";
  const auto s = c->ep->engine_stats(*e);
  if (!s.ok()) return "";
  return "; its engine " + std::to_string(*e) + " slept " +
         std::to_string(s->idle_sleeps) + " times, " +
         std::to_string(s->idle_wakes) + " woken early";
}

}  // namespace

NcclResult NetPlugin::close_comm(void* comm) {
  if (comm == nullptr) return kSuccess;
  auto* c = static_cast<PluginComm*>(comm);
  std::string line = std::string(c->is_send ? "send" : "recv") + " comm closed";
  const StripedConn::Counters& n = c->group->counters();
  if (n.messages > 0) {
    static const char* const kModes[] = {"first", "all", "auto"};
    line += ": " + std::to_string(n.messages) + " messages, " +
            std::to_string(n.all_parts_messages) + " with all parts at once, " +
            std::to_string(n.early_messages) +
            " done with part 0 (UCCL_NCCL_PARTS=" +
            kModes[static_cast<int>(c->group->mode())] + ")";
  }
  log(kLogInfo, __FILE__, __LINE__, line + idle_note(c));
  for (ConnId x : c->conns) c->ep->close(x);
  // Closing completes what is still pending (kCancelled); the requests live
  // in this comm, so wait (bounded) until the engines let go of them.
  const uint64_t until = monotonic_ns() + 5000000000ull;
  for (int i = 0; i < c->pool_size; ++i) {
    PluginRequest& r = c->pool[i];
    if (!r.used.load(std::memory_order_acquire)) continue;
    StripedConn::wait_released(&r.s, until);
    while (r.grouped.pending() && monotonic_ns() < until) {
      std::this_thread::yield();
    }
  }
  // Registrations the caller left behind (nothing posted uses them now).
  for (PluginMr* m : c->mrs) {
    if (m->mh) c->ep->dereg_mr(m->mh);
    delete m;
  }
  if (!c->mrs.empty()) {
    log(kLogInfo, __FILE__, __LINE__,
        "close: deregistered " + std::to_string(c->mrs.size()) +
            " memory handle(s) the comm still held");
  }
  delete c;
  return kSuccess;
}

NcclResult NetPlugin::close_listen(void* listen_comm) {
  if (listen_comm == nullptr) return kSuccess;
  auto* l = static_cast<PluginListen*>(listen_comm);
  for (size_t i = 0; i < l->conns.size(); ++i) {
    if (l->conns[i]) l->ep->close(l->conns[i]);
    if (l->placed) l->ep->place_accepts(conn_tag(l->tag, i), -1);
  }
  delete l;
  return kSuccess;
}

NcclResult NetPlugin::make_vdevice(int* d, VDeviceProps* props) {
  if (d == nullptr || props == nullptr) return kInternalError;
  // A virtual device of one device is that device; merging NICs is not
  // supported (NCCL then uses each NIC on its own).
  if (props->ndevs == 1 && props->devs[0] >= 0 &&
      props->devs[0] < static_cast<int>(devs_.size())) {
    *d = props->devs[0];
    return kSuccess;
  }
  return fail("makeVDevice",
              InvalidArgument("merging " + std::to_string(props->ndevs) +
                              " devices is not supported"),
              kInvalidUsage);
}

}  // namespace uccl::nccl
