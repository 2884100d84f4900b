// ChannelProxy's receive side: messages from the peer's proxy, checked and
// applied in order (puts copied into place, then signals and flush answers).
#include <cstring>

#include "channels/proxy_internal.h"

namespace uccl::channels {

Status ChannelProxy::post_recv(Channel& c, int buf) {
  UCCL_ASSIGN_OR_RETURN(
      c.rx_bufs[buf].recv,
      ep_->recv_async(c.conn, c.rx_mr,
                      c.rx + static_cast<size_t>(buf) * c.buf_bytes,
                      c.buf_bytes));
  c.rx_bufs[buf].landed = false;
  c.rx_bufs[buf].held = false;
  c.rx_bufs[buf].copying = false;
  c.rx_bufs[buf].copied = false;
  return Status::OK();
}

// A message as it landed: `got` bytes in a receive buffer.
Status ChannelProxy::check_msg(const Channel& c, const MsgHdr& h,
                               size_t got) const {
  if (got < sizeof(MsgHdr) || h.magic != kMsgMagic || h.reserved != 0) {
    return InvalidArgument("not a channel message");
  }
  const size_t payload = got - sizeof(MsgHdr);
  switch (h.kind) {
    case MsgKind::kPut:
      if (h.flags & ~kSignalAfter) return InvalidArgument("unknown flags");
      if (h.bytes_or_ticket != payload) {
        return InvalidArgument("put length disagrees with its message");
      }
      if (h.dst_mem >= mems_.size() || h.dst_off > mems_[h.dst_mem].len ||
          payload > mems_[h.dst_mem].len - h.dst_off) {
        return OutOfRange("put outside memory " + std::to_string(h.dst_mem));
      }
      if ((h.flags & kSignalAfter) && h.sem >= cfg_.num_semaphores) {
        return OutOfRange("signal of semaphore " + std::to_string(h.sem));
      }
      return Status::OK();
    case MsgKind::kSignal: {
      // kAfterLanded: a p2p::WriteMark follows (landed() checks its shape).
      const size_t mark = h.flags == kAfterLanded ? p2p::kWriteMarkBytes : 0;
      if ((h.flags & ~kAfterLanded) || payload != mark ||
          (mark != 0 && h.bytes_or_ticket != mark) ||
          h.sem >= cfg_.num_semaphores) {
        return OutOfRange("bad signal");
      }
      return Status::OK();
    }
    case MsgKind::kFlush:
    case MsgKind::kFlushAck:
      if (payload != 0 || h.flags != 0) return InvalidArgument("bad flush");
      return Status::OK();
  }
  (void)c;
  return InvalidArgument("unknown message kind");
}

// The oldest buffer's message, landed (take_landed): true when it is
// finished (its buffer posted again), false while it waits (its copy
// running, the writes a signal follows not all landed, or no room to
// queue a flush's answer).
bool ChannelProxy::apply(Channel& c, int buf) {
  RxBuf& r = c.rx_bufs[buf];
  const uint8_t* p = c.rx + static_cast<size_t>(buf) * c.buf_bytes;
  MsgHdr h;
  std::memcpy(&h, p, sizeof(h));
  if (r.copying) {
    auto done = dev_->copy_done(r.copy);
    if (!done.ok()) {
      fail(c, done.status().with_context("copying a put into place"));
      return false;
    }
    if (!*done) return false;
    r.copying = false;
    r.copied = true;
    if (h.flags & kSignalAfter) {
      __atomic_fetch_add(&c.sems[h.sem], uint64_t{1}, __ATOMIC_RELEASE);
    }
  } else if (h.kind == MsgKind::kPut) {  // an empty put
    if (h.flags & kSignalAfter) {
      __atomic_fetch_add(&c.sems[h.sem], uint64_t{1}, __ATOMIC_RELEASE);
    }
  } else if (h.kind == MsgKind::kSignal) {
    if (h.flags & kAfterLanded) {  // the writes it follows, all landed?
      p2p::WriteMark mark;
      std::memcpy(&mark, p + sizeof(h), sizeof(mark));
      auto landed = ep_->landed(c.conn, mark);
      if (!landed.ok()) {
        fail(c, landed.status().with_context("the peer's write mark"));
        return false;
      }
      // The counts were read with acquire (the engine's release when each
      // write's last chunk was in place): the semaphore's release carries
      // that on to the kernel.
      if (!*landed) {  // it waits, and the messages after it
        if (!r.held) {
          r.held = true;
          stats_.signals_held_for_writes.fetch_add(1,
                                                   std::memory_order_relaxed);
        }
        return false;
      }
    }
    __atomic_fetch_add(&c.sems[h.sem], uint64_t{1}, __ATOMIC_RELEASE);
  } else if (h.kind == MsgKind::kFlush) {
    // Every earlier put of the peer is in place: answer behind our own.
    Op ack{};
    ack.kind = MsgKind::kFlushAck;
    ack.bytes = h.bytes_or_ticket;
    if (!enqueue(c, ack)) return false;
  } else {  // kFlushAck: our flush `ticket` is complete
    __atomic_store_n(&c.shared->flushed, h.bytes_or_ticket + 1,
                     __ATOMIC_RELEASE);
  }
  Status st = post_recv(c, buf);
  if (!st.ok()) {
    fail(c, st.with_context("posting a receive"));
    return false;
  }
  return true;
}

// Receive buffer `buf` (the oldest or one after it): its message if it
// has landed, checked; its put's copy started at once, ahead of the older
// messages' turn (copies run in order on the device's stream; only
// signals and flush answers wait for the copies before them).
bool ChannelProxy::take_landed(Channel& c, int buf) {
  RxBuf& r = c.rx_bufs[buf];
  if (!r.landed) {
    size_t got = 0;
    auto done = ep_->poll(r.recv, &got);
    if (!done.ok()) {
      fail(c, done.status().with_context("receiving from the peer"));
      return false;
    }
    if (!*done) return false;
    MsgHdr h;
    std::memcpy(&h, c.rx + static_cast<size_t>(buf) * c.buf_bytes,
                std::min(got, sizeof(h)));
    Status st = check_msg(c, h, got);
    if (!st.ok()) {
      stats_.bad_messages.fetch_add(1, std::memory_order_relaxed);
      fail(c, st.with_context("from the peer"));
      return false;
    }
    r.landed = true;  // the receive is spent
  }
  if (!r.copying && !r.copied) {
    const uint8_t* p = c.rx + static_cast<size_t>(buf) * c.buf_bytes;
    MsgHdr h;
    std::memcpy(&h, p, sizeof(h));
    const bool put = h.kind == MsgKind::kPut && h.bytes_or_ticket > 0;
    if (put && mems_[h.dst_mem].host) {  // in place now; apply() signals
      std::memcpy(mems_[h.dst_mem].base + h.dst_off, p + sizeof(h),
                  h.bytes_or_ticket);
      r.copied = true;
    } else if (put) {
      auto tok = dev_->copy_async(mems_[h.dst_mem].base + h.dst_off,
                                  p + sizeof(h), h.bytes_or_ticket);
      if (!tok.ok()) {
        fail(c, tok.status().with_context("copying a put into place"));
        return false;
      }
      r.copy = *tok;
      r.copying = true;
    }
  }
  return true;
}

bool ChannelProxy::progress_rx(Channel& c) {
  bool any = false;
  const size_t n = c.rx_bufs.size();
  // Messages that landed, oldest first: checked, their copies started.
  for (size_t k = 0; k < n && !c.failed; ++k) {
    if (!take_landed(c, static_cast<int>((c.rx_next + k) % n))) break;
  }
  // Then finished in order.
  for (size_t k = 0; k < n && !c.failed; ++k) {
    const int buf = static_cast<int>(c.rx_next);
    if (!c.rx_bufs[buf].landed || !apply(c, buf)) break;
    c.rx_next = (c.rx_next + 1) % n;
    any = true;
  }
  return any;
}

}  // namespace uccl::channels
