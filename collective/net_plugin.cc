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

#include "collective/cuda_device.h"
#include "collective/nic_select.h"
#include "collective/plugin_knobs.h"
#include "collective/plugin_state.h"
#include "collective/stripe.h"
#include "transport/nic.h"
#include "transport/registry.h"
#include "transport/verbs/ibv_api.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl::nccl {

using namespace ncclabi;  // NOLINT: the ABI's names are short and plentiful

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
size_t stripe_for(int k, uint32_t chunk_bytes, int64_t stripe_kb) {
  if (stripe_kb > 0) return static_cast<size_t>(stripe_kb) * 1024;
  return default_stripe_bytes(k, chunk_bytes);
}

namespace {

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
  for (auto& d : devs_) d->eps.clear();
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

// The devices NCCL sees (collective/nic_select.h): UCCL_NCCL_DEVICES, else
// NCCL's own NCCL_IB_HCA / NCCL_SOCKET_IFNAME (by default every active
// verbs device, then every interface but lo and docker*, lo alone where
// there is none), nearest the calling thread's GPU first.
Status NetPlugin::add_devices(std::string* why) {
  const std::vector<transport::DeviceInfo> all = transport::list_devices();
  UCCL_ASSIGN_OR_RETURN(DeviceChoice choice,
                        choose_devices(all, knob_devices().get(),
                                       [](const char* n) -> const char* {
                                         return std::getenv(n);
                                       }));
  std::vector<std::string>& names = choice.names;
  // UCCL_NCCL_DEVICES keeps the order it gives.
  const std::string gpu =
      knob_devices().get().empty() ? current_gpu_pci_path() : "";
  order_by_distance(all, gpu, &names);
  *why = choice.why + (gpu.empty() ? "" : "; nearest " + gpu + " first");
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
    if (!d->soft_nic) d->nic_params = choice.verbs_params;
    GpuDirectProbe probe;
    probe.verbs = !d->soft_nic;
    probe.enabled = knob_gpu_direct().get();
    if (probe.verbs) {
      std::string why_not;
      const transport::verbs::IbvApi* api = transport::verbs::ibv_api(&why_not);
      probe.dmabuf_api = api != nullptr && api->reg_dmabuf_mr != nullptr;
      probe.peermem = peermem_loaded([](const std::string& path) {
        return access(path.c_str(), F_OK) == 0;
      });
    }
    d->ptr_support = gpu_ptr_support(probe);
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
  return Status::OK();
}

// Every plugin knob but the devices, read once (mu_ held).
Status NetPlugin::read_settings(std::string* engines_why) {
  max_recvs_ = static_cast<int>(knob_max_recvs().get());
  *engines_why = "UCCL_NCCL_ENGINES";
  if (knob_engines().get() > 0) {
    engines_per_device_ = static_cast<int>(knob_engines().get());
  } else {
    const int cpus = usable_cpu_count();
    const int gpus = count_nvidia_gpus();
    const int ranks = local_ranks(std::getenv, gpus);
    engines_per_device_ = auto_engines(cpus, ranks);
    *engines_why = "auto: " + std::to_string(cpus) + " CPUs over " +
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
    return InvalidArgument("UCCL_NCCL_PARTS=" + parts +
                           ": expected auto, first or all");
  }
  const std::string flush = knob_flush().get();
  flush_mode_ = flush == "read"  ? FlushMode::kRead
                : flush == "off" ? FlushMode::kOff
                                 : FlushMode::kAuto;
  spread_ = knob_spread().get();
  stripe_kb_ = knob_stripe_kb().get();
  steer_threads_ = knob_steer().get();
  // Nothing to do for the main thread unless both knobs ask for it.
  main_steered_.store(!(knob_steer().get() && knob_steer_main().get()));
  return Status::OK();
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

  std::string devices_why;
  Status dst = add_devices(&devices_why);
  if (!dst.ok()) return fail("choosing devices", dst, kInvalidArgument);
  std::string engines_why;
  Status st = read_settings(&engines_why);
  if (!st.ok()) return fail("bad UCCL_* setting", st, kInvalidArgument);
  std::random_device rd;
  next_tag_.store((static_cast<uint64_t>(rd()) << 20) & ((1ull << 56) - 1));
  std::string list;
  for (const auto& d : devs_) list += " " + d->name + "(" + d->ip + ")";
  log(kLogInfo, __FILE__, __LINE__,
      "devices:" + list + " (" + devices_why + "); " +
          std::to_string(engines_per_device_) + " engines per device (" +
          engines_why + "), " + std::to_string(conns_per_comm_) +
          " connections per comm (" +
          (stripe_kb_ > 0
               ? std::to_string(stripe_kb_ * 1024) + " B stripes"
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

NcclResult NetPlugin::properties(int dev, PropertiesV12* p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (p == nullptr || dev < 0 || dev >= static_cast<int>(devs_.size())) {
    return kInternalError;
  }
  PluginDevice* d = devs_[dev].get();
  std::memset(p, 0, sizeof(*p));
  p->name = d->name_c;
  p->pciPath = d->pci.empty() ? nullptr : d->pci_c;
  p->guid = d->guid;
  // Host memory, and GPU memory on verbs devices that can reach it
  // (collective/gpu_direct.h); the software NIC's sockets cannot.
  p->ptrSupport = d->ptr_support;
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
  p->railId = kNetIdUndef;  // rails and planes: not known to the plugin
  p->planeId = kNetIdUndef;
  return kSuccess;
}

uccl::Result<DeviceEndpoint*> NetPlugin::endpoint(PluginDevice* d) {
  // Called with mu_ held.
  const int gpu = current_cuda_device();
  for (auto& e : d->eps) {
    if (e->gpu == gpu) return e.get();
  }
  EndpointConfig cfg = EndpointConfig::from_knobs();
  cfg.device = d->ep_name;
  if (!d->nic_params.empty()) cfg.nic_params = d->nic_params;
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
  auto e = std::make_unique<DeviceEndpoint>();
  e->gpu = gpu;
  e->port = *port;
  e->ep = std::move(*ep);
  // What the engines took (the knobs fill what cfg left unset).
  std::string idle = "idle engines never sleep";
  const auto st = e->ep->engine_stats(0);  // all engines take the same
  if (st.ok() && st->idle_sleep_ns > 0) {
    idle = "idle engines sleep after " +
           std::to_string(st->idle_sleep_after_ns / 1000000) + " ms, " +
           std::to_string(st->idle_sleep_ns / 1000) + " us per wait" +
           (d->soft_nic ? " (woken early by datagrams and commands)" : "");
  }
  log(kLogInfo, __FILE__, __LINE__,
      "device " + d->name +
          (gpu >= 0 ? " for GPU " + std::to_string(gpu) : std::string()) +
          ": endpoint up (" + std::to_string(e->ep->config().num_engines) +
          " engines), bootstrap on " + d->ip + ":" + std::to_string(e->port) +
          "; " + idle);
  d->eps.push_back(std::move(e));
  return d->eps.back().get();
}

Result<FlushLink*> NetPlugin::flush_link(PluginComm* c) {
  // Called with mu_ held.
  DeviceEndpoint* de = nullptr;
  for (auto& e : c->dev->eps) {
    if (e->ep.get() == c->ep) de = e.get();
  }
  if (de == nullptr) return Internal("flush: the comm's endpoint is gone");
  if (de->flush) return de->flush.get();
  // The endpoint connects to itself; the accepting side serves the reads.
  auto link = std::make_unique<FlushLink>();
  UCCL_ASSIGN_OR_RETURN(link->mh,
                        de->ep->reg_mr(link->buf.data(), link->buf.size()));
  const uint64_t tag = next_tag_.fetch_add(1) & ((1ull << 56) - 1);
  auto pending = de->ep->connect_start(c->dev->ip, de->port, conn_tag(tag, 0));
  Status st = pending.status();
  const uint64_t until = monotonic_ns() + 10000000000ull;
  while (st.ok() && (link->conn == 0 || link->accepted == 0)) {
    if (monotonic_ns() > until) {
      st = TimedOut("flush: connecting to itself");
      break;
    }
    if (link->conn == 0) {
      auto cn = de->ep->connect_poll(*pending);
      if (cn.ok()) link->conn = *cn;
      if (!cn.ok() && cn.status().code() != StatusCode::kUnavailable) {
        st = cn.status();
      }
    }
    if (link->accepted == 0) {
      auto ac = de->ep->accept_poll(conn_tag(tag, 0));
      if (ac.ok()) link->accepted = *ac;
      if (!ac.ok() && ac.status().code() != StatusCode::kUnavailable) {
        st = ac.status();
      }
    }
  }
  if (!st.ok()) {
    if (link->conn) de->ep->close(link->conn);
    if (link->accepted) de->ep->close(link->accepted);
    de->ep->dereg_mr(link->mh);
    return st.with_context("iflush's loopback connection");
  }
  log(kLogInfo, __FILE__, __LINE__,
      "device " + c->dev->name +
          ": flushes read back through a loopback "
          "connection");
  de->flush = std::move(link);
  return de->flush.get();
}

uint32_t NetPlugin::next_lane(DeviceEndpoint* e, bool send) {
  return send ? e->next_send_lane++ : e->next_recv_lane++;
}

int NetPlugin::comm_engine(const DeviceEndpoint* e, bool send, uint32_t lane,
                           int i, int k) {
  return lane_engine(send, lane, i, k, e->ep->config().num_engines);
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
  thread_local bool steered = !steer_threads_;
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
  return devs_[dev]->eps.empty() ? nullptr : devs_[dev]->eps[0]->ep.get();
}

NcclResult NetPlugin::make_vdevice(int* d, int ndevs, const int* devs) {
  if (d == nullptr || devs == nullptr) return kInternalError;
  // A virtual device of one device is that device; merging NICs is not
  // supported (NCCL then uses each NIC on its own).
  int known = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = static_cast<int>(devs_.size());
  }
  if (ndevs == 1 && devs[0] >= 0 && devs[0] < known) {
    *d = devs[0];
    return kSuccess;
  }
  return fail("makeVDevice",
              InvalidArgument("merging " + std::to_string(ndevs) +
                              " devices is not supported"),
              kInvalidUsage);
}

}  // namespace uccl::nccl
