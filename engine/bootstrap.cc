// Handshake state machine: TCP connect -> hello (magic, version, mode) ->
// engine creates QPs -> QP exchange -> engine connects QPs -> ready byte.
// Every step is non-blocking and bounded by the handshake deadline.
#include "engine/bootstrap.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/clock.h"
#include "util/logging.h"

namespace uccl::engine {

void tune_tcp_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 5, intvl = 1, cnt = 5;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

Handshake::Handshake(Role role, int fd, const std::string& peer,
                     EnginePicker pick, const HandshakeParams& p)
    : role_(role),
      fd_(fd),
      peer_(peer),
      pick_(std::move(pick)),
      tag_(p.tag),
      p_(p),
      state_(role == Role::kConnect ? State::kConnecting : State::kHello),
      deadline_ns_(monotonic_ns() + p.timeout_ns) {
  BootHello h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kBootMagic;
  h.version = kBootVersion;
  h.size = sizeof(BootHello);
  h.nonce = p.nonce;
  h.paths = p.paths;
  h.chunk_bytes = p.chunk_bytes;
  h.rc_mode = p.rc_mode ? 1 : 0;
  h.tag = p.tag;
  out_.assign(reinterpret_cast<uint8_t*>(&h),
              reinterpret_cast<uint8_t*>(&h) + sizeof(h));
}

Handshake::~Handshake() {
  // A command the engine has not answered still points at setup_.
  if (created_ || (state_ == State::kConnecting2)) {
    uint64_t until = monotonic_ns() + 5000000000ull;
    while (!setup_.done.load(std::memory_order_acquire) &&
           monotonic_ns() < until) {
      sched_yield();
    }
  }
  if (state_ != State::kDone) {
    if (created_ && setup_.status.ok()) {
      Command c{};
      c.type = CmdType::kCloseConn;
      c.conn = setup_.conn;
      engine_->submit(c);
    }
    if (!fd_given_ && fd_ >= 0) close(fd_);
  }
}

Status Handshake::fail(Status st) {
  state_ = State::kFailed;
  failure_ = st.with_context("bootstrap with " + peer_);
  return failure_;
}

bool Handshake::send_some(const std::vector<uint8_t>& buf, size_t* off,
                          Status* err) {
  while (*off < buf.size()) {
    ssize_t n = send(fd_, buf.data() + *off, buf.size() - *off,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      *off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return false;
    }
    *err = ErrnoStatus("send", n < 0 ? errno : EPIPE);
    return false;
  }
  return true;
}

bool Handshake::recv_some(std::vector<uint8_t>* buf, size_t want, Status* err) {
  while (buf->size() < want) {
    uint8_t tmp[512];
    size_t need = std::min(sizeof(tmp), want - buf->size());
    ssize_t n = recv(fd_, tmp, need, MSG_DONTWAIT);
    if (n > 0) {
      buf->insert(buf->end(), tmp, tmp + n);
      continue;
    }
    if (n == 0) {
      *err =
          ConnectionFailed("peer closed the connection during the handshake");
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    *err = ErrnoStatus("recv", errno);
    return false;
  }
  return true;
}

Status check_hello_prefix(const uint8_t* p) {
  uint32_t magic;
  uint16_t version, size;
  std::memcpy(&magic, p, 4);
  std::memcpy(&version, p + 4, 2);
  std::memcpy(&size, p + 6, 2);
  if (magic != kBootMagic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "bad magic 0x%08x", magic);
    return ProtocolError(std::string(buf) +
                         ": the peer is not a UCCL endpoint");
  }
  if (version != kBootVersion || size != sizeof(BootHello)) {
    return ProtocolError("peer speaks bootstrap version " +
                         std::to_string(version) + ", we speak " +
                         std::to_string(kBootVersion));
  }
  return Status::OK();
}

Status check_hello(const BootHello& h, bool rc_mode) {
  if ((h.rc_mode != 0) != rc_mode) {
    return InvalidArgument(std::string("QP mode mismatch: peer uses ") +
                           (h.rc_mode ? "RC" : "UC") + ", we use " +
                           (rc_mode ? "RC" : "UC") + " (UCCL_RC_MODE)");
  }
  if (h.paths < 1 || h.paths > static_cast<uint32_t>(kMaxPaths)) {
    return ProtocolError("peer asked for " + std::to_string(h.paths) +
                         " paths");
  }
  return Status::OK();
}

Status check_qps(const BootQps& q, uint32_t agreed_paths) {
  if (q.magic != kBootMagic) return ProtocolError("bad QP message");
  if (q.num_qps != agreed_paths) {
    return ProtocolError("peer created " + std::to_string(q.num_qps) +
                         " QPs, agreed on " + std::to_string(agreed_paths));
  }
  if (q.engine >= 16 || q.flow_id >= Imm::kMaxFlows) {
    return ProtocolError("peer flow/engine out of range");
  }
  return Status::OK();
}

Status Handshake::on_hello() {
  BootHello h;
  std::memcpy(&h, in_.data(), sizeof(h));
  identified_ = true;
  if (role_ == Role::kAccept) tag_ = h.tag;
  UCCL_RETURN_IF_ERROR(check_hello(h, p_.rc_mode));
  agreed_paths_ = std::min(h.paths, p_.paths);
  engine_ = pick_(tag_);
  if (engine_ == nullptr) return Internal("no engine for the connection");
  nonce_ = h.nonce ^ p_.nonce;
  setup_.paths = agreed_paths_;
  Command c{};
  c.type = CmdType::kCreateConn;
  c.setup = &setup_;
  if (!engine_->submit(c))
    return ResourceExhausted("engine command queue full");
  created_ = true;
  return Status::OK();
}

Status Handshake::on_qps() {
  BootQps q;
  std::memcpy(&q, in_.data(), sizeof(q));
  setup_.peer_flow = q.flow_id;
  setup_.peer_engine = q.engine;
  setup_.peer_ud = q.ud_addr;
  setup_.peer_ud_qpn = q.ud_qpn;
  setup_.peer_ud_qkey = q.ud_qkey;
  setup_.peer_ctrl = q.ctrl_qp;
  setup_.peer_qps.resize(q.num_qps);
  std::memcpy(setup_.peer_qps.data(), in_.data() + sizeof(BootQps),
              q.num_qps * sizeof(transport::QpInfo));
  sockaddr_in sa;
  socklen_t len = sizeof(sa);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    setup_.peer_ipv4_be = sa.sin_addr.s_addr;
  }
  setup_.tcp_fd = fd_;
  setup_.nonce = nonce_;
  setup_.done.store(0, std::memory_order_relaxed);
  Command c{};
  c.type = CmdType::kConnectConn;
  c.setup = &setup_;
  if (!engine_->submit(c))
    return ResourceExhausted("engine command queue full");
  return Status::OK();
}

// The TCP connect finished (or failed).
Status Handshake::step_connect() {
  pollfd pfd{fd_, POLLOUT, 0};
  if (::poll(&pfd, 1, 0) <= 0) return Unavailable("connecting");
  int so_err = 0;
  socklen_t l = sizeof(so_err);
  getsockopt(fd_, SOL_SOCKET, SO_ERROR, &so_err, &l);
  if (so_err != 0) return fail(ErrnoStatus("connect", so_err));
  state_ = State::kHello;
  return Status::OK();
}

// Hellos exchanged and checked; the engine asked to create the QPs.
Status Handshake::step_hello() {
  Status err;
  bool sent = send_some(out_, &out_off_, &err);
  // The first 8 bytes (magic, version, size) first: a peer of another
  // version may send a hello of another size, and must get a clear
  // error rather than a wait for bytes that never come.
  bool got = err.ok() && recv_some(&in_, kHelloPrefix, &err);
  if (got) UCCL_RETURN_IF_ERROR(fail_if(check_hello_prefix(in_.data())));
  got = got && err.ok() && recv_some(&in_, sizeof(BootHello), &err);
  if (!err.ok()) return fail(err);
  if (!sent || !got) return Unavailable("hello");
  UCCL_RETURN_IF_ERROR(fail_if(on_hello()));
  state_ = State::kCreating;
  return Status::OK();
}

// The engine created the QPs: our QP message is ready to send.
Status Handshake::step_created() {
  if (!setup_.done.load(std::memory_order_acquire)) {
    return Unavailable("creating QPs");
  }
  if (!setup_.status.ok()) {
    created_ = false;  // nothing to close: creation failed
    return fail(setup_.status);
  }
  BootQps q{};
  q.magic = kBootMagic;
  q.flow_id = setup_.conn;
  q.engine = static_cast<uint32_t>(engine_->index());
  q.num_qps = static_cast<uint32_t>(setup_.qps.size());
  q.ud_addr = setup_.ud_addr;
  q.ud_qpn = setup_.ud_qpn;
  q.ud_qkey = setup_.ud_qkey;
  q.ctrl_qp = setup_.ctrl;
  out_.assign(reinterpret_cast<uint8_t*>(&q),
              reinterpret_cast<uint8_t*>(&q) + sizeof(q));
  const auto* qi = reinterpret_cast<const uint8_t*>(setup_.qps.data());
  out_.insert(out_.end(), qi,
              qi + setup_.qps.size() * sizeof(transport::QpInfo));
  out_off_ = 0;
  in_.clear();
  state_ = State::kQps;
  return Status::OK();
}

// QP messages exchanged and checked; the engine asked to connect.
Status Handshake::step_qps() {
  Status err;
  bool sent = send_some(out_, &out_off_, &err);
  bool got = err.ok() && recv_some(&in_, sizeof(BootQps), &err);
  if (got && err.ok()) {
    BootQps q;
    std::memcpy(&q, in_.data(), sizeof(q));
    UCCL_RETURN_IF_ERROR(fail_if(check_qps(q, agreed_paths_)));
    got = recv_some(
        &in_, sizeof(BootQps) + q.num_qps * sizeof(transport::QpInfo), &err);
  }
  if (!err.ok()) return fail(err);
  if (!sent || !got) return Unavailable("exchanging QPs");
  UCCL_RETURN_IF_ERROR(fail_if(on_qps()));
  state_ = State::kConnecting2;
  return Status::OK();
}

// The engine connected the QPs: the ready byte is ready to send.
Status Handshake::step_connected() {
  if (!setup_.done.load(std::memory_order_acquire)) {
    return Unavailable("connecting QPs");
  }
  if (!setup_.status.ok()) return fail(setup_.status);
  fd_given_ = true;  // the engine closes it with the connection
  out_.assign(1, kBootReady);
  out_off_ = 0;
  in_.clear();
  state_ = State::kReady;
  return Status::OK();
}

// Ready bytes exchanged: the connection is the engine's.
Status Handshake::step_ready() {
  Status err;
  bool sent = send_some(out_, &out_off_, &err);
  bool got = err.ok() && recv_some(&in_, 1, &err);
  if (!err.ok()) return fail(err);
  if (!sent || !got) return Unavailable("ready");
  if (in_[0] != kBootReady) return fail(ProtocolError("bad ready byte"));
  state_ = State::kDone;
  VLOG(kVlogRequest) << "bootstrap with " << peer_ << " done: conn "
                     << setup_.conn << " on engine " << engine_->index();
  return Status::OK();
}

// Runs the steps that can finish now; each returns OK once its state moved
// on, kUnavailable while it waits for the peer or the engine, or the
// failure (which fail() recorded).
Status Handshake::poll() {
  if (state_ == State::kDone) return Status::OK();
  if (state_ == State::kFailed) return failure_;
  if (monotonic_ns() > deadline_ns_) {
    return fail(TimedOut("handshake did not finish in time"));
  }
  for (;;) {
    Status st;
    switch (state_) {
      case State::kConnecting:
        st = step_connect();
        break;
      case State::kHello:
        st = step_hello();
        break;
      case State::kCreating:
        st = step_created();
        break;
      case State::kQps:
        st = step_qps();
        break;
      case State::kConnecting2:
        st = step_connected();
        break;
      case State::kReady:
        st = step_ready();
        break;
      case State::kDone:
        return Status::OK();
      case State::kFailed:
        return failure_;
    }
    if (!st.ok()) return st;
  }
}

}  // namespace uccl::engine
