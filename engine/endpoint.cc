// Endpoint: the app-facing, thread-safe API (creation, memory, statistics
// here; connections and transfers in endpoint_conn.cc, endpoint_xfer.cc).
// Every call is validated (errors are Status values). Knobs:
// endpoint_config.cc.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "engine/endpoint_impl.h"
#include "engine/engine_cores.h"
#include "util/cpu.h"

namespace uccl {

using engine::ConnRecord;
using engine::UcclRDMAEngine;

using engine::claim_cores;
using engine::release_cores;
using engine::use_cores;

Status Endpoint::Impl::create_engines(const engine::ResolvedConfig& rc) {
  std::random_device rd;
  nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ monotonic_ns();
  regions.reset(new engine::Region[engine::kMaxRegions]);
  engine_load.reset(new std::atomic<int>[cfg.num_engines]);
  for (int i = 0; i < cfg.num_engines; ++i) {
    engine_load[i].store(0);
    records.emplace_back(new ConnRecord[engine::Imm::kMaxFlows]);
    engine::EngineConfig ec = rc.engine;
    ec.index = i;
    auto e = UcclRDMAEngine::create(ec, cfg.device, rc.dev, records[i].get(),
                                    regions.get());
    if (!e.ok()) return e.status().with_context("engine " + std::to_string(i));
    engines.push_back(std::move(*e));
  }
  cfg.chunk_bytes = engines[0]->chunk_bytes();
  return Status::OK();
}

void Endpoint::Impl::start_engines(double link_gbps) {
  const transport::DeviceInfo& di = engines[0]->device_info();
  double line = link_gbps > 0 ? link_gbps * 1e9 : di.link_speed_mbps * 1e6;
  // Congestion control and the pull pacer count payload bytes: take the
  // headers each packet adds out of the line rate (per chunk: its payload
  // over payload plus one header per packet).
  if (di.mtu_bytes > 0) {
    const double chunk = cfg.chunk_bytes;
    const double pkts = std::ceil(chunk / di.mtu_bytes);
    line *= chunk / (chunk + pkts * di.wire_overhead_bytes);
  }
  if (cfg.engine_cores.empty()) {
    std::vector<int> allowed = allowed_cpus();
    cores = claim_cores(cfg.num_engines,
                        choose_engine_cores(static_cast<int>(allowed.size()),
                                            di.numa_node, allowed),
                        &core_locks);
  } else {
    cores = cfg.engine_cores;
    use_cores(cores);
  }
  for (int i = 0; i < cfg.num_engines; ++i) {
    auto& e = engines[i];
    e->set_core(i < static_cast<int>(cores.size()) ? cores[i] : -1);
    e->set_line_rate(line);
    e->start();
  }
}

Endpoint::Endpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Endpoint>> Endpoint::create(const EndpointConfig& in) {
  init_logging("uccl");
  UCCL_ASSIGN_OR_RETURN(engine::ResolvedConfig rc, engine::resolve_config(in));
  auto impl = std::make_unique<Impl>();
  impl->cfg = rc.cfg;
  UCCL_RETURN_IF_ERROR(impl->create_engines(rc));
  impl->start_engines(rc.link_gbps);
  const EndpointConfig& c = impl->cfg;
  const transport::DeviceInfo& di = impl->engines[0]->device_info();
  LOG(INFO) << "UCCL endpoint: device " << c.device << " (" << di.name << ", "
            << di.link_speed_mbps << " Mb/s), " << c.num_engines
            << " engine(s) on cores " << format_cpu_list(impl->cores) << ", "
            << c.paths << " paths, " << (c.rc_mode ? "RC" : "UC") << " mode, "
            << "chunk " << c.chunk_bytes << " B, cc " << c.cc << ", eager "
            << impl->engines[0]->eager_bytes() << " B, inline "
            << impl->engines[0]->inline_bytes() << " B"
            << (rc.engine.drive_nic ? "" : ", NIC driven by CQ polls");
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

std::vector<int> Endpoint::engine_cores_on_host() {
  return engine::cores_claimed_on_host();
}

Endpoint::~Endpoint() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->connects.clear();
    impl_->accepts.clear();
    if (impl_->listen_fd >= 0) close(impl_->listen_fd);
    impl_->listen_fd = -1;
  }
  for (auto& e : impl_->engines) e->stop();
  for (MrHandle* m : impl_->mrs) delete m;
  impl_->engines.clear();
  release_cores(impl_->cores);
  for (int fd : impl_->core_locks) close(fd);
}

const EndpointConfig& Endpoint::config() const { return impl_->cfg; }
bool Endpoint::landed_writes_final() const {
  return impl_->engines[0]->device_info().backend == "udp";
}
std::string Endpoint::device_name() const {
  return impl_->engines[0]->device_info().name;
}
uint64_t Endpoint::link_speed_mbps() const {
  return impl_->engines[0]->device_info().link_speed_mbps;
}
int Endpoint::numa_node() const {
  return impl_->engines[0]->device_info().numa_node;
}
std::string Endpoint::pci_path() const {
  return impl_->engines[0]->device_info().pci_path;
}
std::string Endpoint::local_ip() const {
  return impl_->engines[0]->device_info().ip;
}

// -------------------------------------------------------------- memory

namespace {

constexpr uint32_t kMrAccess = transport::kAccessLocalWrite |
                               transport::kAccessRemoteWrite |
                               transport::kAccessRemoteRead;

// One registration per engine's protection domain, made by `reg`.
template <typename Reg>
Result<std::unique_ptr<MrHandle>> reg_each(
    const std::vector<std::unique_ptr<engine::UcclRDMAEngine>>& engines,
    void* addr, size_t len, const char* what, Reg reg) {
  auto mh = std::make_unique<MrHandle>();
  mh->addr = addr;
  mh->len = len;
  for (auto& e : engines) {
    auto mr = reg(e->pd());
    if (!mr.ok()) return mr.status().with_context(what);
    mh->mrs.push_back(std::move(*mr));
  }
  return mh;
}

}  // namespace

Result<MrHandle*> Endpoint::reg_mr(void* addr, size_t len) {
  if (addr == nullptr || len == 0)
    return InvalidArgument("reg_mr: empty region");
  UCCL_ASSIGN_OR_RETURN(auto mh, reg_each(impl_->engines, addr, len, "reg_mr",
                                          [&](transport::ProtectionDomain* pd) {
                                            return pd->reg_mr(addr, len,
                                                              kMrAccess);
                                          }));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->mrs.push_back(mh.get());
  return mh.release();
}

Result<MrHandle*> Endpoint::reg_dmabuf_mr(void* addr, size_t len, int fd,
                                          uint64_t offset) {
  if (addr == nullptr || len == 0 || fd < 0) {
    return InvalidArgument("reg_dmabuf_mr: empty region or no dma-buf");
  }
  const uint64_t iova = reinterpret_cast<uint64_t>(addr);
  UCCL_ASSIGN_OR_RETURN(auto mh,
                        reg_each(impl_->engines, addr, len, "reg_dmabuf_mr",
                                 [&](transport::ProtectionDomain* pd) {
                                   return pd->reg_dmabuf_mr(fd, offset, len,
                                                            iova, kMrAccess);
                                 }));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->mrs.push_back(mh.get());
  return mh.release();
}

Status Endpoint::dereg_mr(MrHandle* mh) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = std::find(impl_->mrs.begin(), impl_->mrs.end(), mh);
    if (it == impl_->mrs.end())
      return InvalidArgument("dereg_mr: unknown handle");
    impl_->mrs.erase(it);
  }
  // A receive posted just before may still sit in an engine's queue with a
  // pointer to this registration: let every engine drain past it first.
  // Requests already handed to the NIC keep only keys, which now fail
  // cleanly (local protection error, or the peer's write is dropped).
  for (auto& e : impl_->engines) (void)e->sync();
  delete mh;
  return Status::OK();
}

Result<RemoteRegion> Endpoint::advertise(MrHandle* mh, void* addr, size_t len) {
  if (!covers(mh, addr, len) || len == 0) {
    return InvalidArgument(
        "advertise: range is not inside the registered region");
  }
  uint32_t id = impl_->next_region.fetch_add(1);
  if (id >= engine::kMaxRegions) {
    return ResourceExhausted("advertise: too many regions");
  }
  engine::Region& r = impl_->regions[id];
  RemoteRegion out;
  out.addr = reinterpret_cast<uint64_t>(addr);
  out.len = len;
  out.num_engines = static_cast<uint32_t>(impl_->engines.size());
  out.region = id;
  r.addr = out.addr;
  r.len = len;
  std::lock_guard<std::mutex> lock(impl_->mu);
  mh->regions.push_back(id);
  for (size_t e = 0; e < impl_->engines.size(); ++e) {
    r.lkeys.push_back(mh->mrs[e]->lkey());
    uint32_t rkey = mh->mrs[e]->rkey();
    // A window limits the peer to exactly this range where supported.
    auto w = impl_->engines[e]->pd()->alloc_mw();
    if (w.ok()) {
      auto k = (*w)->bind(*mh->mrs[e], out.addr, len,
                          transport::kAccessRemoteWrite |
                              transport::kAccessRemoteRead |
                              transport::kAccessLocalWrite);
      if (k.ok()) {
        rkey = *k;
        mh->windows.push_back(std::move(*w));
      }
    }
    out.rkeys[e] = rkey;
  }
  r.valid.store(true, std::memory_order_release);
  return out;
}

// ----------------------------------------------------------- statistics

std::string Endpoint::nic_counters() const {
  std::ostringstream os;
  for (size_t i = 0; i < impl_->engines.size(); ++i) {
    os << "[engine " << i << "]\n" << impl_->engines[i]->device_counters();
  }
  return os.str();
}

Result<FlowStats> Endpoint::conn_stats(ConnId c) const {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("stats: unknown or closed connection");
  }
  return impl_->engines[e]->conn_stats(i);
}

std::vector<EngineStats> Endpoint::engine_stats() const {
  std::vector<EngineStats> out;
  for (auto& e : impl_->engines) out.push_back(e->stats());
  return out;
}

Result<EngineStats> Endpoint::engine_stats(int engine) const {
  UCCL_RETURN_IF_ERROR(impl_->check_engine("engine_stats", engine, nullptr));
  return impl_->engines[engine]->stats();
}

std::string Endpoint::stats_text() const {
  std::ostringstream os;
  auto all = engine_stats();
  for (size_t i = 0; i < all.size(); ++i) {
    const FlowStats& f = all[i].total;
    os << "engine " << i << ": tx " << f.tx_bytes << " B / " << f.tx_chunks
       << " chunks, rx " << f.rx_bytes << " B, retx fast " << f.fast_retransmits
       << " rto " << f.rto_retransmits << " tlp " << f.tlp_retransmits << " ("
       << f.rtos << " RTOs, " << f.spurious_rtos << " spurious), dup "
       << f.duplicate_chunks << ", sends " << f.sends_matched << " ("
       << f.sends_waited_for_recv << " waited for a receive) eager "
       << f.sends_eager << ", rtt p50 " << f.rtt_p50_ns / 1000.0 << " us p99 "
       << f.rtt_p99_ns / 1000.0 << " us, busy " << all[i].busy_percent()
       << "% of " << all[i].run_ns / 1e9 << " s, protocol errors "
       << all[i].protocol_errors << ", " << f.cc_state << "\n";
  }
  return os.str();
}

}  // namespace uccl
