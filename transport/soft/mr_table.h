// Memory-region table of a software-NIC protection domain: registration from
// any thread, lock-free validated lookups (seqlock per slot) on the datapath.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "uccl/status.h"

namespace uccl::transport::soft {

class MrTable {
 public:
  // Keys are (generation << 16) | slot, so a stale key of a freed slot does
  // not match its next occupant for 65535 re-registrations.
  static constexpr uint32_t kPageSlots = 256;
  static constexpr uint32_t kPages = 256;  // 65536 regions per PD

  enum class Check : uint8_t { kOk, kBadKey, kOutOfBounds, kNoAccess };

  MrTable();
  ~MrTable();

  // Thread-safe. Returns the key (used as both lkey and rkey).
  Result<uint32_t> add(uint64_t addr, uint64_t len, uint32_t access);
  void remove(uint32_t key);

  // Windows: a slot reserved for one owner thread, re-keyed without locks.
  Result<uint32_t> reserve();  // slot index, unbound
  // `parent` is the key of the region the window lies in: the window is
  // valid only while that key is (deregistering the region kills it).
  uint32_t rebind(uint32_t index, uint64_t addr, uint64_t len, uint32_t access,
                  uint32_t parent);  // new key
  void unbind(uint32_t index);
  void release(uint32_t index);

  // Lock-free: is [addr, addr+len) inside region `key` with all of `need`?
  Check check(uint32_t key, uint64_t addr, uint64_t len, uint32_t need) const;

 private:
  struct Slot {
    std::atomic<uint32_t> seq{0};  // odd while being written
    std::atomic<uint32_t> key{0};  // 0 = free
    std::atomic<uint64_t> addr{0};
    std::atomic<uint64_t> len{0};
    std::atomic<uint32_t> access{0};
    std::atomic<uint32_t> parent{0};  // window: its region's key; 0 = none
    // Writer-side only: under mu_, or by a window's single owner.
    std::atomic<uint16_t> generation{0};
    bool reserved = false;  // owned by a window (under mu_)
  };
  struct Page {
    Slot slots[kPageSlots];
  };
  Slot* slot(uint32_t index) const;
  static uint32_t publish(Slot* s, uint32_t index, uint64_t addr, uint64_t len,
                          uint32_t access, uint32_t parent);
  // Reads slot `key` consistently; false if the key is not current.
  bool read(uint32_t key, uint64_t* base, uint64_t* size, uint32_t* acc,
            uint32_t* parent) const;
  static void clear(Slot* s);

  std::atomic<Page*> pages_[kPages];
  std::mutex mu_;           // serialises writers
  uint32_t next_hint_ = 1;  // slot 0 unused so key 0 is never valid
};

}  // namespace uccl::transport::soft
