// One transport_test session on one side: the client's, or one of the
// server's (a server runs one Runner per client session, concurrently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/transport_test/protocol.h"
#include "uccl/endpoint.h"

namespace uccl::tt {

// What ends a session: the exit code it maps to and why. A client exits
// with it; a server reports it and goes on serving other sessions.
struct RunError {
  int code;
  std::string message;
};

struct RunOptions {
  bool server = false;
  std::string role;  // in text lines: "client", "server", "server 2"
  int session = 1;   // in the JSON line
  bool json = false;
  bool flow_stats = false;
  int64_t corrupt_rx_at = -1;  // testing: flip this byte of the first
                               // received message before verifying it
};

// A request slot: nmsg messages, sent or received together.
struct Slot {
  std::unique_ptr<Request[]> reqs;
  std::vector<uint8_t*> bufs;
  uint64_t iter = 0;
  bool posted = false;
  bool done(int n) const {
    for (int i = 0; i < n; ++i) {
      if (!reqs[i].done()) return false;
    }
    return true;
  }
};

struct Flow {
  ConnId conn = 0;
  std::vector<Slot> tx, rx;
  uint64_t tx_next = 0, rx_next = 0;    // next request number to post
  uint64_t tx_head = 0, rx_head = 0;    // oldest outstanding (FIFO order)
  uint64_t tx_bytes = 0, rx_bytes = 0;  // completed
};

class Runner {
 public:
  Runner(Endpoint* ep, ConnId ctl, const std::vector<ConnId>& conns,
         const Params& p, RunOptions opts);
  // Closes the session's connections; requests still posted (a failed
  // session) complete first, so nothing the engines touch is freed early.
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // The exit code (kExitOk, or kExitIntegrity on data errors); throws
  // RunError on a transport error.
  int run();

 private:
  bool sends() const {
    return p_.perftype == kBi || (p_.perftype != kLat && !opts_.server);
  }
  bool receives() const {
    return p_.perftype == kBi || (p_.perftype != kLat && opts_.server);
  }
  const char* role() const { return opts_.role.c_str(); }
  void alloc();
  void post_send(uint32_t f, uint64_t iter, bool fill);
  void post_recv(uint32_t f, uint64_t iter);
  // Checks a completed receive slot; counts bytes, messages and errors.
  void complete_recv(uint32_t f, Slot& s);
  void complete_send(uint32_t f, Slot& s);
  int run_stream();
  void fill_once();
  void report_basic_iteration(uint64_t basic_done);
  bool take_peer_done();
  int run_lat();
  void progress(double t, bool last);
  // Closing handshake and summary; returns the exit code.
  int finish(double secs, const std::vector<double>* lat_us);
  void print_flow_stats();
  // The NIC's drop counters and direct placements; the integrity errors.
  void print_nic_summary();
  void print_json(double secs, uint64_t errors, const double* lat);
  void send_done();
  void ctl_post_recv();
  [[noreturn]] void fail(const Status& st, const std::string& what) {
    throw RunError{kExitTransport, what + ": " + st.to_string()};
  }
  void retx_totals(uint64_t* fast, uint64_t* rto, uint64_t* tlp) const;
  bool all_requests_done() const;

  Endpoint* ep_;
  ConnId ctl_;
  Params p_;
  RunOptions opts_;
  std::vector<Flow> fl_;
  std::vector<uint8_t> txmem_, rxmem_, ctlmem_;
  MrHandle *tx_mh_ = nullptr, *rx_mh_ = nullptr, *ctl_mh_ = nullptr;
  Request ctl_rreq_, ctl_sreq_;
  uint64_t tx_bytes_ = 0, tx_msgs_ = 0, rx_bytes_ = 0, rx_msgs_ = 0,
           errors_ = 0;
  uint64_t last_tx_ = 0, last_rx_ = 0;
  uint64_t last_basic_ = 0;
  double last_t_ = 0, start_ = 0;
  Done peer_{};
};

}  // namespace uccl::tt
