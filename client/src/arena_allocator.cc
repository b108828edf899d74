#include "client/src/arena_allocator.h"

namespace syncd::client {

ArenaAllocator::ArenaAllocator(uint64_t bytes, uint64_t alignment)
    : capacity_(bytes / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  const uint64_t want = bytes == 0 ? alignment_ : (bytes + alignment_ - 1) / alignment_ * alignment_;
  if (want < bytes) return std::nullopt;  // overflow
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + want, rest);
    live_.emplace(offset, want);
    in_use_ += want;
    return offset;
  }
  return std::nullopt;
}

bool ArenaAllocator::Free(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) return false;
  uint64_t start = offset, size = live->second;
  in_use_ -= size;
  live_.erase(live);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
  return true;
}

}  // namespace syncd::client
