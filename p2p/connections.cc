// p2p connections: a connection is one engine connection per engine plus
// one for notifications, each opened with a hello naming its group and
// place, so the accepting side groups them (in any arrival order) before
// handing the connection out.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "p2p/p2p_impl.h"
#include "util/clock.h"

namespace uccl::p2p {
namespace {

uint64_t deadline_after(int timeout_ms) {
  return monotonic_ns() +
         static_cast<uint64_t>(std::max(timeout_ms, 0)) * 1000000ull;
}

void nap() { std::this_thread::sleep_for(std::chrono::microseconds(100)); }

}  // namespace

Result<uint16_t> Endpoint::listen(uint16_t port) {
  UCCL_ASSIGN_OR_RETURN(uint16_t p, impl_->ep->listen(port));
  // Where accepted engine connections go (p2p_impl.h, kDataConnTag).
  const int n = impl_->cfg.num_cpus;
  for (int r = 0; r < kTagRotations; ++r) {
    for (int j = 0; j < kMaxStripes; ++j) {
      UCCL_RETURN_IF_ERROR(impl_->ep->place_accepts(
          kDataConnTag + r * kMaxStripes + j, (r + j) % n));
    }
    UCCL_RETURN_IF_ERROR(impl_->ep->place_accepts(kNotifConnTag + r, r % n));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->port = p;
  return p;
}

Result<std::string> Endpoint::metadata() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->port == 0) return Unavailable("metadata: listen() first");
  // The address peers reach: the device's. A wildcard device ("udp") has
  // none of its own, so its metadata serves peers on this host.
  std::string ip = impl_->ep->local_ip();
  if (ip.empty() || ip == "0.0.0.0") ip = "127.0.0.1";
  return ip + ":" + std::to_string(impl_->port);
}

Result<ConnHandle> Endpoint::connect_by_metadata(const std::string& metadata,
                                                 int timeout_ms) {
  const size_t colon = metadata.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("metadata '" + metadata + "' is not ip:port");
  }
  char* end = nullptr;
  const unsigned long port =
      std::strtoul(metadata.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) {
    return InvalidArgument("metadata '" + metadata + "' has no valid port");
  }
  return connect(metadata.substr(0, colon), static_cast<uint16_t>(port),
                 timeout_ms);
}

Result<ConnHandle> Endpoint::connect(const std::string& ip, uint16_t port,
                                     int timeout_ms) {
  // One engine connection per engine for data, and one more (on engine 0)
  // for notifications: their long-posted receives must not hold up the
  // data connections' in-order receive slots.
  const int k = impl_->cfg.num_cpus + 1;
  const uint64_t deadline = deadline_after(timeout_ms);
  std::vector<uint64_t> pending(k);
  std::vector<ConnId> conns(k, 0);
  auto close_all = [&] {
    for (ConnId c : conns) {
      if (c != 0) (void)impl_->ep->close(c);
    }
  };
  // The acceptor's engines for this group start at rotation r (p2p_impl.h).
  static std::atomic<uint32_t> next_rotation{std::random_device{}()};
  const uint32_t r = next_rotation.fetch_add(1) % kTagRotations;
  for (int j = 0; j < k; ++j) {
    const bool data = j < k - 1;
    auto s = impl_->ep->connect_start(
        ip, port, data ? kDataConnTag + r * kMaxStripes + j : kNotifConnTag + r,
        data ? j : 0);
    if (!s.ok()) {
      close_all();
      return s.status();
    }
    pending[j] = *s;
  }
  for (int left = k; left > 0;) {
    for (int j = 0; j < k; ++j) {
      if (conns[j] != 0) continue;
      auto c = impl_->ep->connect_poll(pending[j]);
      if (c.ok()) {
        conns[j] = *c;
        --left;
      } else if (c.status().code() != StatusCode::kUnavailable) {
        close_all();
        return c.status();
      }
    }
    if (left > 0 && monotonic_ns() > deadline) {
      close_all();
      return TimedOut("connect: the peer did not accept in time");
    }
    if (left > 0) nap();
  }
  // Each connection says which group it belongs to and where.
  uint32_t group;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    std::random_device rd;
    group =
        rd() ^ (static_cast<uint32_t>(getpid()) << 12) ^ ++impl_->next_group;
  }
  std::vector<ConnHello> hellos(k);
  auto mh = impl_->ep->reg_mr(hellos.data(), sizeof(ConnHello) * k);
  if (!mh.ok()) {
    close_all();
    return mh.status();
  }
  std::vector<Request> reqs(k);
  Status st;
  for (int j = 0; j < k && st.ok(); ++j) {
    hellos[j].group = group;
    hellos[j].k = static_cast<uint16_t>(k - 1);  // data connections
    hellos[j].index = static_cast<uint16_t>(j);
    hellos[j].stripe_bytes = impl_->cfg.stripe_bytes;
    st = impl_->ep->send_async(conns[j], &hellos[j], sizeof(ConnHello), *mh,
                               &reqs[j]);
  }
  for (int j = 0; j < k && st.ok(); ++j) {
    const int64_t left_ms = (static_cast<int64_t>(deadline) -
                             static_cast<int64_t>(monotonic_ns())) /
                            1000000;
    st = impl_->ep->wait(&reqs[j],
                         static_cast<int>(std::max<int64_t>(left_ms, 1)));
  }
  if (!st.ok()) close_all();
  // Closed connections complete their requests; only then may they go.
  for (int j = 0; j < k; ++j) {
    while (reqs[j].pending()) nap();
  }
  (void)impl_->ep->dereg_mr(*mh);
  if (!st.ok()) {
    return st.code() == StatusCode::kTimedOut
               ? TimedOut("connect: the peer took no hello in time")
               : st;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->add_conn(std::move(conns), impl_->cfg.stripe_bytes);
}

Result<ConnHandle> Endpoint::accept(int timeout_ms) {
  const uint64_t deadline = deadline_after(timeout_ms);
  for (;;) {
    Result<ConnHandle> r = Unavailable("");
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      r = impl_->accept_step();
    }
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (monotonic_ns() > deadline) {
      return TimedOut("accept: no connection completed in time");
    }
    nap();
  }
}

// accept()'s first step: new engine connections each get a hello receive
// and a deadline for it.
Status Endpoint::Impl::take_new_accepts(uint64_t now) {
  while (!free_hellos.empty()) {
    auto c = ep->accept_poll();
    if (!c.ok()) {
      if (c.status().code() == StatusCode::kUnavailable) break;
      return c.status();
    }
    auto pa = std::make_unique<PendingAccept>();
    pa->conn = *c;
    pa->slot = free_hellos.back();
    pa->deadline_ns = now + hello_timeout_ns;
    free_hellos.pop_back();
    Status st = ep->recv_async(pa->conn,
                               hello_bufs.data() + pa->slot * sizeof(ConnHello),
                               sizeof(ConnHello), hello_mh, &pa->req);
    if (!st.ok()) {
      free_hellos.push_back(pa->slot);
      (void)ep->close(pa->conn);
      continue;
    }
    pending_accepts.push_back(std::move(pa));
  }
  return Status::OK();
}

// Files a connection whose hello arrived under its group; the group once
// complete (else 0). A hello that is malformed or contradicts its group
// closes the connection and is counted.
Result<ConnHandle> Endpoint::Impl::file_hello(ConnId conn, const ConnHello& h,
                                              bool ok, uint64_t now) {
  AcceptGroup* g = nullptr;
  const auto key = std::make_pair(ep->peer_ip(conn), h.group);
  if (ok) {
    g = &groups[key];
    if (g->k == 0) {
      g->k = h.k;
      g->stripe_bytes = h.stripe_bytes;
      g->conns.assign(h.k + 1, 0);  // data, then notifications
      g->deadline_ns = now + hello_timeout_ns;
    }
  }
  if (g == nullptr || g->k != h.k || g->stripe_bytes != h.stripe_bytes ||
      g->conns[h.index] != 0) {
    ++rejected_hellos;  // not a p2p peer, or a hello that contradicts
    (void)ep->close(conn);
    return ConnHandle{0};
  }
  g->conns[h.index] = conn;
  if (++g->have < g->k + 1) return ConnHandle{0};
  AcceptGroup done = std::move(*g);
  groups.erase(key);
  return add_conn(std::move(done.conns), done.stripe_bytes);
}

// Connections that sent no hello in time, and groups that did not
// complete in time, are closed (counted as rejected): a peer that opens
// connections and goes silent holds nothing for long.
void Endpoint::Impl::expire_stale(uint64_t now) {
  for (auto& pa : pending_accepts) {
    if (!pa->closing && now > pa->deadline_ns) {
      pa->closing = true;
      ++rejected_hellos;
      (void)ep->close(pa->conn);
    }
  }
  for (auto it = groups.begin(); it != groups.end();) {
    if (now <= it->second.deadline_ns) {
      ++it;
      continue;
    }
    for (ConnId c : it->second.conns) {
      if (c != 0) {
        ++rejected_hellos;
        (void)ep->close(c);
      }
    }
    it = groups.erase(it);
  }
}

Result<ConnHandle> Endpoint::Impl::accept_step() {
  const uint64_t now = monotonic_ns();
  UCCL_RETURN_IF_ERROR(take_new_accepts(now));
  expire_stale(now);
  // Hellos that arrived (or receives that ended with their connection).
  for (size_t i = 0; i < pending_accepts.size();) {
    PendingAccept* pa = pending_accepts[i].get();
    if (!pa->req.done()) {
      ++i;
      continue;
    }
    ConnHello h;
    std::memcpy(&h, hello_bufs.data() + pa->slot * sizeof(ConnHello),
                sizeof(h));
    free_hellos.push_back(pa->slot);
    const ConnId conn = pa->conn;
    const bool closing = pa->closing;
    const bool ok =
        pa->req.status().ok() && pa->req.size(0) == sizeof(ConnHello) &&
        h.magic == ConnHello::kMagic && h.k >= 1 && h.k <= kMaxStripes &&
        h.index <= h.k && h.stripe_bytes >= 4096;
    pending_accepts.erase(pending_accepts.begin() + i);
    if (closing) continue;  // expired: already closed and counted
    UCCL_ASSIGN_OR_RETURN(ConnHandle done, file_hello(conn, h, ok, now));
    if (done != 0) return done;
  }
  return Unavailable("accept: no connection yet");
}

Result<ConnHandle> Endpoint::Impl::add_conn(std::vector<ConnId> engine_conns,
                                            size_t stripe) {
  const ConnId notif = engine_conns.back();  // the last: notifications
  engine_conns.pop_back();
  UCCL_ASSIGN_OR_RETURN(auto striped,
                        StripedConn::create(ep.get(), engine_conns, stripe,
                                            PartsMode::kAuto, kPartsHistory));
  const ConnHandle id = next_conn++;
  P2pConn& pc = conns[id];
  pc.conns = std::move(engine_conns);
  pc.notified_sent_each.assign(pc.conns.size(), 0);
  pc.striped = std::move(striped);
  pc.stripe_bytes = stripe;
  pc.notif_conn = notif;
  Status st = start_notifs(&pc);
  if (!st.ok()) {
    for (ConnId e : pc.conns) (void)ep->close(e);
    (void)ep->close(pc.notif_conn);
    pc.closed = true;
    return st;
  }
  return id;
}

Result<std::vector<int>> Endpoint::engines_of(ConnHandle c) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  std::vector<int> engines;
  for (ConnId e : pc->conns) {
    UCCL_ASSIGN_OR_RETURN(int engine, impl_->ep->engine_of(e));
    engines.push_back(engine);
  }
  return engines;
}

Result<P2pConn*> Endpoint::Impl::conn_of(ConnHandle c) {
  auto it = conns.find(c);
  if (it == conns.end()) return InvalidArgument("unknown connection");
  return &it->second;
}

Status Endpoint::close(ConnHandle c) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  if (pc->closed) return InvalidArgument("connection already closed");
  pc->closed = true;
  // Outstanding transfers now fail; their slots are freed as they are
  // polled. The entry stays so that they can still find their group.
  for (ConnId e : pc->conns) (void)impl_->ep->close(e);
  (void)impl_->ep->close(pc->notif_conn);
  return Status::OK();
}

}  // namespace uccl::p2p
