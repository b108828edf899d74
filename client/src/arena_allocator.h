// First-fit allocator over the client's shared arena. Owned by one Client, called under its lock.
// Works in offsets so the same numbers travel in ring entries; never touches the memory itself.
#ifndef SYNCD_CLIENT_ARENA_ALLOCATOR_H_
#define SYNCD_CLIENT_ARENA_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>

namespace syncd::client {

class ArenaAllocator {
 public:
  ArenaAllocator(uint64_t bytes, uint64_t alignment);

  // Offset of a block of at least `bytes` (0 bytes gets a minimal block), or nullopt when full.
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Returns false when `offset` is not the start of a live block.
  bool Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes_in_use() const { return in_use_; }

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> live_;  // offset -> size
};

}  // namespace syncd::client

#endif  // SYNCD_CLIENT_ARENA_ALLOCATOR_H_
