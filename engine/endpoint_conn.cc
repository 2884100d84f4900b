// Endpoint connections: listen, connect and accept (blocking and not),
// each a bootstrap handshake that creates and connects an engine's flow.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/endpoint_impl.h"

namespace uccl {

using engine::CmdType;
using engine::Command;
using engine::ConnRecord;
using engine::Handshake;

Result<uint16_t> Endpoint::listen(uint16_t port) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->listen_fd >= 0)
    return AlreadyExists("endpoint is already listening");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 128) != 0) {
    Status st = ErrnoStatus("listen on port " + std::to_string(port), errno);
    close(fd);
    return st;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->listen_fd = fd;
  return ntohs(a.sin_port);
}

Result<uint64_t> Endpoint::connect_start(const std::string& ip, uint16_t port,
                                         uint64_t tag, int engine) {
  UCCL_RETURN_IF_ERROR(impl_->check_engine("connect", engine, "picks one"));
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    return InvalidArgument("'" + ip + "' is not an IPv4 address");
  }
  if (port == 0) return InvalidArgument("port 0");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  engine::tune_tcp_socket(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 &&
      errno != EINPROGRESS) {
    Status st =
        ErrnoStatus("connect to " + ip + ":" + std::to_string(port), errno);
    close(fd);
    return st;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  uint64_t id = impl_->next_pending++;
  engine::HandshakeParams hp = impl_->hs_params();
  hp.tag = tag;
  impl_->connects[id] = std::make_unique<Handshake>(
      Handshake::Role::kConnect, fd, ip + ":" + std::to_string(port),
      impl_->picker(engine), hp);
  return id;
}

Result<ConnId> Endpoint::connect_poll(uint64_t pending) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->connects.find(pending);
  if (it == impl_->connects.end()) {
    return InvalidArgument("unknown pending connection");
  }
  Status st = it->second->poll();
  if (st.code() == StatusCode::kUnavailable) return st;
  if (!st.ok()) {
    impl_->unpick(it->second.get());
    impl_->connects.erase(it);
    return st;
  }
  ConnId id = impl_->publish(it->second.get());
  impl_->connects.erase(it);
  return id;
}

Result<ConnId> Endpoint::connect(const std::string& ip, uint16_t port,
                                 int timeout_ms) {
  UCCL_ASSIGN_OR_RETURN(uint64_t p, connect_start(ip, port));
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    auto r = connect_poll(p);
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (monotonic_ns() > deadline) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      auto it = impl_->connects.find(p);
      if (it != impl_->connects.end()) {
        impl_->unpick(it->second.get());
        impl_->connects.erase(it);
      }
      return TimedOut("connect to " + ip + ":" + std::to_string(port) +
                      " timed out after " + std::to_string(timeout_ms) + " ms");
    }
    usleep(50);
  }
}

Status Endpoint::place_accepts(uint64_t tag, int engine) {
  UCCL_RETURN_IF_ERROR(
      impl_->check_engine("place_accepts", engine, "forgets the placement"));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (engine < 0) {
    impl_->accept_engine.erase(tag);
    return Status::OK();
  }
  if (impl_->accept_engine.size() >= kMaxAcceptPlacements &&
      impl_->accept_engine.count(tag) == 0) {
    return ResourceExhausted(
        "place_accepts: " + std::to_string(kMaxAcceptPlacements) +
        " placements already; forget some first");
  }
  impl_->accept_engine[tag] = engine;
  return Status::OK();
}

Result<int> Endpoint::engine_of(ConnId c) const {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("engine_of: unknown connection");
  }
  return static_cast<int>(e);
}

Result<ConnId> Endpoint::accept_poll() { return accept_impl(false, 0); }

Result<ConnId> Endpoint::accept_poll(uint64_t tag) {
  return accept_impl(true, tag);
}

Result<ConnId> Endpoint::accept_impl(bool by_tag, uint64_t tag) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->listen_fd < 0)
    return InvalidArgument("accept: call listen() first");
  for (;;) {
    sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = accept4(impl_->listen_fd, reinterpret_cast<sockaddr*>(&a), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    engine::tune_tcp_socket(fd);
    if (impl_->accepts.size() >= Impl::kMaxPendingAccepts) {
      auto it = std::find_if(
          impl_->accepts.begin(), impl_->accepts.end(),
          [](const std::unique_ptr<Handshake>& h) { return !h->identified(); });
      if (it == impl_->accepts.end()) {  // all identified: refuse this one
        close(fd);
        impl_->rejected.fetch_add(1);
        continue;
      }
      impl_->reject(**it, ResourceExhausted("too many pending handshakes"));
      impl_->accepts.erase(it);
    }
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
    impl_->accepts.push_back(std::make_unique<Handshake>(
        Handshake::Role::kAccept, fd,
        std::string(ip) + ":" + std::to_string(ntohs(a.sin_port)),
        impl_->picker(-1), impl_->hs_params()));
  }
  // Advance every handshake; finished ones wait in `ready` for their tag.
  for (size_t i = 0; i < impl_->accepts.size();) {
    Status st = impl_->accepts[i]->poll();
    if (st.code() == StatusCode::kUnavailable) {
      ++i;
      continue;
    }
    std::unique_ptr<Handshake> h = std::move(impl_->accepts[i]);
    impl_->accepts.erase(impl_->accepts.begin() + i);
    if (!st.ok() && !h->identified()) {
      impl_->reject(*h, st);
      continue;
    }
    if (!st.ok()) {
      LOG(WARNING) << "accept: " << st;
      impl_->unpick(h.get());
      // Kept for the accept_poll of its tag (bounded: failures nobody asks
      // about, e.g. port scans, must not pile up).
      size_t failed = 0;
      for (const auto& r : impl_->ready) failed += r.conn == 0;
      if (failed >= 64) {
        for (auto it = impl_->ready.begin(); it != impl_->ready.end(); ++it) {
          if (it->conn == 0) {
            impl_->ready.erase(it);
            break;
          }
        }
      }
      impl_->ready.push_back({h->tag(), 0, st});
    } else {
      impl_->ready.push_back({h->tag(), impl_->publish(h.get()), Status()});
    }
  }
  for (auto it = impl_->ready.begin(); it != impl_->ready.end(); ++it) {
    if (by_tag && it->tag != tag) continue;
    Impl::Ready r = std::move(*it);
    impl_->ready.erase(it);
    if (r.conn == 0) return r.status;
    return r.conn;
  }
  return Unavailable("no connection ready");
}

Result<ConnId> Endpoint::accept(int timeout_ms) {
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    auto r = accept_poll();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (monotonic_ns() > deadline) {
      return TimedOut("no connection accepted within " +
                      std::to_string(timeout_ms) + " ms");
    }
    usleep(50);
  }
}

uint64_t Endpoint::rejected_handshakes() const {
  return impl_->rejected.load();
}

std::string Endpoint::peer_ip(ConnId c) const {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr) return "";
  std::string s = r->peer_ip;
  return s.substr(0, s.rfind(':'));
}

Result<uint64_t> Endpoint::writes_landed(ConnId c) const {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr) return InvalidArgument("unknown or closed connection");
  return r->writes_landed.load(std::memory_order_acquire);
}

Status Endpoint::close(ConnId c) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr) return InvalidArgument("unknown or closed connection");
  r->id.store(0, std::memory_order_release);
  impl_->engine_load[e].fetch_sub(1);
  Command cmd{};
  cmd.type = CmdType::kCloseConn;
  cmd.conn = i;
  while (!impl_->engines[e]->submit(cmd)) sched_yield();
  return Status::OK();
}

}  // namespace uccl
