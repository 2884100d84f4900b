// The channel proxy: one pinned thread per GPU drains the trigger FIFO and
// turns each trigger into messages to the peer's proxy over a p2p connection.
//
// How a put travels (the software NIC cannot reach GPU memory): the source
// range is copied into one of the channel's page-locked send buffers behind
// a MsgHdr (channels/wire.h), sent as one p2p message, received into one of
// the peer channel's posted buffers and copied from there into the
// destination. Large puts go in pieces of `piece_bytes`. Each side handles
// its channel's messages in order, so a signal or flush is acted on only
// after every earlier put's copy into the destination has finished: a
// signal raises the peer's semaphore then, and a flush is answered then.
// Every trigger is checked before anything moves (channel, op, memory ids,
// ranges against both sides' tables, semaphore) and every message again
// where it lands; a bad one is dropped, counted and recorded in its
// channel, whose waiters then return kChannelFailed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "channels/fifo.h"
#include "channels/wire.h"
#include "uccl/device/channel.h"
#include "uccl/p2p.h"
#include "uccl/p2p_device.h"

namespace uccl::channels {

struct ProxyConfig {
  // GPU whose kernels push; -1: the CPU stand-in (host memory everywhere,
  // copies by memcpy), for tests and machines without a GPU.
  int gpu = -1;
  uint32_t fifo_slots = 4096;
  uint32_t num_semaphores = 64;          // per channel
  size_t piece_bytes = size_t{1} << 20;  // largest message payload
  int buffers = 8;  // send and receive buffers per channel, each
  // A put of at least this many bytes from host memory into the peer's
  // host memory goes as a one-sided write, no copy at either end (its
  // signal, and any later signal, once the write has landed or is
  // acknowledged: signal_on_landing; a later flush once it is
  // acknowledged); 0: every put goes as messages.
  size_t write_min_bytes = size_t{128} << 10;
  // Where the endpoint's landed writes are final (its NIC drops every later
  // copy: p2p::Endpoint::landed_writes_final), a signal behind writes goes
  // at once, carrying a p2p::WriteMark of the writes it follows; the peer
  // raises the semaphore once they have landed, rather than this side
  // waiting for the writes' acknowledgements first (a round trip). Flushes
  // still wait for the acknowledgements. false: signals always wait.
  bool signal_on_landing = true;
  uint64_t timeout_ns = 5000000000ull;  // FIFO full, wait, flush
  int core = -1;  // pin the proxy thread here; -1: unpinned
  // How GPU memory is copied; null: CUDA's runtime for `gpu`.
  std::shared_ptr<p2p::DeviceMemory> device_memory;
};

// ProxyConfig from the UCCL_CHANNEL_* knobs (channels/knobs.cc).
ProxyConfig proxy_config_from_knobs();

class ChannelProxy {
 public:
  static Result<std::unique_ptr<ChannelProxy>> create(p2p::Endpoint* ep,
                                                      const ProxyConfig& cfg);
  ~ChannelProxy();  // stops the thread
  ChannelProxy(const ChannelProxy&) = delete;
  ChannelProxy& operator=(const ChannelProxy&) = delete;

  // Before start(): memory puts read from or write into, by id (0, 1, ...).
  // Host memory (a kernel's mapped page-locked buffers, say) is copied to
  // and from the send and receive buffers by the proxy thread itself, or
  // written one-sided (write_min_bytes): it is registered with the
  // endpoint and advertised to the peer. Device memory goes through the
  // device's copies (ProxyConfig::device_memory).
  Result<uint32_t> register_memory(void* p, size_t len);
  // This side's memory table for the peer's add_channel: ids, sizes and,
  // for host memory, the region the peer's writes land in (so it differs
  // between processes: swap it, channels/wire.h).
  std::string descriptor() const;
  // Before start(): a channel over `conn` (one channel per connection) to
  // the peer whose descriptor() is `peer`. Returns its id. The channel
  // takes the connection over: nothing else may transfer on it once
  // start() runs, and stop() closes it.
  Result<uint32_t> add_channel(p2p::ConnHandle conn, const std::string& peer);
  // add_channel with the descriptors swapped over `conn` itself (8 bytes
  // of length, then the descriptor, each way): both sides call it at the
  // same time, after registering their memory. A peer that sends no
  // descriptor within timeout_ms, or a malformed one, fails it and closes
  // the connection.
  Result<uint32_t> open_channel(p2p::ConnHandle conn, int timeout_ms);
  Result<device::ChannelHandle> handle(uint32_t channel) const;

  Status start();
  // Sends what was pushed before it and waits until the peer has applied
  // it (at most ProxyConfig::timeout_ns), then stops the thread and closes
  // the channels' connections.
  Status stop();
  // OK, or what failed the channel (a bad trigger or message, the peer).
  Status channel_status(uint32_t channel) const;
  // Whether start() found the proxy's core (ProxyConfig::core) taken by an
  // engine, of this process or (UCCL_CORE_LOCK_DIR) another UCCL process:
  // they share it, and a warning said so.
  bool core_shared() const { return core_shared_; }
  // The FIFO's own failure (a producer found it full past the timeout).
  uint32_t fifo_error() const { return fifo_->error(); }

  struct Stats {
    uint64_t triggers = 0, puts = 0, signals = 0, flushes = 0;
    uint64_t put_bytes = 0, bad_triggers = 0, bad_messages = 0;
    uint64_t writes = 0;  // puts that went as one-sided writes
    // Signals sent ahead of the acknowledgements of the writes they follow
    // (signal_on_landing), and those the peer held until the writes landed.
    uint64_t signals_on_landing = 0, signals_held_for_writes = 0;
  };
  Stats stats() const;

 private:
  struct Mem {
    uint8_t* base;
    size_t len;
    bool host;  // host memory (page-locked or mapped): copied by memcpy
    // Host memory registered with the endpoint (writes go from and into
    // it): its id and the region the peer writes into.
    p2p::MrId mr;
    p2p::RegionDesc region;
  };
  struct Channel;
  struct Op;
  ChannelProxy() = default;
  void run();
  bool take_triggers();
  void queue_drain_flushes();
  bool drained() const;
  bool on_trigger(const device::Trigger& t, uint64_t ticket);
  Status check_trigger(const device::TriggerFields& f, const Channel& c) const;
  Status parse_peer(const std::string& peer, Channel* c) const;
  bool enqueue(Channel& c, const Op& op);
  bool stage(Channel& c);
  bool post_write(Channel& c, Op& op);
  bool reap_writes(Channel& c);
  bool post_sends(Channel& c);
  bool progress_rx(Channel& c);
  bool take_landed(Channel& c, int buf);
  Status post_recv(Channel& c, int buf);
  Status check_msg(const Channel& c, const MsgHdr& h, size_t got) const;
  bool apply(Channel& c, int buf);
  void fail(Channel& c, const Status& st);
  void claim_core();

  ProxyConfig cfg_;
  p2p::Endpoint* ep_ = nullptr;
  // signal_on_landing, where the endpoint's landed writes are final: every
  // write counted at the peer (notify), signals not held for the writes.
  bool on_landing_ = false;
  std::shared_ptr<p2p::DeviceMemory> dev_;
  std::unique_ptr<TriggerFifo> fifo_;
  std::vector<Mem> mems_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
  bool core_shared_ = false;   // start(): an engine took the proxy's core
  bool core_claimed_ = false;  // counted as used until stop()
  bool have_held_ = false;     // a trigger whose channel's queue was full
  bool fifo_empty_ = true;     // the last pop found nothing
  device::Trigger held_{};
  uint64_t held_ticket_ = 0;
  struct {
    std::atomic<uint64_t> triggers{0}, puts{0}, signals{0}, flushes{0};
    std::atomic<uint64_t> put_bytes{0}, bad_triggers{0}, bad_messages{0};
    std::atomic<uint64_t> writes{0};
    std::atomic<uint64_t> signals_on_landing{0}, signals_held_for_writes{0};
  } stats_;
};

}  // namespace uccl::channels
