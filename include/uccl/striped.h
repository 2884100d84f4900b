// Striped transfers: one message cut over K connections of an Endpoint to
// one peer (each on its own engine), so a large message moves on K engines.
//
// Neither side needs the other's size (a receiver posts its buffer, a
// sender what it has), so the cut depends only on a stripe S both sides
// agree on: part j is bytes [j*S, (j+1)*S) and the last part the rest, of
// the message at the sender and of the buffer at the receiver; parts past
// the message's end go empty. How a receiver posts the parts is the
// group's PartsMode, decided per message the same way at both ends:
// - kFirst: a message shorter than S goes whole on connection 0 (one
//   engine: small-message latency). The receiver posts part 0 first and
//   the other parts once part 0 completes: a full part 0 means the sender
//   striped. A striped message pays part 0's time and a descriptor's trip
//   before parts 1..K-1 move.
// - kAll: the receiver posts all K parts at once; a message shorter than S
//   goes in part 0 with K-1 empty parts and completes with part 0 (the
//   empty parts finish in the background; the request is reusable once
//   they have, StripedConn::reusable).
// - kAuto: kAll for message m where message m - kPartsHistory was at least
//   S, else kFirst (messages counted per direction: a group that both
//   sends and receives keeps two histories). The sender knows that message's
//   size; a receiver that keeps at most kPartsHistory requests outstanding has
//   seen its part 0 complete, or waits for it (recv() then takes nothing yet).
// Both sides post every message's parts in the same order (receivers
// expand in the order of part 0's completions, which is that order too,
// and a message posting all parts waits behind those still expanding), so
// each connection pairs them FIFO.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "uccl/endpoint.h"
#include "uccl/status.h"

namespace uccl {

constexpr int kMaxStripes = 16;    // connections in a striped group at most
constexpr int kPartsHistory = 32;  // kAuto looks this many messages back

enum class PartsMode : uint8_t { kFirst = 0, kAll = 1, kAuto = 2 };

// The byte range [*off, *off + *n) of part j of a message of `len` bytes cut
// over k connections at `stripe`.
inline void stripe_part(size_t len, int j, int k, size_t stripe, size_t* off,
                        size_t* n) {
  const size_t lo = std::min(static_cast<size_t>(j) * stripe, len);
  const size_t hi =
      j == k - 1 ? len : std::min(static_cast<size_t>(j + 1) * stripe, len);
  *off = lo;
  *n = hi - lo;
}

// One message on a StripedConn: an engine request per part. Owned by the
// caller and kept alive (and unmoved) until test() reports it done and, if
// it finished early, until reusable() says so.
class StripedRequest {
 public:
  bool is_send() const { return is_send_; }
  size_t len() const { return len_; }
  // Done for the caller while empty parts still finish (kAll, kAuto).
  bool finishing() const { return finishing_; }
  // Its parts' congestion state, once done: resends and paths added up,
  // the slowest part's RTT, the windows and rates of their connections
  // added up. Only parts already done count: one still finishing (an empty
  // part, see finishing()) has its state written by its engine meanwhile.
  RequestCc cc() const {
    RequestCc t;
    for (int i = 0; i < posted_; ++i) {
      if (!reqs_[i].done()) continue;
      const RequestCc& c = reqs_[i].cc();
      t.retransmits += c.retransmits;
      t.paths += c.paths;
      t.rtt_ns = c.rtt_ns > t.rtt_ns ? c.rtt_ns : t.rtt_ns;
      t.cwnd_bytes += c.cwnd_bytes;
      t.rate_bps += c.rate_bps;
    }
    return t;
  }

 private:
  friend class StripedConn;
  Request reqs_[kMaxStripes];
  bool is_send_ = false;
  int parts_ = 0;           // engine requests making up this one
  int posted_ = 0;          // parts handed to the engines so far, in order
  bool expanding_ = false;  // receive: part 0 posted, the rest waits for it
  bool all_parts_ = false;  // posted with all K parts at once
  bool finishing_ = false;
  uint64_t seq_ = 0;  // receive, kAuto: its place in the history
  uint8_t* base_ = nullptr;
  size_t len_ = 0;  // send: bytes sent; receive: the buffer's size
  MrHandle* mh_ = nullptr;
  int tag_ = 0;
};

// K connections of `ep` to one peer used as one. Not thread-safe: one
// thread at a time posts and tests a group's requests. A receiver posts a
// striped message's parts 1..K-1 from test() or progress() (kFirst, and
// kAuto's first-part messages), and the sender's parts wait for them: keep
// testing while messages are outstanding, on both sides.
class StripedConn {
 public:
  // `conns`: 1..kMaxStripes connections whose peer group has the same
  // connections in the same order, the same stripe and mode. `max_requests`:
  // requests this side keeps outstanding at most (the receive expansion
  // ring's size; kAuto needs at most kPartsHistory at the receiver).
  static Result<std::unique_ptr<StripedConn>> create(Endpoint* ep,
                                                     std::vector<ConnId> conns,
                                                     size_t stripe_bytes,
                                                     PartsMode mode,
                                                     int max_requests);

  // Posts a message; OK with *taken false when nothing was taken (an
  // engine's queue is full, an earlier message's parts still wait, or a
  // kAuto receiver cannot tell the mode yet): post it again later. An
  // error (bad arguments, a broken group) leaves nothing posted.
  Status send(StripedRequest* r, const void* data, size_t len, MrHandle* mh,
              int tag, bool* taken);
  Status recv(StripedRequest* r, void* data, size_t len, MrHandle* mh, int tag,
              bool* taken);
  // Moves the group along: parts waiting to be posted, receives waiting to
  // expand. test() does this too.
  Status progress();
  // An earlier message's parts still wait to be posted: anything posted
  // on these connections outside the group must wait too (FIFO).
  bool backlogged() const { return backlog_ != nullptr; }
  // Moves the group along, then whether `r` is done: *done, and *bytes sent or
  // received. Returns the request's error once done, or the group's (broken()).
  Status test(StripedRequest* r, bool* done, size_t* bytes);
  // For a request done early (finishing()): whether its other parts have
  // finished, so it may be reused. A failed or non-empty one breaks the
  // group (broken()).
  bool reusable(StripedRequest* r);
  // After the connections are closed (their requests fail): waits until
  // the engines let go of r's parts, or `until_ns` (monotonic) passes.
  static void wait_released(StripedRequest* r, uint64_t until_ns);

  // Set when a part finishing in the background failed or brought bytes;
  // every later call reports it.
  const Status& broken() const { return broken_; }
  const std::vector<ConnId>& conns() const { return conns_; }
  size_t stripe_bytes() const { return stripe_; }
  PartsMode mode() const { return mode_; }
  struct Counters {
    uint64_t messages = 0;            // on groups of K > 1
    uint64_t all_parts_messages = 0;  // of those, posted with all parts
    uint64_t early_messages = 0;      // done with part 0
  };
  const Counters& counters() const { return counters_; }

 private:
  StripedConn() = default;
  int k() const { return static_cast<int>(conns_.size()); }
  // Posts r's remaining parts in order; those an engine cannot take now
  // wait (backlog_).
  Status post_parts(StripedRequest* r);
  // Receives whose part 0 completed, in posting order: the sender striped
  // (part 0 full: post the rest) or sent the message whole.
  Status expand_receives();
  // Whether the next message goes with all K parts at once; a receiver that
  // cannot tell yet sets *wait.
  bool next_all_parts(bool is_send, bool* wait);
  void note_posted(StripedRequest* r);
  void note_striped(StripedRequest* r);

  Endpoint* ep_ = nullptr;
  std::vector<ConnId> conns_;
  size_t stripe_ = 0;
  PartsMode mode_ = PartsMode::kFirst;
  Status broken_;
  StripedRequest* backlog_ = nullptr;
  std::unique_ptr<StripedRequest*[]> expand_;  // ring of max_requests
  int expand_size_ = 0, expand_head_ = 0, expand_count_ = 0;
  // kAuto, per direction ([0] sends, [1] receives: a group used both ways
  // pairs this side's sends with the peer's receives, and only those):
  // messages posted so far that way (the peer counts the other way alike)
  // and by seq % kPartsHistory whether that one was striped: 1, 0, or for
  // a receive -1 while its part 0 is out (its request in history_req_).
  uint64_t seq_[2] = {};
  int8_t striped_[2][kPartsHistory] = {};
  StripedRequest* history_req_[kPartsHistory] = {};  // receives
  Counters counters_;
};

}  // namespace uccl
