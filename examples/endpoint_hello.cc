// The README's example: two endpoints in one process, one message sent and
// received over the software NIC on loopback. Built and run by the tests.
#include <cstdio>
#include <cstring>
#include <thread>

#include "uccl/endpoint.h"

int main() {
  uccl::EndpointConfig cfg;
  cfg.device = "udp:lo";  // the software NIC on loopback
  auto server = uccl::Endpoint::create(cfg);
  auto client = uccl::Endpoint::create(cfg);
  if (!server.ok() || !client.ok()) return 1;
  auto port = (*server)->listen(0);  // 0: the kernel picks one
  if (!port.ok()) return 1;
  uccl::Result<uccl::ConnId> in_conn =
      uccl::Status(uccl::StatusCode::kUnavailable, "");
  std::thread t([&] { in_conn = (*server)->accept(10000); });
  auto out_conn = (*client)->connect("127.0.0.1", *port, 10000);
  t.join();
  if (!in_conn.ok() || !out_conn.ok()) return 1;

  char out[64] = "hello over UCCL", in[64] = {};
  auto out_mr = (*client)->reg_mr(out, sizeof(out));
  auto in_mr = (*server)->reg_mr(in, sizeof(in));
  uccl::Request sreq, rreq;  // owned by the caller until done
  if (!(*server)->recv_async(*in_conn, in, sizeof(in), *in_mr, &rreq).ok() ||
      !(*client)
           ->send_async(*out_conn, out, sizeof(out), *out_mr, &sreq)
           .ok() ||
      !(*server)->wait(&rreq, 10000).ok() ||
      !(*client)->wait(&sreq, 10000).ok()) {
    return 1;
  }
  std::printf("received %zu bytes: %s\n", rreq.size(), in);
  return std::strcmp(in, out) == 0 ? 0 : 1;
}
