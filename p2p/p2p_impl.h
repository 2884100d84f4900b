// p2p::Endpoint::Impl: the engine endpoint, connections (one engine
// connection per stripe, grouped at accept), registrations and the pool of
// transfer slots, shared by the p2p/*.cc files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "uccl/p2p.h"
#include "uccl/striped.h"

namespace uccl::p2p {

// The first message on each engine connection of a p2p connection: which
// group it belongs to, its place in the group, and the sender's stripe.
struct ConnHello {
  static constexpr uint32_t kMagic = 0x55503243;  // "UP2C"
  uint32_t magic = kMagic;
  uint32_t group = 0;  // random per p2p connection at the connecting side
  uint16_t k = 0;      // data connections in the group (plus one for notifs)
  uint16_t index = 0;  // this one's place: 0..k-1 data, k notifications
  uint32_t reserved = 0;
  uint64_t stripe_bytes = 0;
};
static_assert(sizeof(ConnHello) == 24, "ConnHello is exchanged on the wire");

// A FIFO of transfer slots linked through Xfer::next_queued (a slot is in
// at most one), so queuing a transfer allocates nothing.
struct SlotFifo {
  static constexpr uint32_t kEnd = ~uint32_t{0};
  uint32_t head = kEnd, tail = kEnd;
  bool empty() const { return head == kEnd; }
};

struct P2pConn {
  std::vector<ConnId> conns;  // part j of every transfer goes on conns[j]
  // Parts of notifying writes posted on conns[j] (a WriteMark's parts).
  std::vector<uint64_t> notified_sent_each;
  std::unique_ptr<StripedConn> striped;
  size_t stripe_bytes = 0;
  bool closed = false;
  // Two-sided transfers the group has not taken yet, in call order per
  // direction (the group pairs messages FIFO, so later ones wait behind
  // them; a receive waiting for its segments never holds up a send).
  SlotFifo unposted[2];  // [0] sends, [1] receives
  // Notifications: messages on their own engine connection (its receives
  // stay posted, which would hold up a data connection's receive slots).
  // kNotifSlots receives stay posted (harvested in order, then posted
  // again) and as many sends may be in flight; one registered buffer.
  ConnId notif_conn = 0;
  std::unique_ptr<uint8_t[]> notif_buf;  // receive slots, then send slots
  MrHandle* notif_mh = nullptr;
  std::unique_ptr<Request[]> notif_reqs;  // receives, then sends
  int notif_rx_head = 0, notif_tx_next = 0;
  bool notif_rx_dead = false;
};
// Message tag of notifications ("NOTF"); the group's data messages use 0.
constexpr int kNotifTag = 0x4e4f5446;
// Handshake tags of a group's engine connections: data connection j of a
// group with rotation r (kDataConnTag + r * kMaxStripes + j) and its
// notification connection (kNotifConnTag + r). The acceptor places data
// connection j on its engine (r + j) mod n and notifications on r mod n:
// one peer's parts on distinct engines (up to n of them), and peers with
// fewer engines than the acceptor's, rotated by r (which the connector
// takes from a process-wide counter), over all of them. Left to the
// fewest-connections rule, an acceptor of several peers connecting at once
// could put two parts of one peer on one engine.
constexpr uint64_t kDataConnTag = 0x5032504400000000ull;  // "P2PD"
constexpr uint64_t kNotifConnTag = 0x503250404e4f5400ull;
constexpr int kTagRotations = 16;

// What a peer reaches of advertised device memory on a NIC that cannot
// reach it: page-locked host memory standing in for [off, off + len) of the
// registration, synchronized by flush() and publish().
struct Shadow {
  size_t off = 0, len = 0;
  uint8_t* host = nullptr;
  MrHandle* mh = nullptr;
};

struct Registration {
  MrHandle* mh = nullptr;  // null for device memory (staged)
  bool device = false;
  uintptr_t addr = 0;
  size_t len = 0;
  std::vector<Shadow> shadows;
  bool direct = false;  // device memory the NIC reaches (dma-buf)
};

// Two-sided transfers of a segment (stripe x engines) or more, and every
// one in device memory, go as a sequence of striped messages (segments):
// full ones, then one shorter (possibly empty) that ends the message, so a
// receiver tells the end without knowing the size. A sender keeps up to
// kSegWindow segments out; a receiver posts segment i + 1 once segment i
// arrived full. Device memory goes through a staging buffer per segment:
// copied in before a send is posted, copied out after a receive completes.
constexpr int kSegWindow = 4;
constexpr int kSegCtxs = 256;  // segments in flight per endpoint
enum class SegState : uint8_t { kCopyIn, kReady, kPosted, kCopyOut, kDone };
struct SegCtx {
  StripedRequest sreq;
  ConnHandle conn = 0;  // whose group the request belongs to
  SegState state = SegState::kDone;
  size_t off = 0;  // in the transfer
  size_t len = 0;  // send: bytes; receive: room
  int stage = -1;  // staging buffer, device memory only
  uint64_t copy = 0;
  Request oreqs[kMaxStripes];  // one-sided: a request per engine
  int noreqs = 0;
};

// kVec: a vectored transfer, whose slices are transfers of another kind
// (its children) chained from first_child.
enum class XferKind : uint8_t { kSend, kRecv, kWrite, kRead, kVec };
constexpr uint32_t kNoSlot = ~uint32_t{0};

// One transfer. Lives in the pool until polled done; its requests belong
// to the engines while pending.
struct Xfer {
  bool in_use = false;
  bool posted = false;  // two-sided: taken by the group (or refused)
  bool owned = false;   // its requests were handed to the engines
  Status error;         // why it failed, reported once it is done
  XferKind kind = XferKind::kSend;
  uint32_t gen = 0;  // handle = gen << 32 | slot
  ConnHandle conn = 0;
  uint8_t* data = nullptr;
  size_t len = 0;
  MrHandle* mh = nullptr;
  StripedRequest sreq;        // two-sided
  Request reqs[kMaxStripes];  // one-sided: one per part
  int nreqs = 0;
  // Vectored: the parent's children (a list through next_child) and the
  // bytes of those done; a child's parent (kNoSlot: none, a handle's own).
  uint32_t parent = kNoSlot;
  uint32_t first_child = kNoSlot;
  uint32_t next_child = kNoSlot;
  uint32_t next_queued = kNoSlot;  // the next in its SlotFifo
  size_t moved = 0;
  MrId mr = 0;
  // Two-sided in segments (see SegCtx): device memory, segment size, the
  // bytes handed to segments (sender) or received (receiver), whether the
  // last segment is made (sender) or arrived (receiver), and the segments
  // out, oldest first.
  bool device = false;
  bool notify = false;  // a write whose parts the peer counts as they land
  bool segmented = false;
  bool seg_last = false;
  bool seg_recv_out = false;  // receiver: a segment's receive is posted
  size_t seg_bytes = 0;
  size_t seg_next = 0;
  RemoteRegion remote;  // one-sided in segments: the peer's region
  uint64_t remote_off = 0;
  uint16_t seg_ring[kSegWindow] = {};
  int seg_head = 0, seg_count = 0;
};

// A connection accepted at the engine level whose hello has not arrived
// (into hello slot `slot` of the registered hello buffer).
struct PendingAccept {
  ConnId conn = 0;
  uint32_t slot = 0;
  uint64_t deadline_ns = 0;  // for the hello (monotonic)
  bool closing = false;      // expired: closed, its receive still ending
  Request req;
};

// Engine connections of one connecting peer's group, as their hellos come.
struct AcceptGroup {
  uint16_t k = 0;
  uint64_t stripe_bytes = 0;
  std::vector<ConnId> conns;  // by index; 0 = not yet
  int have = 0;
  uint64_t deadline_ns = 0;  // for the rest of the group (monotonic)
};

inline XferHandle handle_of(const Xfer& x, uint32_t slot) {
  return static_cast<uint64_t>(x.gen) << 32 | slot;
}

// One-sided parts: `len` split evenly (4 KiB-aligned cuts) over k
// connections, but no part under `min_part` unless the transfer is.
size_t one_sided_stripe(size_t len, int k, size_t min_part);

// Whether [remote_offset, remote_offset + len) lies in the advertised region.
Status check_remote(const RegionDesc& remote, uint64_t remote_offset,
                    size_t len);

struct Endpoint::Impl {
  Config cfg;
  // Declared before `ep` so they outlive it: the engines may write into the
  // requests until they stop.
  std::unique_ptr<Xfer[]> slots;
  uint32_t num_slots = 0;
  std::vector<uint32_t> free_slots;
  std::vector<std::unique_ptr<PendingAccept>> pending_accepts;
  std::vector<uint8_t> hello_bufs;  // registered: hellos being received
  MrHandle* hello_mh = nullptr;
  std::vector<uint32_t> free_hellos;
  // By (peer address, group id).
  std::map<std::pair<std::string, uint32_t>, AcceptGroup> groups;
  uint64_t rejected_hellos = 0;
  uint64_t hello_timeout_ns = 0;
  // Connections hold notification requests: they too outlive `ep`.
  std::map<ConnHandle, P2pConn> conns;
  std::unique_ptr<uccl::Endpoint> ep;
  std::mutex mu;
  uint16_t port = 0;
  ConnHandle next_conn = 1;
  std::map<MrId, Registration> mrs;
  MrId next_mr = 1;
  uint32_t next_group = 0;
  // Device memory and its staging buffers (registered once), segments.
  std::shared_ptr<DeviceMemory> dev;
  uint8_t* stage_base = nullptr;
  size_t stage_bytes = 0;
  MrHandle* stage_mh = nullptr;
  std::vector<int> free_stages;
  std::unique_ptr<SegCtx[]> segs;
  std::vector<uint16_t> free_segs;
  std::vector<uint32_t> seg_active;  // segmented transfers not yet polled done
  // Requests done for their caller while empty parts still finish (the
  // group's kAuto mode posts a short message with all K parts): their
  // transfer slots and segments are reused only once the group says so.
  std::vector<uint32_t> finishing_slots;
  std::vector<uint16_t> finishing_segs;
  Endpoint::StagingStats staging;

  // Validates that [p, p + len) lies inside registration `mr`.
  Result<MrHandle*> region_of(MrId mr, const void* p, size_t len) const;
  Result<P2pConn*> conn_of(ConnHandle c);
  Result<uint32_t> take_slot();
  void free_slot(uint32_t slot);
  Result<Xfer*> xfer_of(XferHandle h, uint32_t* slot);
  // Posts the connection's unposted two-sided transfers, in order, until
  // the group takes no more.
  Status post_unposted(P2pConn* pc);
  void post_queue(SlotFifo* q, P2pConn* pc);
  void enqueue(SlotFifo* q, uint32_t s);
  // A slot for a transfer on connection `c` of [data, data + len) inside
  // registration `mr` (checked); the caller holds `mu`.
  Result<uint32_t> new_xfer(XferKind kind, ConnHandle c, MrId mr,
                            const void* data, size_t len, P2pConn** pc);
  Result<XferHandle> post_two_sided(XferKind kind, ConnHandle c, MrId mr,
                                    const void* data, size_t len);
  Result<XferHandle> post_one_sided(XferKind kind, ConnHandle c, MrId mr,
                                    void* local, size_t len,
                                    const RegionDesc& remote,
                                    uint64_t remote_offset,
                                    bool notify = false);
  // Posts slot s's parts (a write or read new_xfer made); an error when
  // none could be posted (the slot is still taken).
  Status post_parts_one_sided(uint32_t s, P2pConn* pc, const RegionDesc& remote,
                              uint64_t remote_offset);
  // A write or read new_xfer made: its parts, or (device memory) its
  // segments through the staging buffers.
  Status post_one_sided_slot(uint32_t s, P2pConn* pc, const RegionDesc& remote,
                             uint64_t remote_offset);
  // Copies between a registration's device memory and its shadows and
  // waits (to_device: shadow -> device).
  Status sync_shadows(Registration* r, bool to_device);
  Status sync_mr(MrId mr, bool to_device);
  // GPU memory registered with the NIC directly (dma-buf); null where the
  // NIC or the device cannot (then it is staged).
  Result<MrHandle*> reg_direct(void* addr, size_t len);
  // advertise() of device memory: a shadow of [offset, offset + len) that
  // the peer reaches instead (the caller holds `mu`).
  Result<RegionDesc> advertise_shadow(Registration* r, size_t offset,
                                      size_t len);
  // Vectored transfers: `remote` (one per slice) for writes and reads.
  Result<XferHandle> post_vec(XferKind kind, ConnHandle c,
                              const std::vector<IoSlice>& v,
                              const std::vector<RemoteSlice>* remote);
  Result<bool> poll_vec(uint32_t slot, size_t* bytes);
  // Frees what finishing_slots / finishing_segs hold once reusable.
  void reap_finishing();
  // Returns a retired segment to the pool (or to finishing_segs).
  void free_seg(uint16_t gi);
  // Segments: allocation at create, and progress (p2p/segments.cc).
  Status init_staging();
  void free_staging();
  void start_segmented(uint32_t s, P2pConn* pc);
  // Moves every segmented transfer's copies and engine parts along.
  void progress_segments();
  // Makes and posts the segments of slot s (at the head of its group's
  // queue); true once all are posted (sender) or arrived (receiver).
  bool post_segments(uint32_t s, P2pConn* pc);
  Result<bool> poll_segmented(uint32_t s, size_t* bytes);
  // One segment's step (a finished copy or engine part moves it on); its
  // error if it failed (it is then kDone).
  Status step_segment(Xfer* x, SegCtx* g, P2pConn* pc);
  // Makes x's next segment if there is room; false when none was made.
  bool make_segment(Xfer* x);
  // Posts a one-sided segment's parts from `buf` (OK with *taken).
  Status post_segment_parts(Xfer& x, SegCtx* g, P2pConn* pc, uint8_t* buf,
                            MrHandle* mh, bool* taken);
  // Starts a copy for segment g of x; counts it.
  Result<uint64_t> stage_copy(const Xfer& x, void* dst, const void* src,
                              size_t len);
  // Advances the group of `pc` and reports whether slot's transfer is done.
  Result<bool> poll_locked(uint32_t slot, size_t* bytes);
  // A transfer done: frees its slot, then its error or true with *bytes.
  Result<bool> finish_xfer(uint32_t slot, size_t moved, size_t* bytes);
  Result<ConnHandle> add_conn(std::vector<ConnId> conns, size_t stripe);
  // Registers a connection's notification buffer and posts its receives.
  Status start_notifs(P2pConn* pc);
  Status post_notif_recv(P2pConn* pc, int slot);
  // accept(): takes engine connections, reads their hellos, and returns a
  // group once all its connections arrived (kUnavailable before).
  Result<ConnHandle> accept_step();
  Status take_new_accepts(uint64_t now);
  Result<ConnHandle> file_hello(ConnId conn, const ConnHello& h, bool ok,
                                uint64_t now);
  void expire_stale(uint64_t now);
};

}  // namespace uccl::p2p
