// Striped transfers (include/uccl/striped.h): a message's parts posted on
// K connections in one order at both ends, receive expansion, early ends.
#include "uccl/striped.h"

#include <thread>

#include "util/clock.h"

namespace uccl {

Result<std::unique_ptr<StripedConn>> StripedConn::create(
    Endpoint* ep, std::vector<ConnId> conns, size_t stripe_bytes,
    PartsMode mode, int max_requests) {
  if (ep == nullptr) return InvalidArgument("striped: no endpoint");
  if (conns.empty() || conns.size() > static_cast<size_t>(kMaxStripes)) {
    return InvalidArgument("striped: " + std::to_string(conns.size()) +
                           " connections (1.." + std::to_string(kMaxStripes) +
                           ")");
  }
  if (stripe_bytes == 0) return InvalidArgument("striped: stripe of 0 bytes");
  if (max_requests < 1) return InvalidArgument("striped: max_requests < 1");
  if (static_cast<uint8_t>(mode) > static_cast<uint8_t>(PartsMode::kAuto)) {
    return InvalidArgument("striped: unknown parts mode");
  }
  std::unique_ptr<StripedConn> g(new StripedConn);
  g->ep_ = ep;
  g->conns_ = std::move(conns);
  g->stripe_ = stripe_bytes;
  g->mode_ = mode;
  g->expand_size_ = max_requests;
  g->expand_.reset(new StripedRequest*[max_requests]);
  return g;
}

Status StripedConn::post_parts(StripedRequest* r) {
  while (r->posted_ < r->parts_) {
    const int j = r->posted_;
    size_t off, n;
    stripe_part(r->len_, j, k(), stripe_, &off, &n);
    void* p = r->base_ ? r->base_ + off : nullptr;
    MrHandle* mh = n ? r->mh_ : nullptr;
    Status st = r->is_send_ ? ep_->send_async(conns_[j], p, n, mh, &r->reqs_[j],
                                              r->tag_)
                            : ep_->recv_async(conns_[j], 1, &p, &n, &r->tag_,
                                              &mh, &r->reqs_[j]);
    if (st.code() == StatusCode::kResourceExhausted) break;  // later
    UCCL_RETURN_IF_ERROR(st);
    ++r->posted_;
  }
  backlog_ = r->posted_ < r->parts_ ? r : nullptr;
  return Status::OK();
}

Status StripedConn::expand_receives() {
  while (expand_count_ > 0 && backlog_ == nullptr) {
    StripedRequest* r = expand_[expand_head_];
    if (!r->all_parts_ && !r->reqs_[0].done()) break;
    expand_head_ = (expand_head_ + 1) % expand_size_;
    --expand_count_;
    r->expanding_ = false;
    if (r->all_parts_ ||
        (r->reqs_[0].status().ok() && r->reqs_[0].size(0) == stripe_)) {
      // All parts were due (queued behind an earlier message), or the
      // sender striped.
      r->parts_ = k();
      UCCL_RETURN_IF_ERROR(post_parts(r));
    }
  }
  return Status::OK();
}

bool StripedConn::next_all_parts(bool is_send, bool* wait) {
  *wait = false;
  if (k() < 2 || mode_ == PartsMode::kFirst) return false;
  if (mode_ == PartsMode::kAll) return true;
  const int dir = is_send ? 0 : 1;
  const int slot = static_cast<int>(seq_[dir] % kPartsHistory);
  if (striped_[dir][slot] < 0) {  // a receive whose part 0 may still be out
    StripedRequest* old = history_req_[slot];
    if (!old->reqs_[0].done()) {
      *wait = true;
      return false;
    }
    note_striped(old);
  }
  return striped_[dir][slot] == 1;
}

void StripedConn::note_posted(StripedRequest* r) {
  if (k() < 2) return;
  ++counters_.messages;
  if (r->all_parts_) ++counters_.all_parts_messages;
  if (mode_ != PartsMode::kAuto) return;
  const int dir = r->is_send_ ? 0 : 1;
  const int slot = static_cast<int>(seq_[dir] % kPartsHistory);
  r->seq_ = seq_[dir]++;
  if (r->is_send_) {
    striped_[0][slot] = r->len_ >= stripe_ ? 1 : 0;
  } else {
    striped_[1][slot] = -1;  // known once part 0 is done: note_striped
    history_req_[slot] = r;
  }
}

void StripedConn::note_striped(StripedRequest* r) {
  const int slot = static_cast<int>(r->seq_ % kPartsHistory);
  if (r->is_send_ || history_req_[slot] != r) return;
  // A sender stripes a message of at least a stripe, and its part 0 is
  // then exactly a stripe.
  striped_[1][slot] =
      r->reqs_[0].status().ok() && r->reqs_[0].size(0) == stripe_ ? 1 : 0;
  history_req_[slot] = nullptr;
}

Status StripedConn::send(StripedRequest* r, const void* data, size_t len,
                         MrHandle* mh, int tag, bool* taken) {
  *taken = false;
  if (!broken_.ok()) return broken_;
  if (backlog_) UCCL_RETURN_IF_ERROR(post_parts(backlog_));
  if (backlog_) return Status::OK();  // try again later
  bool wait_unused;
  r->is_send_ = true;
  r->expanding_ = false;
  r->finishing_ = false;
  r->all_parts_ = next_all_parts(true, &wait_unused);
  // Shorter than a stripe: whole, on connection 0, unless the receiver
  // posts all parts of this message at once.
  r->parts_ = !r->all_parts_ && len < stripe_ ? 1 : k();
  r->posted_ = 0;
  r->base_ = static_cast<uint8_t*>(const_cast<void*>(data));
  r->len_ = len;
  r->mh_ = mh;
  r->tag_ = tag;
  // Parts already posted on an error may still complete; the caller's
  // group is broken then anyway.
  UCCL_RETURN_IF_ERROR(post_parts(r));
  if (r->posted_ == 0) {  // nothing taken: the whole message again later
    backlog_ = nullptr;
    return Status::OK();
  }
  note_posted(r);
  *taken = true;
  return Status::OK();
}

Status StripedConn::recv(StripedRequest* r, void* data, size_t len,
                         MrHandle* mh, int tag, bool* taken) {
  *taken = false;
  if (!broken_.ok()) return broken_;
  if (backlog_) UCCL_RETURN_IF_ERROR(post_parts(backlog_));
  if (backlog_) return Status::OK();
  bool wait;
  const bool all_parts = next_all_parts(false, &wait);
  if (wait) return Status::OK();
  r->is_send_ = false;
  r->all_parts_ = all_parts;
  r->finishing_ = false;
  // Part 0 now and the rest once part 0 tells whether the sender striped,
  // unless all parts go now. They cannot where an earlier message still
  // waits to post its parts: each connection's receives must stay in
  // message order, so this one queues behind it.
  r->expanding_ = k() > 1 && (!all_parts || expand_count_ > 0);
  r->parts_ = r->expanding_ ? 1 : k();
  r->posted_ = 0;
  r->base_ = static_cast<uint8_t*>(data);
  r->len_ = len;
  r->mh_ = mh;
  r->tag_ = tag;
  UCCL_RETURN_IF_ERROR(post_parts(r));
  if (r->posted_ == 0) {
    backlog_ = nullptr;
    return Status::OK();
  }
  if (r->expanding_) {
    // At most max_requests requests are outstanding: the ring holds them.
    expand_[(expand_head_ + expand_count_++) % expand_size_] = r;
  }
  note_posted(r);
  *taken = true;
  return Status::OK();
}

Status StripedConn::progress() {
  if (!broken_.ok()) return broken_;
  if (backlog_) UCCL_RETURN_IF_ERROR(post_parts(backlog_));
  if (expand_count_ > 0) UCCL_RETURN_IF_ERROR(expand_receives());
  return Status::OK();
}

Status StripedConn::test(StripedRequest* r, bool* done, size_t* bytes) {
  *done = false;
  UCCL_RETURN_IF_ERROR(progress());
  if (r->expanding_) return Status::OK();
  // A message shorter than a stripe posted with all K parts is done with
  // part 0 (`early`); its empty rest finishes in the background. Part 0 is
  // read once here, so such a message is always reported that way.
  if (r->posted_ == 0 || !r->reqs_[0].done()) return Status::OK();
  const bool early = r->all_parts_ && r->parts_ > 1 &&
                     (r->is_send_ ? r->len_ < stripe_
                                  : !r->reqs_[0].status().ok() ||
                                        r->reqs_[0].size(0) < stripe_);
  int whole = r->parts_;  // parts this completion is made of
  if (early) {
    whole = 1;
  } else {
    if (r->posted_ < r->parts_) return Status::OK();
    for (int j = 1; j < r->parts_; ++j) {
      if (!r->reqs_[j].done()) return Status::OK();
    }
  }
  *done = true;
  note_striped(r);
  Status st;
  size_t total = 0;
  for (int j = 0; j < whole; ++j) {
    if (st.ok()) st = r->reqs_[j].status();
    total += r->reqs_[j].size(0);
  }
  *bytes = r->is_send_ ? r->len_ : total;
  if (whole < r->parts_) {
    ++counters_.early_messages;
    r->finishing_ = true;
  }
  return st;
}

bool StripedConn::reusable(StripedRequest* r) {
  if (!r->finishing_) return true;
  if (r->posted_ < r->parts_) return false;  // the backlog: parts to post
  for (int j = 1; j < r->parts_; ++j) {
    if (!r->reqs_[j].done()) return false;
  }
  for (int j = 1; j < r->parts_ && broken_.ok(); ++j) {
    Status st = r->reqs_[j].status();
    if (st.ok() && !r->is_send_ && r->reqs_[j].size(0) != 0) {
      st = ProtocolError("part " + std::to_string(j) + " of a message that " +
                         "fit its first part brought " +
                         std::to_string(r->reqs_[j].size(0)) + " bytes");
    }
    if (!st.ok()) broken_ = st.with_context("a part finishing late");
  }
  r->finishing_ = false;
  return true;
}

void StripedConn::wait_released(StripedRequest* r, uint64_t until_ns) {
  for (int j = 0; j < r->posted_; ++j) {
    while (!r->reqs_[j].done() && monotonic_ns() < until_ns) {
      std::this_thread::yield();
    }
  }
}

}  // namespace uccl
