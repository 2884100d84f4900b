// The NCCL plugin's comms: listen handles, non-blocking connect and
// accept of a comm's K connections on chosen engines, and closing them.

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "collective/plugin_state.h"
#include "collective/stripe.h"
#include "transport/udp/netif.h"
#include "util/clock.h"
#include "util/logging.h"

namespace uccl::nccl {

using namespace ncclabi;  // NOLINT: the ABI's names are short and plentiful

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

NcclResult NetPlugin::listen(int dev, void* handle, void** listen_comm) {
  if (handle == nullptr || listen_comm == nullptr) return kInternalError;
  std::lock_guard<std::mutex> lock(mu_);
  if (dev < 0 || dev >= static_cast<int>(devs_.size())) return kInternalError;
  PluginDevice* d = devs_[dev].get();
  auto de = endpoint(d);
  if (!de.ok()) return fail("listen", de.status());
  auto* l = new PluginListen;
  l->dev = d;
  l->ep = (*de)->ep.get();
  l->tag = next_tag_.fetch_add(1) & ((1ull << 56) - 1);
  l->conns.assign(conns_per_comm_, 0);
  if (spread_) {
    const uint32_t lane = next_lane(*de, false);
    for (int i = 0; i < conns_per_comm_; ++i) {
      Status st = l->ep->place_accepts(
          conn_tag(l->tag, i),
          comm_engine(*de, false, lane, i, conns_per_comm_));
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
  h.port = (*de)->port;
  h.max_recvs = static_cast<uint16_t>(max_recvs_);
  h.tag = l->tag;
  l->stripe =
      stripe_for(conns_per_comm_, l->ep->config().chunk_bytes, stripe_kb_);
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
    auto de = endpoint(d);
    if (!de.ok()) return fail("connect", de.status());
    auto st = std::make_unique<ConnectStage>();
    st->dev = d;
    st->ep = (*de)->ep.get();
    const std::string ip = transport::udp::ipv4_to_string(h->ipv4_be);
    const uint32_t lane = spread_ ? next_lane(*de, true) : 0;
    for (int i = 0; i < h->nconns; ++i) {
      auto p = st->ep->connect_start(
          ip, h->port, conn_tag(h->tag, i),
          spread_ ? comm_engine(*de, true, lane, i, h->nconns) : -1);
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

}  // namespace uccl::nccl
