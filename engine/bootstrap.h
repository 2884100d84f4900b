// The connection handshake over TCP (engine/wire.h documents the bytes):
// a non-blocking state machine, advanced by poll(), shared by connect and
// accept, that never blocks the caller (NCCL's connect/accept contract).
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/wire.h"

namespace uccl::engine {

struct HandshakeParams {
  uint64_t tag = 0;  // connect: sent in the hello; accept: learned from it
  uint32_t paths = 1;
  uint32_t chunk_bytes = 0;
  bool rc_mode = false;
  uint64_t nonce = 0;
  uint64_t timeout_ns = 30000000000ull;
};

class Handshake {
 public:
  enum class Role { kConnect, kAccept };
  // Chooses the engine for the connection once the hello (and its tag) is
  // known.
  using EnginePicker = std::function<UcclRDMAEngine*(uint64_t tag)>;
  // Takes ownership of `fd` (non-blocking TCP; connecting or accepted).
  Handshake(Role role, int fd, const std::string& peer, EnginePicker pick,
            const HandshakeParams& p);
  ~Handshake();
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;

  // OK when the connection is up, kUnavailable while in progress, an error
  // (with the peer's address in the message) when it failed.
  Status poll();

  // Valid after poll() returned OK.
  uint32_t conn() const { return setup_.conn; }
  uint32_t peer_engine() const { return setup_.peer_engine; }
  const std::string& peer() const { return peer_; }
  UcclRDMAEngine* engine() const { return engine_; }  // null before hello
  uint64_t tag() const { return tag_; }
  // The peer sent a whole hello with our magic, version and size: it is a
  // UCCL endpoint, and tag() is its tag. An acceptor reports failures of
  // such handshakes to the acceptor of that tag; anything that failed
  // before (a port scan, garbage, another version, a hang-up or silence)
  // is logged, counted and dropped.
  bool identified() const { return identified_; }

 private:
  enum class State {
    kConnecting,
    kHello,
    kCreating,
    kQps,
    kConnecting2,
    kReady,
    kDone,
    kFailed
  };
  Status fail(Status st);
  Status fail_if(Status st) { return st.ok() ? st : fail(std::move(st)); }
  // Non-blocking I/O: false with *err set on a hard error.
  bool send_some(const std::vector<uint8_t>& buf, size_t* off, Status* err);
  bool recv_some(std::vector<uint8_t>* buf, size_t want, Status* err);
  static constexpr size_t kHelloPrefix = 8;  // magic, version, size
  // poll()'s steps, one per state.
  Status step_connect();
  Status step_hello();
  Status step_created();
  Status step_qps();
  Status step_connected();
  Status step_ready();
  Status on_hello();
  Status on_qps();

  Role role_;
  int fd_;
  std::string peer_;
  EnginePicker pick_;
  UcclRDMAEngine* engine_ = nullptr;
  uint64_t tag_ = 0;
  HandshakeParams p_;
  State state_;
  uint64_t deadline_ns_;
  ConnSetup setup_;
  bool created_ = false;   // kCreateConn submitted
  bool fd_given_ = false;  // the engine owns fd_ now
  std::vector<uint8_t> out_, in_;
  size_t out_off_ = 0;
  uint32_t agreed_paths_ = 0;
  bool identified_ = false;
  uint64_t nonce_ = 0;
  Status failure_;
};

// The checks of what a peer sends in the handshake (engine/wire.h), pure so
// they can be fuzzed: the hello's first 8 bytes (magic, version, size), a
// whole hello against our QP mode, and a QP message's header against the
// paths agreed on.
Status check_hello_prefix(const uint8_t* p);
Status check_hello(const BootHello& h, bool rc_mode);
Status check_qps(const BootQps& q, uint32_t agreed_paths);

// Sets TCP_NODELAY and keepalive (dead hosts are noticed in ~10 s).
void tune_tcp_socket(int fd);

}  // namespace uccl::engine
