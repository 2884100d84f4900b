// p2p two-sided transfers in segments (see SegCtx in p2p/p2p_impl.h): long
// messages spread evenly over every engine, and device memory staged
// through page-locked buffers with copies overlapping the network.
#include <algorithm>
#include <string>

#include "p2p/p2p_impl.h"

namespace uccl::p2p {

Status Endpoint::Impl::init_staging() {
  segs.reset(new SegCtx[kSegCtxs]);
  for (int i = kSegCtxs; i > 0; --i) {
    free_segs.push_back(static_cast<uint16_t>(i - 1));
  }
  if (dev == nullptr) return Status::OK();
  if (cfg.staging_buffers < 2) {
    return InvalidArgument("staging_buffers must be at least 2");
  }
  stage_bytes = cfg.stripe_bytes * static_cast<size_t>(cfg.num_cpus);
  const size_t total = stage_bytes * static_cast<size_t>(cfg.staging_buffers);
  UCCL_ASSIGN_OR_RETURN(void* p, dev->alloc_host(total));
  stage_base = static_cast<uint8_t*>(p);
  Result<MrHandle*> mh = ep->reg_mr(stage_base, total);
  if (!mh.ok()) {
    free_staging();
    return mh.status();
  }
  stage_mh = *mh;
  for (int i = cfg.staging_buffers; i > 0; --i) free_stages.push_back(i - 1);
  return Status::OK();
}

void Endpoint::Impl::free_staging() {
  if (stage_base != nullptr) dev->free_host(stage_base);
  stage_base = nullptr;
}

void Endpoint::Impl::start_segmented(uint32_t s, P2pConn* pc) {
  Xfer& x = slots[s];
  x.seg_bytes = pc->stripe_bytes * pc->conns.size();
  // Two-sided: long messages and all in device memory (even empty: the
  // receiver's framing). One-sided: device memory that has bytes to move.
  const bool two_sided = x.kind == XferKind::kSend || x.kind == XferKind::kRecv;
  x.segmented =
      two_sided ? x.device || x.len >= x.seg_bytes : x.device && x.len > 0;
  x.seg_last = x.seg_recv_out = false;
  x.seg_next = 0;
  x.seg_head = x.seg_count = 0;
  if (x.segmented) seg_active.push_back(s);
}

namespace {

uint8_t* stage_ptr(uint8_t* base, size_t bytes, int stage) {
  return base + static_cast<size_t>(stage) * bytes;
}

bool one_sided(const Xfer& x) {
  return x.kind == XferKind::kWrite || x.kind == XferKind::kRead;
}

// Whether x's data goes out of this side (copied in before it is posted).
bool outgoing(const Xfer& x) {
  return x.kind == XferKind::kSend || x.kind == XferKind::kWrite;
}

}  // namespace

Status Endpoint::Impl::step_segment(Xfer* x, SegCtx* g, P2pConn* pc) {
  Endpoint::Impl* im = this;
  if (g->state == SegState::kCopyIn || g->state == SegState::kCopyOut) {
    Result<bool> done = im->dev->copy_done(g->copy);
    if (!done.ok() || !*done) {
      if (!done.ok()) g->state = SegState::kDone;
      return done.status();
    }
    g->state =
        g->state == SegState::kCopyIn ? SegState::kReady : SegState::kDone;
    return Status::OK();
  }
  if (g->state != SegState::kPosted) return Status::OK();
  bool done = false;
  size_t moved = 0;
  Status st;
  if (one_sided(*x)) {
    for (int j = 0; j < g->noreqs; ++j) {
      if (!g->oreqs[j].done()) return Status::OK();
    }
    done = true;
    moved = g->len;
    for (int j = 0; j < g->noreqs && st.ok(); ++j) st = g->oreqs[j].status();
  } else {
    st = pc->striped->test(&g->sreq, &done, &moved);
    if (!done) return Status::OK();
  }
  g->state = SegState::kDone;
  if (x->kind == XferKind::kRecv) x->seg_recv_out = false;
  if (!st.ok()) return st;
  if (outgoing(*x)) return Status::OK();
  if (x->kind == XferKind::kRecv) {
    x->seg_next += moved;
    if (moved < x->seg_bytes) x->seg_last = true;  // the message's last
  }
  if (x->device && moved > 0) {
    Result<uint64_t> c =
        stage_copy(*x, x->data + g->off,
                   stage_ptr(im->stage_base, im->stage_bytes, g->stage), moved);
    if (!c.ok()) return c.status();
    g->copy = *c;
    g->state = SegState::kCopyOut;
  }
  return Status::OK();
}

Result<uint64_t> Endpoint::Impl::stage_copy(const Xfer& x, void* dst,
                                            const void* src, size_t len) {
  UCCL_ASSIGN_OR_RETURN(uint64_t token, dev->copy_async(dst, src, len));
  ++staging.copies;
  staging.bytes += len;
  // A send's copy started while an earlier segment still copies in or is
  // on the network: the sending side's overlap.
  for (int i = 0; outgoing(x) && i < x.seg_count; ++i) {
    if (segs[x.seg_ring[(x.seg_head + i) % kSegWindow]].state !=
        SegState::kDone) {
      ++staging.overlapped;
      break;
    }
  }
  return token;
}

void Endpoint::Impl::free_seg(uint16_t gi) {
  if (segs[gi].sreq.finishing()) {
    finishing_segs.push_back(gi);
  } else {
    free_segs.push_back(gi);
  }
}

void Endpoint::Impl::progress_segments() {
  for (uint32_t s : seg_active) {
    Xfer& x = slots[s];
    P2pConn& pc = conns[x.conn];
    // One-sided segments wait in no queue: made and posted from here.
    if (one_sided(x) && !x.posted && post_segments(s, &pc)) x.posted = true;
    for (int i = 0; i < x.seg_count; ++i) {
      SegCtx& g = segs[x.seg_ring[(x.seg_head + i) % kSegWindow]];
      Status st = step_segment(&x, &g, &pc);
      if (!st.ok() && x.error.ok()) x.error = st;
      if (!st.ok()) x.seg_last = true;  // make no more
    }
    // Retire finished segments in order, with their staging buffers.
    while (x.seg_count > 0) {
      const uint16_t gi = x.seg_ring[x.seg_head];
      SegCtx& g = segs[gi];
      if (g.state != SegState::kDone) break;
      if (g.stage >= 0) free_stages.push_back(g.stage);
      g.stage = -1;
      free_seg(gi);
      x.seg_head = (x.seg_head + 1) % kSegWindow;
      --x.seg_count;
    }
  }
}

bool Endpoint::Impl::make_segment(Xfer* x) {
  Endpoint::Impl* im = this;
  const bool recv = x->kind == XferKind::kRecv;
  if (x->seg_last || x->seg_count == kSegWindow || im->free_segs.empty() ||
      (recv && x->seg_recv_out) || (x->device && im->free_stages.empty())) {
    return false;
  }
  if (x->device && x->seg_bytes > im->stage_bytes) {
    // The connecting side's stripe sets the segment: one larger than this
    // side's staging buffers cannot be staged here.
    if (x->error.ok()) {
      x->error = InvalidArgument(
          "segments of " + std::to_string(x->seg_bytes) +
          " bytes (the connecting side's stripe_bytes x engines) exceed this "
          "side's staging buffers of " +
          std::to_string(im->stage_bytes));
    }
    x->seg_last = true;
    return false;
  }
  const uint16_t gi = im->free_segs.back();
  SegCtx& g = im->segs[gi];
  g.conn = x->conn;
  g.off = x->seg_next;
  g.len = std::min(x->seg_bytes, x->len - g.off);
  g.stage = -1;
  g.state = SegState::kReady;
  if (x->device) {
    g.stage = im->free_stages.back();
    if (outgoing(*x) && g.len > 0) {
      Result<uint64_t> c =
          stage_copy(*x, stage_ptr(im->stage_base, im->stage_bytes, g.stage),
                     x->data + g.off, g.len);
      if (!c.ok()) {
        if (x->error.ok()) x->error = c.status();
        x->seg_last = true;
        return false;
      }
      g.copy = *c;
      g.state = SegState::kCopyIn;
    }
    im->free_stages.pop_back();
  }
  im->free_segs.pop_back();
  if (recv) {
    x->seg_recv_out = true;
  } else {
    x->seg_next += g.len;
    // A message ends with a segment shorter than a full one (sends); a
    // one-sided transfer simply ends with its last byte.
    if (one_sided(*x) ? x->seg_next == x->len : g.len < x->seg_bytes) {
      x->seg_last = true;
    }
  }
  x->seg_ring[(x->seg_head + x->seg_count) % kSegWindow] = gi;
  ++x->seg_count;
  return true;
}

Status Endpoint::Impl::post_segment_parts(Xfer& x, SegCtx* g, P2pConn* pc,
                                          uint8_t* buf, MrHandle* mh,
                                          bool* taken) {
  // Cut evenly over the engines, as unstaged ones are.
  const int k = static_cast<int>(pc->conns.size());
  const size_t stripe = one_sided_stripe(g->len, k, 0);
  g->noreqs = 0;
  for (int j = 0; j < k; ++j) {
    size_t off = 0, n = 0;
    stripe_part(g->len, j, k, stripe, &off, &n);
    if (n == 0) continue;
    const uint64_t at = x.remote_off + g->off + off;
    Request* r = &g->oreqs[g->noreqs];
    Status st =
        x.kind == XferKind::kWrite
            ? ep->write_async(pc->conns[j], buf + off, n, mh, x.remote, at, r)
            : ep->read_async(pc->conns[j], buf + off, n, mh, x.remote, at, r);
    if (!st.ok()) {
      // Parts already out finish on their own; wait for them as well.
      if (g->noreqs == 0) return st;
      if (x.error.ok()) x.error = st;
      x.seg_last = true;
      break;
    }
    ++g->noreqs;
  }
  *taken = true;
  return Status::OK();
}

bool Endpoint::Impl::post_segments(uint32_t s, P2pConn* pc) {
  Xfer& x = slots[s];
  const bool send = x.kind == XferKind::kSend;
  const bool recv = x.kind == XferKind::kRecv;
  while (make_segment(&x)) {
  }
  // Post ready segments in order; one still copying in holds the rest.
  for (int i = 0; i < x.seg_count; ++i) {
    SegCtx& g = segs[x.seg_ring[(x.seg_head + i) % kSegWindow]];
    if (g.state == SegState::kCopyIn) break;
    if (g.state != SegState::kReady) continue;
    uint8_t* buf = g.stage >= 0 ? stage_ptr(stage_base, stage_bytes, g.stage)
                                : x.data + g.off;
    MrHandle* mh = g.stage >= 0 ? stage_mh : x.mh;
    bool taken = false;
    Status st = one_sided(x) ? post_segment_parts(x, &g, pc, buf, mh, &taken)
                : send ? pc->striped->send(&g.sreq, buf, g.len, mh, 0, &taken)
                       : pc->striped->recv(&g.sreq, buf, g.len, mh, 0, &taken);
    if (!st.ok()) {
      g.state = SegState::kDone;
      if (x.error.ok()) x.error = st;
      x.seg_last = true;
      if (recv) x.seg_recv_out = false;
      continue;
    }
    if (!taken) break;
    g.state = SegState::kPosted;
    // A receive posted while an earlier segment still copies out: the
    // receiving side's overlap.
    for (int j = 0; !outgoing(x) && x.device && j < i; ++j) {
      if (segs[x.seg_ring[(x.seg_head + j) % kSegWindow]].state ==
          SegState::kCopyOut) {
        ++staging.overlapped;
        break;
      }
    }
  }
  if (!x.seg_last) return false;
  if (recv) return !x.seg_recv_out;
  for (int i = 0; i < x.seg_count; ++i) {
    const SegState st = segs[x.seg_ring[(x.seg_head + i) % kSegWindow]].state;
    if (st == SegState::kCopyIn || st == SegState::kReady) return false;
  }
  return true;
}

Result<bool> Endpoint::Impl::poll_segmented(uint32_t s, size_t* bytes) {
  Xfer& x = slots[s];
  if (!x.posted || x.seg_count > 0) return false;
  seg_active.erase(std::find(seg_active.begin(), seg_active.end(), s));
  return finish_xfer(s, x.seg_next, bytes);
}

}  // namespace uccl::p2p
