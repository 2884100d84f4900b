// ChannelProxy: creation, start and stop, the thread's loop (and its drain
// at stop), triggers taken from the FIFO and checked, the send pipeline.
#include "channels/proxy.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "channels/proxy_internal.h"
#include "engine/engine_cores.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/gpu.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl::channels {

UCCL_DECLARE_KNOB(int64_t, knob_channel_timeout_ms);
UCCL_DECLARE_KNOB(int64_t, knob_channel_fifo_slots);
UCCL_DECLARE_KNOB(int64_t, knob_channel_piece_kb);
UCCL_DECLARE_KNOB(int64_t, knob_channel_buffers);
UCCL_DECLARE_KNOB(int64_t, knob_channel_proxy_core);
UCCL_DECLARE_KNOB(bool, knob_channel_signal_on_landing);
UCCL_DECLARE_KNOB(int64_t, knob_channel_write_min_kb);

namespace {

// [off, off + n) inside a region of `len` bytes, without overflow.
bool in_range(uint64_t off, uint64_t n, uint64_t len) {
  return off <= len && n <= len - off;
}

}  // namespace

ProxyConfig proxy_config_from_knobs() {
  ProxyConfig c;
  c.timeout_ns =
      static_cast<uint64_t>(knob_channel_timeout_ms().get()) * 1000000;
  c.fifo_slots = static_cast<uint32_t>(knob_channel_fifo_slots().get());
  c.piece_bytes = static_cast<size_t>(knob_channel_piece_kb().get()) << 10;
  c.buffers = static_cast<int>(knob_channel_buffers().get());
  c.write_min_bytes = static_cast<size_t>(knob_channel_write_min_kb().get())
                      << 10;
  c.core = static_cast<int>(knob_channel_proxy_core().get());
  c.signal_on_landing = knob_channel_signal_on_landing().get();
  return c;
}

Result<void*> HostMemory::alloc_host(size_t len) {
  void* p = std::aligned_alloc(
      4096, (std::max<size_t>(len, 1) + 4095) & ~size_t{4095});
  if (p == nullptr) return ResourceExhausted("out of host memory");
  return p;
}

void HostMemory::free_host(void* p) { std::free(p); }

Result<uint64_t> HostMemory::copy_async(void* dst, const void* src,
                                        size_t len) {
  std::memcpy(dst, src, len);
  return uint64_t{0};
}

Result<std::unique_ptr<ChannelProxy>> ChannelProxy::create(
    p2p::Endpoint* ep, const ProxyConfig& cfg) {
  if (ep == nullptr) return InvalidArgument("channels: no p2p endpoint");
  if (cfg.num_semaphores == 0 || cfg.piece_bytes == 0 || cfg.buffers < 1 ||
      cfg.piece_bytes > device::kMaxPutBytes) {
    return InvalidArgument(
        "channels: need semaphores, buffers and a piece size > 0");
  }
  if (cfg.num_semaphores - 1 > device::kMaxArg) {
    return InvalidArgument("channels: at most 2^31 semaphores");
  }
  std::unique_ptr<ChannelProxy> p(new ChannelProxy);
  p->cfg_ = cfg;
  p->ep_ = ep;
  p->on_landing_ = cfg.signal_on_landing && ep->landed_writes_final();
  if (cfg.device_memory) {
    p->dev_ = cfg.device_memory;
  } else if (cfg.gpu >= 0) {
    UCCL_ASSIGN_OR_RETURN(auto dev, p2p::open_cuda_memory(cfg.gpu));
    p->dev_ = std::move(dev);
  } else {
    p->dev_ = std::make_shared<HostMemory>();
  }
  FifoConfig fc;
  fc.slots = cfg.fifo_slots;
  fc.full_timeout_ns = cfg.timeout_ns;
  fc.placement = cfg.gpu >= 0 ? FifoPlacement::kGpu : FifoPlacement::kHost;
  fc.gpu = std::max(cfg.gpu, 0);
  UCCL_ASSIGN_OR_RETURN(p->fifo_, TriggerFifo::create(fc));
  return p;
}

ChannelProxy::~ChannelProxy() {
  (void)stop();
  for (const Mem& m : mems_) {
    if (m.mr) (void)ep_->dereg(m.mr);
  }
  for (auto& c : channels_) {
    if (c->tx_mr) (void)ep_->dereg(c->tx_mr);
    if (c->rx_mr) (void)ep_->dereg(c->rx_mr);
    if (c->tx) dev_->free_host(c->tx);
    if (c->rx) dev_->free_host(c->rx);
    if (c->block == nullptr) continue;
    if (cfg_.gpu >= 0) {
      (void)gpu_free_mapped(c->block);
    } else {
      std::free(c->block);
    }
  }
}

Status ChannelProxy::start() {
  if (started_) return InvalidArgument("channels: started already");
  for (auto& c : channels_) {
    for (int b = 0; b < cfg_.buffers; ++b) {
      Status st = post_recv(*c, b);
      if (st.ok()) continue;
      // Receives posted so far must not outlive our buffers.
      for (auto& d : channels_) (void)ep_->close(d->conn);
      return st.with_context("posting the channels' receives");
    }
  }
  started_ = true;
  claim_core();
  thread_ = std::thread([this] { run(); });
  return Status::OK();
}

// The proxy's core (ProxyConfig::core) against the engines': one that an
// engine of this process or of another UCCL process took is shared with a
// thread that spins, which slowed the ep demo 5-10x; said once, and the
// core is counted as used so endpoints this process makes later avoid it.
void ChannelProxy::claim_core() {
  if (cfg_.core < 0) return;
  const std::vector<int> taken = engine::cores_claimed_on_host();
  core_shared_ =
      std::find(taken.begin(), taken.end(), cfg_.core) != taken.end();
  if (core_shared_) {
    LOG(WARNING) << "channel proxy: core " << cfg_.core
                 << " is an engine's too (this process's or another UCCL "
                    "process's): the proxy shares it with a spinning "
                    "thread. Pin the proxy elsewhere "
                    "(UCCL_CHANNEL_PROXY_CORE) or place the engines "
                    "(UCCL_ENGINE_CORES).";
  }
  engine::use_cores({cfg_.core});
  core_claimed_ = true;
}

Status ChannelProxy::stop() {
  if (!thread_.joinable()) return Status::OK();
  stop_.store(true, std::memory_order_release);
  thread_.join();
  if (core_claimed_) engine::release_cores({cfg_.core});
  core_claimed_ = false;
  // Receives still posted into our buffers end with their connections.
  for (auto& c : channels_) (void)ep_->close(c->conn);
  return Status::OK();
}

Status ChannelProxy::channel_status(uint32_t channel) const {
  if (channel >= channels_.size()) {
    return InvalidArgument("channels: no channel " + std::to_string(channel));
  }
  const Channel& c = *channels_[channel];
  std::lock_guard<std::mutex> lock(c.mu);
  return c.error;
}

ChannelProxy::Stats ChannelProxy::stats() const {
  Stats s;
  s.triggers = stats_.triggers.load(std::memory_order_relaxed);
  s.puts = stats_.puts.load(std::memory_order_relaxed);
  s.signals = stats_.signals.load(std::memory_order_relaxed);
  s.flushes = stats_.flushes.load(std::memory_order_relaxed);
  s.put_bytes = stats_.put_bytes.load(std::memory_order_relaxed);
  s.bad_triggers = stats_.bad_triggers.load(std::memory_order_relaxed);
  s.bad_messages = stats_.bad_messages.load(std::memory_order_relaxed);
  s.writes = stats_.writes.load(std::memory_order_relaxed);
  s.signals_on_landing =
      stats_.signals_on_landing.load(std::memory_order_relaxed);
  s.signals_held_for_writes =
      stats_.signals_held_for_writes.load(std::memory_order_relaxed);
  return s;
}

void ChannelProxy::fail(Channel& c, const Status& st) {
  if (c.failed) return;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.error = st.with_context("channel " + std::to_string(c.id));
  }
  c.failed = true;
  __atomic_store_n(&c.shared->error, uint32_t{1}, __ATOMIC_RELEASE);
}

// ------------------------------------------------------------- the loop

// Once stop() asks, the loop goes on until everything already pushed has
// been taken from the FIFO, sent, and applied by the peer (a flush of the
// proxy's own behind it is answered), so a kernel's last put is not lost to
// the close that follows; or until the timeout passes (a dead peer).
void ChannelProxy::run() {
  if (cfg_.core >= 0) (void)pin_current_thread(cfg_.core);
  uint32_t idle = 0;
  uint64_t drain_until_ns = 0;
  for (;;) {
    // Read before this pass takes triggers: it sees every one pushed
    // before stop() was called.
    const bool stopping = stop_.load(std::memory_order_acquire);
    bool work = take_triggers();
    for (auto& c : channels_) {
      if (c->failed) continue;
      work |= stage(*c);
      work |= post_sends(*c);
      work |= progress_rx(*c);
    }
    if (stopping) {
      const uint64_t now = monotonic_ns();
      if (drain_until_ns == 0) drain_until_ns = now + cfg_.timeout_ns;
      if (!have_held_ && fifo_empty_) queue_drain_flushes();
      if (drained() || now > drain_until_ns) break;
    }
    idle = work ? 0 : idle + 1;
    if (idle > 256) std::this_thread::yield();
  }
}

// Behind everything a channel sent: a flush the peer answers once it has
// applied all of it (the ticket follows every trigger taken, so a kernel's
// earlier flush counts as answered too). Not counted in stats().
void ChannelProxy::queue_drain_flushes() {
  for (auto& c : channels_) {
    if (c->failed || !c->sent_any || c->drain_queued || c->ops.full()) {
      continue;
    }
    Op flush{};
    flush.kind = MsgKind::kFlush;
    flush.bytes = fifo_->popped();
    c->ops.push(flush);
    c->drain_queued = true;
    c->drain_ticket = flush.bytes;
  }
}

bool ChannelProxy::drained() const {
  if (have_held_ || !fifo_empty_) return false;
  for (const auto& c : channels_) {
    if (c->failed || !c->sent_any) continue;
    if (!c->drain_queued ||
        __atomic_load_n(&c->shared->flushed, __ATOMIC_ACQUIRE) <
            c->drain_ticket + 1) {
      return false;
    }
  }
  return true;
}

bool ChannelProxy::take_triggers() {
  bool any = false;
  for (int i = 0; i < 64; ++i) {
    if (!have_held_) {
      fifo_empty_ = !fifo_->pop(&held_);
      if (fifo_empty_) break;
      held_ticket_ = fifo_->popped() - 1;
      have_held_ = true;
      stats_.triggers.fetch_add(1, std::memory_order_relaxed);
    }
    if (!on_trigger(held_, held_ticket_)) break;  // its channel is full
    have_held_ = false;
    any = true;
  }
  return any;
}

Status ChannelProxy::check_trigger(const device::TriggerFields& f,
                                   const Channel& c) const {
  const bool put = f.op == device::TriggerOp::kPut ||
                   f.op == device::TriggerOp::kPutWithSignal;
  const bool signal = f.op == device::TriggerOp::kSignal ||
                      f.op == device::TriggerOp::kPutWithSignal;
  if (put) {
    if (f.src_mem >= mems_.size()) {
      return InvalidArgument("put from unknown memory " +
                             std::to_string(f.src_mem));
    }
    if (!in_range(f.src_off, f.bytes, mems_[f.src_mem].len)) {
      return OutOfRange("put reads past memory " + std::to_string(f.src_mem));
    }
    if (f.dst_mem >= c.peer_mem_len.size()) {
      return InvalidArgument("put into unknown peer memory " +
                             std::to_string(f.dst_mem));
    }
    if (!in_range(f.dst_off, f.bytes, c.peer_mem_len[f.dst_mem])) {
      return OutOfRange("put writes past peer memory " +
                        std::to_string(f.dst_mem));
    }
  }
  if (signal && f.arg >= c.peer_semaphores) {
    return OutOfRange("signal of semaphore " + std::to_string(f.arg) +
                      " (the peer has " + std::to_string(c.peer_semaphores) +
                      ")");
  }
  return Status::OK();
}

bool ChannelProxy::on_trigger(const device::Trigger& t, uint64_t ticket) {
  const device::TriggerFields f = device::decode_trigger(t);
  if (f.channel >= channels_.size()) {
    stats_.bad_triggers.fetch_add(1, std::memory_order_relaxed);
    return true;  // no channel to tell; dropped and counted
  }
  Channel& c = *channels_[f.channel];
  if (c.failed) return true;
  Status st = device::trigger_well_formed(t)
                  ? check_trigger(f, c)
                  : InvalidArgument("malformed trigger");
  if (!st.ok()) {
    stats_.bad_triggers.fetch_add(1, std::memory_order_relaxed);
    fail(c, st);
    return true;
  }
  Op op{};
  switch (f.op) {
    case device::TriggerOp::kPut:
    case device::TriggerOp::kPutWithSignal:
      op.kind = MsgKind::kPut;
      op.flags = f.op == device::TriggerOp::kPutWithSignal ? kSignalAfter : 0;
      op.sem = f.arg;
      op.dst_mem = f.dst_mem;
      op.dst_off = f.dst_off;
      op.src = mems_[f.src_mem].base + f.src_off;
      op.src_host = mems_[f.src_mem].host;
      op.src_mr = mems_[f.src_mem].mr;
      op.write = op.src_mr != 0 && c.peer_writable[f.dst_mem] &&
                 f.bytes >= cfg_.write_min_bytes;
      op.bytes = f.bytes;
      break;
    case device::TriggerOp::kSignal:
      op.kind = MsgKind::kSignal;
      op.sem = f.arg;
      break;
    default:  // kFlush
      op.kind = MsgKind::kFlush;
      op.bytes = ticket;
      break;
  }
  return enqueue(c, op);
}

bool ChannelProxy::enqueue(Channel& c, const Op& op) {
  if (c.ops.full()) return false;
  c.ops.push(op);
  c.sent_any = true;
  if (op.kind == MsgKind::kPut) {
    stats_.puts.fetch_add(1, std::memory_order_relaxed);
    stats_.put_bytes.fetch_add(op.bytes, std::memory_order_relaxed);
    if (op.flags & kSignalAfter) {
      stats_.signals.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (op.kind == MsgKind::kSignal) {
    stats_.signals.fetch_add(1, std::memory_order_relaxed);
  } else if (op.kind == MsgKind::kFlush) {
    stats_.flushes.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

// A put that goes one-sided: posted, its signal (if any) left as the next
// op. False while the channel has no room for another write.
bool ChannelProxy::post_write(Channel& c, Op& op) {
  if (c.writes.full()) return false;
  auto h =
      ep_->write_async(c.conn, op.src_mr, op.src, op.bytes,
                       c.peer_regions[op.dst_mem], op.dst_off, on_landing_);
  if (h.status().code() == StatusCode::kResourceExhausted) {
    return false;  // the endpoint's transfers are all in use: later
  }
  if (!h.ok()) {
    fail(c, h.status().with_context("writing to the peer"));
    return false;
  }
  c.writes.push(*h);
  stats_.writes.fetch_add(1, std::memory_order_relaxed);
  if (op.flags & kSignalAfter) {
    op.kind = MsgKind::kSignal;  // once the write landed (or is acknowledged)
    op.write = false;
  } else {
    c.ops.pop();
  }
  return true;
}

// Acknowledged writes, oldest first, off the channel's list.
bool ChannelProxy::reap_writes(Channel& c) {
  bool any = false;
  while (!c.writes.empty()) {
    auto done = ep_->poll(c.writes.front());
    if (!done.ok()) {
      fail(c, done.status().with_context("writing to the peer"));
      return true;
    }
    if (!*done) break;
    c.writes.pop();
    any = true;
  }
  return any;
}

// Ops in order: writes posted; messages into free send buffers (the
// header, and for a put the next piece's copy started). A flush waits for
// every earlier write's acknowledgement, and so does a signal unless
// landed writes are final (on_landing_): then it goes at once with a mark
// of the write parts sent so far (every earlier write is posted), and the
// peer holds it until they have landed there (apply()).
bool ChannelProxy::stage(Channel& c) {
  bool any = reap_writes(c);
  while (!c.ops.empty() && !c.failed) {
    Op& op = c.ops.front();
    if (op.kind == MsgKind::kPut && op.write) {
      if (!post_write(c, op)) break;
      any = true;
      continue;
    }
    const bool held_signal = op.kind == MsgKind::kSignal && !on_landing_;
    if ((held_signal || op.kind == MsgKind::kFlush) && !c.writes.empty()) {
      break;
    }
    if (c.free_bufs.empty() || c.pieces.full()) break;
    const int b = c.free_bufs.back();
    uint8_t* p = c.tx + static_cast<size_t>(b) * c.buf_bytes;
    MsgHdr h{kMsgMagic, op.kind, 0, 0, op.dst_mem, op.sem, 0, op.bytes};
    size_t mark_bytes = 0;
    if (op.kind == MsgKind::kSignal && on_landing_ && !c.writes.empty()) {
      // Every earlier write is posted: the mark covers them all.
      auto mark = ep_->notified_mark(c.conn);
      if (!mark.ok()) {
        fail(c, mark.status().with_context("marking the writes"));
        return true;
      }
      h.flags = kAfterLanded;
      h.bytes_or_ticket = p2p::kWriteMarkBytes;
      std::memcpy(p + sizeof(h), &*mark, p2p::kWriteMarkBytes);
      mark_bytes = p2p::kWriteMarkBytes;
      stats_.signals_on_landing.fetch_add(1, std::memory_order_relaxed);
    }
    size_t n = 0;
    bool signal_next = false;
    if (op.kind == MsgKind::kPut) {
      n = static_cast<size_t>(
          std::min<uint64_t>(cfg_.piece_bytes, op.bytes - op.done));
      h.dst_off = op.dst_off + op.done;
      h.bytes_or_ticket = n;
      // The peer applies messages in order but not the writes before them:
      // behind an unacknowledged write the signal goes as a message of its
      // own, which waits for the writes like any signal.
      signal_next = op.done + n == op.bytes && (op.flags & kSignalAfter) &&
                    !c.writes.empty();
      if (op.done + n == op.bytes && !signal_next) h.flags = op.flags;
    }
    std::memcpy(p, &h, sizeof(h));
    Piece pc{b, 0, false, sizeof(h) + n + mark_bytes, 0, false};
    if (n > 0 && op.src_host) {
      std::memcpy(p + sizeof(h), op.src + op.done, n);
    } else if (n > 0) {
      auto tok = dev_->copy_async(p + sizeof(h), op.src + op.done, n);
      if (!tok.ok()) {
        fail(c, tok.status().with_context("staging a put"));
        return true;
      }
      pc.copy = *tok;
      pc.copying = true;
    }
    c.free_bufs.pop_back();
    c.pieces.push(pc);
    op.done += n;
    if (signal_next) {
      op.kind = MsgKind::kSignal;  // stays first: staged once writes are in
    } else if (op.kind != MsgKind::kPut || op.done == op.bytes) {
      c.ops.pop();
    }
    any = true;
  }
  return any;
}

// Staged pieces posted in order once their copies are done; sent ones
// give their buffers back.
bool ChannelProxy::post_sends(Channel& c) {
  bool any = false;
  while (!c.pieces.empty() && c.pieces.front().posted) {
    Piece& pc = c.pieces.front();
    auto done = ep_->poll(pc.send);
    if (!done.ok()) {
      fail(c, done.status().with_context("sending to the peer"));
      return true;
    }
    if (!*done) break;
    c.free_bufs.push_back(pc.buf);
    c.pieces.pop();
    any = true;
  }
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    Piece& pc = c.pieces.at(i);
    if (pc.posted) continue;
    if (pc.copying) {
      auto done = dev_->copy_done(pc.copy);
      if (!done.ok()) {
        fail(c, done.status().with_context("staging a put"));
        return true;
      }
      if (!*done) break;
      pc.copying = false;
    }
    auto h = ep_->send_async(c.conn, c.tx_mr,
                             c.tx + static_cast<size_t>(pc.buf) * c.buf_bytes,
                             pc.len);
    if (h.status().code() == StatusCode::kResourceExhausted) break;  // later
    if (!h.ok()) {
      fail(c, h.status().with_context("sending to the peer"));
      return true;
    }
    pc.send = *h;
    pc.posted = true;
    any = true;
  }
  return any;
}

}  // namespace uccl::channels
