// The point-to-point transfer engine's C++ API (the Python module uccl.p2p
// wraps it): connections striped over every engine, registered memory,
// two-sided send/recv and one-sided write/read with handles to poll.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uccl/endpoint.h"
#include "uccl/p2p_device.h"
#include "uccl/status.h"
#include "uccl/types.h"

namespace uccl::p2p {

struct Config {
  int local_gpu_idx = -1;  // GPU whose memory is moved; -1: host memory only
  int num_cpus = 4;        // engine threads, one per core, near the NIC
  // How transfers spread over the engines. Two-sided: a message is cut
  // into parts of this size, part j on engine j; one of stripe_bytes x
  // num_cpus (a segment) or more goes as a sequence of segments, each
  // spread evenly (the connecting side's value is used on both sides).
  // One-sided: cut evenly over the engines, no part under a quarter of it.
  size_t stripe_bytes = size_t{1} << 20;
  // An accepted engine connection that sends no hello in this time, or a
  // connection whose engine connections do not all arrive in it, is closed.
  int hello_timeout_ms = 10000;
  // GPU memory (local_gpu_idx >= 0) moves through this many page-locked
  // host buffers of stripe_bytes x num_cpus (a segment) each: a message
  // goes in segments, the copy of one overlapping the network of another.
  int staging_buffers = 8;
  // How GPU memory is reached; null: CUDA's runtime for local_gpu_idx.
  std::shared_ptr<DeviceMemory> device_memory;
  // Everything else of the engines (device, cores, congestion control,
  // faults); its num_engines is num_cpus.
  EndpointConfig engine;
};

using ConnHandle = uint64_t;  // a connection of this endpoint
using MrId = uint64_t;        // registered memory
using XferHandle = uint64_t;  // one outstanding transfer

// Where a peer may write or read: advertise()'s output, sent to the peer
// out of band as kRegionDescBytes bytes (to_bytes / from_bytes).
struct RegionDesc {
  static constexpr uint32_t kMagic = 0x55503252;  // "UP2R"
  static constexpr uint16_t kVersion = 1;
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t reserved = 0;
  RemoteRegion region;

  std::string to_bytes() const;
  // InvalidArgument for a buffer of another size, magic or version, or a
  // region no endpoint could have advertised.
  static Result<RegionDesc> from_bytes(const std::string& bytes);
};
constexpr size_t kRegionDescBytes = sizeof(RegionDesc);

// Where a writer's notifying writes on one connection stand: per engine
// connection (part j of every write goes on the j-th), how many parts it
// has posted. Taken at the writer (notified_mark), carried to the target
// as bytes (a fixed kWriteMarkBytes), tested there (landed). Parts land in
// order on each engine connection but not across them, so only per-part
// counts say that every write before the mark is in place.
struct WriteMark {
  static constexpr uint32_t kMaxParts = 16;  // engines per endpoint
  uint32_t n = 0;         // engine connections the mark covers
  uint32_t reserved = 0;  // 0
  uint64_t parts[kMaxParts] = {};
};
constexpr size_t kWriteMarkBytes = sizeof(WriteMark);
static_assert(kWriteMarkBytes == 136, "a WriteMark travels as bytes");

// One buffer of a vectored transfer: [data, data + len) inside `mr`.
struct IoSlice {
  MrId mr = 0;
  void* data = nullptr;
  size_t len = 0;
};
// Where a vectored one-sided transfer's slice goes (or comes from) at the
// peer: `offset` bytes into an advertised region.
struct RemoteSlice {
  RegionDesc region;
  uint64_t offset = 0;
};
constexpr size_t kMaxSlices = 1024;  // slices in one vectored transfer

// A small message beside the transfers, e.g. to tell a reader that a
// one-sided write landed (it is sent after the write completed).
constexpr size_t kMaxNotifBytes = 256;
constexpr int kNotifSlots = 8;  // in flight per connection and direction
struct Notif {
  ConnHandle conn = 0;
  std::string data;
};
static_assert(kRegionDescBytes == 96, "RegionDesc travels as bytes");

// Thread-safe: calls from several threads are serialized by one lock (the
// engines run on their own cores; this lock guards only the tables).
// Progress: a receiver posts the later parts and segments of a long
// message, and GPU memory's staging copies move on, while it polls or
// waits on a transfer, so a side expecting messages keeps polling one of
// them (a blocking wait does).
class Endpoint {
 public:
  static Result<std::unique_ptr<Endpoint>> create(const Config& cfg);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // --- connections ---
  // Starts listening (port 0 picks one); returns the port.
  Result<uint16_t> listen(uint16_t port = 0);
  Result<ConnHandle> accept(int timeout_ms);
  Result<ConnHandle> connect(const std::string& ip, uint16_t port,
                             int timeout_ms);
  // "ip:port" a peer can connect to (listen() first), and its inverse.
  Result<std::string> metadata() const;
  Result<ConnHandle> connect_by_metadata(const std::string& metadata,
                                         int timeout_ms);
  // Fails the connection's outstanding transfers (kCancelled here,
  // kRemoteError at the peer).
  Status close(ConnHandle c);

  // --- memory ---
  // Host memory, or GPU memory where the endpoint has a GPU (two-sided
  // transfers only on the software NIC: it is staged through host buffers).
  Result<MrId> reg(void* addr, size_t len);
  Status dereg(MrId mr);
  // Lets the peer of any connection write and read [offset, offset + len)
  // of a registered region.
  // GPU memory on a NIC that cannot reach it (the software NIC): the peer
  // reaches a page-locked host shadow of the range instead, made here, in
  // step with GPU memory only at flush() and publish() (each advertise
  // makes its own shadow: advertise a range once).
  Result<RegionDesc> advertise(MrId mr, size_t offset, size_t len);
  // After peers' one-sided writes into advertised GPU memory (told by a
  // notification, say): brings them into GPU memory. Before peers read it:
  // publish() makes GPU memory's contents the ones they read. Both wait
  // for the copies; for host memory there is nothing to do (OK).
  Status flush(MrId mr);
  Status publish(MrId mr);

  // --- transfers (buffers inside `mr`; the handle is polled to done) ---
  Result<XferHandle> send_async(ConnHandle c, MrId mr, const void* data,
                                size_t len);
  // Takes the peer's next message (at most `capacity` bytes).
  Result<XferHandle> recv_async(ConnHandle c, MrId mr, void* data,
                                size_t capacity);
  // notify (host memory only): the peer counts the write's parts as they
  // land (notified_parts_landed), every byte of each part in place.
  Result<XferHandle> write_async(ConnHandle c, MrId mr, const void* src,
                                 size_t len, const RegionDesc& dst,
                                 uint64_t dst_offset, bool notify = false);
  Result<XferHandle> read_async(ConnHandle c, MrId mr, void* dst, size_t len,
                                const RegionDesc& src, uint64_t src_offset);
  // Vectored: one handle for many slices, done when all are (bytes: their
  // sum); the first error of any slice is the handle's. Every slice is
  // checked before any is posted. sendv sends each slice as its own
  // message, in order; recvv takes that many messages into its slices in
  // order. writev/readv move slice i to/from remote[i] (same counts).
  Result<XferHandle> sendv_async(ConnHandle c,
                                 const std::vector<IoSlice>& msgs);
  Result<XferHandle> recvv_async(ConnHandle c,
                                 const std::vector<IoSlice>& bufs);
  Result<XferHandle> writev_async(ConnHandle c, const std::vector<IoSlice>& src,
                                  const std::vector<RemoteSlice>& dst);
  Result<XferHandle> readv_async(ConnHandle c, const std::vector<IoSlice>& dst,
                                 const std::vector<RemoteSlice>& src);
  // Moves transfers along; true once `h` is done (bytes moved in *bytes),
  // after which the handle is spent. A failed transfer returns its error
  // (and is spent too); an unknown handle is InvalidArgument.
  Result<bool> poll(XferHandle h, size_t* bytes = nullptr);
  // poll() until done or timeout_ms (kTimedOut: the handle stays valid).
  Status wait(XferHandle h, int timeout_ms, size_t* bytes = nullptr);

  // --- notifications ---
  // Notifying writes without a message: a write is cut into parts (one per
  // engine connection it goes on), and both sides count parts. The writer
  // takes a mark of every notifying write posted on `c` so far and tells
  // it to the peer (in a message or notification, as bytes); once
  // landed(c, mark) there, every write behind the mark is in place, with
  // no acknowledgement's round trip. On the software NIC it is also final
  // (no copy lands again: the peer may rewrite the region at once); on a
  // verbs NIC in UC mode, the peer rewrites it only after the writer's
  // transfer completed (see Endpoint::write_async for what is and is not
  // covered). landed(): InvalidArgument for a mark of another connection's
  // shape. The totals below count parts on all engine connections: the
  // landed total reaching a sent total says as many parts landed, not
  // which (parts of later writes may be among them), so it proves the
  // earlier writes in place only where nothing was written since.
  Result<WriteMark> notified_mark(ConnHandle c);
  Result<bool> landed(ConnHandle c, const WriteMark& mark);
  Result<uint64_t> notified_parts_sent(ConnHandle c);
  Result<uint64_t> notified_parts_landed(ConnHandle c);
  // Whether parts counted as landed are final at the peer: no copy of them
  // lands afterwards (uccl::Endpoint::landed_writes_final).
  bool landed_writes_final() const;

  // Queues `data` (at most kMaxNotifBytes) to the peer; ResourceExhausted
  // while kNotifSlots are still in flight (the peer takes them with
  // get_notifs()).
  Status send_notif(ConnHandle c, const std::string& data);
  // Notifications that arrived, oldest first per connection.
  std::vector<Notif> get_notifs();

  // Device memory moved through staging buffers: copies started; copies
  // that overlapped the network (a send's copy started while an earlier
  // segment was still in flight, a receive posted while an earlier one
  // still copied out: the pipeline at work); bytes copied.
  struct StagingStats {
    uint64_t copies = 0;
    uint64_t overlapped = 0;
    uint64_t bytes = 0;
  };
  StagingStats staging_stats() const;

  int num_engines() const;
  // The engine each part of the connection's transfers runs on at this end
  // (part j on element j).
  Result<std::vector<int>> engines_of(ConnHandle c);
  // Engine connections dropped at accept: a malformed or contradicting
  // hello, none in hello_timeout_ms, or a group that never completed.
  uint64_t rejected_connections() const;
  // The engine endpoint underneath (statistics, NIC counters).
  uccl::Endpoint* engine_endpoint();

 private:
  struct Impl;
  explicit Endpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uccl::p2p
