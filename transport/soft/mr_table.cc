// MrTable: writers take a mutex and publish slots with a seqlock; readers on
// the engine thread validate without locks. Pages are never freed before
// the table, so a reader never touches freed memory.
#include "transport/soft/mr_table.h"

namespace uccl::transport::soft {

MrTable::MrTable() {
  for (auto& p : pages_) p.store(nullptr, std::memory_order_relaxed);
}

MrTable::~MrTable() {
  for (auto& p : pages_) delete p.load(std::memory_order_relaxed);
}

MrTable::Slot* MrTable::slot(uint32_t index) const {
  Page* page = pages_[index / kPageSlots].load(std::memory_order_acquire);
  return page ? &page->slots[index % kPageSlots] : nullptr;
}

uint32_t MrTable::publish(Slot* s, uint32_t index, uint64_t addr, uint64_t len,
                          uint32_t access, uint32_t parent) {
  uint16_t gen =
      static_cast<uint16_t>(s->generation.load(std::memory_order_relaxed) + 1);
  if (gen == 0) gen = 1;
  s->generation.store(gen, std::memory_order_relaxed);
  uint32_t key = (static_cast<uint32_t>(gen) << 16) | index;
  // Seqlock without fences (TSan-friendly): the release stores of the
  // fields keep the odd sequence number before them.
  uint32_t seq = s->seq.load(std::memory_order_relaxed);
  s->seq.store(seq + 1, std::memory_order_relaxed);
  s->addr.store(addr, std::memory_order_release);
  s->len.store(len, std::memory_order_release);
  s->access.store(access, std::memory_order_release);
  s->parent.store(parent, std::memory_order_release);
  s->key.store(key, std::memory_order_release);
  s->seq.store(seq + 2, std::memory_order_release);
  return key;
}

void MrTable::clear(Slot* s) {
  uint32_t seq = s->seq.load(std::memory_order_relaxed);
  s->seq.store(seq + 1, std::memory_order_relaxed);
  s->key.store(0, std::memory_order_release);
  s->seq.store(seq + 2, std::memory_order_release);
}

Result<uint32_t> MrTable::add(uint64_t addr, uint64_t len, uint32_t access) {
  UCCL_ASSIGN_OR_RETURN(uint32_t index, reserve());
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = slot(index);
  s->reserved = false;
  return publish(s, index, addr, len, access, 0);
}

Result<uint32_t> MrTable::reserve() {
  std::lock_guard<std::mutex> lock(mu_);
  constexpr uint32_t kTotal = kPages * kPageSlots;
  for (uint32_t n = 0; n < kTotal; ++n) {
    uint32_t index = (next_hint_ + n) % kTotal;
    if (index == 0) continue;
    Page* page = pages_[index / kPageSlots].load(std::memory_order_relaxed);
    if (page == nullptr) {
      page = new Page();
      pages_[index / kPageSlots].store(page, std::memory_order_release);
    }
    Slot& s = page->slots[index % kPageSlots];
    if (s.reserved || s.key.load(std::memory_order_relaxed) != 0) continue;
    s.reserved = true;
    next_hint_ = index + 1;
    return index;
  }
  return ResourceExhausted("memory region table full (65535 regions per PD)");
}

uint32_t MrTable::rebind(uint32_t index, uint64_t addr, uint64_t len,
                         uint32_t access, uint32_t parent) {
  return publish(slot(index), index, addr, len, access, parent);
}

void MrTable::unbind(uint32_t index) { clear(slot(index)); }

void MrTable::release(uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = slot(index);
  clear(s);
  s->reserved = false;
}

void MrTable::remove(uint32_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = slot(key & 0xffff);
  if (s == nullptr || s->key.load(std::memory_order_relaxed) != key) return;
  clear(s);
}

bool MrTable::read(uint32_t key, uint64_t* base, uint64_t* size, uint32_t* acc,
                   uint32_t* parent) const {
  if (key == 0) return false;
  const Slot* s = slot(key & 0xffff);
  if (s == nullptr) return false;
  uint32_t seq1 = s->seq.load(std::memory_order_acquire);
  if (seq1 & 1) return false;  // being (de)registered right now
  // Acquire loads keep the second sequence read after the field reads.
  uint32_t k = s->key.load(std::memory_order_acquire);
  *base = s->addr.load(std::memory_order_acquire);
  *size = s->len.load(std::memory_order_acquire);
  *acc = s->access.load(std::memory_order_acquire);
  *parent = s->parent.load(std::memory_order_acquire);
  return s->seq.load(std::memory_order_relaxed) == seq1 && k == key;
}

MrTable::Check MrTable::check(uint32_t key, uint64_t addr, uint64_t len,
                              uint32_t need) const {
  uint64_t base, size;
  uint32_t acc, parent;
  if (!read(key, &base, &size, &acc, &parent)) return Check::kBadKey;
  if (parent != 0) {  // a window: its region must still be registered
    uint64_t pb, ps;
    uint32_t pa, pp;
    if (!read(parent, &pb, &ps, &pa, &pp)) return Check::kBadKey;
  }
  // Overflow-safe containment: addr >= base && addr + len <= base + size.
  if (addr < base || addr - base > size || len > size - (addr - base)) {
    return Check::kOutOfBounds;
  }
  if ((acc & need) != need) return Check::kNoAccess;
  return Check::kOk;
}

}  // namespace uccl::transport::soft
