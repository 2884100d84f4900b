// libFuzzer target: the TCP bootstrap as a peer drives it (engine/wire.h,
// "bootstrap"): the pure checks of a hello and a QP message, and a real
// accepting Handshake fed the input over a socket pair, in whatever pieces
// the kernel hands it, until it fails or wants an engine.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/bootstrap.h"

using namespace uccl;
using namespace uccl::engine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 8) (void)check_hello_prefix(data);
  if (size >= sizeof(BootHello)) {
    BootHello h;
    std::memcpy(&h, data, sizeof(h));
    (void)check_hello(h, false);
    (void)check_hello(h, true);
  }
  if (size >= sizeof(BootQps) + 1) {
    BootQps q;
    std::memcpy(&q, data + 1, sizeof(q));
    if (check_qps(q, data[0]).ok() && q.num_qps != data[0]) std::abort();
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  size_t off = 0;
  while (off < size) {  // the socket buffer takes far more than a hello
    const ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  shutdown(sv[1], SHUT_WR);
  HandshakeParams p;
  p.paths = 2;
  p.timeout_ns = 1000000000ull;
  // No engine: a hello that passes every check ends the handshake with
  // "no engine", as far as bytes alone can take it.
  Handshake h(
      Handshake::Role::kAccept, sv[0], "fuzz",
      [](uint64_t) -> UcclRDMAEngine* { return nullptr; }, p);
  for (int i = 0; i < 64; ++i) {
    Status st = h.poll();
    if (st.code() != StatusCode::kUnavailable) break;
  }
  close(sv[1]);  // sv[0] belongs to the handshake
  return 0;
}
