// First-fit allocator over a range of shared memory: the client's arena (owned by the Client,
// called under its lock) and the daemon's side of each client's result area (engine thread).
// Works in offsets so the same numbers travel in ring entries; never touches the memory itself.
#ifndef SYNCD_PROTO_ARENA_ALLOCATOR_H_
#define SYNCD_PROTO_ARENA_ALLOCATOR_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

namespace syncd {

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
  using Map = std::map<uint64_t, uint64_t>;
  // Inserts (key, value) into `m` in a spare node when there is one: a block allocated and freed
  // again and again (a result block per collective) then costs no heap allocation.
  void Put(Map& m, uint64_t key, uint64_t value);
  void Drop(Map& m, Map::iterator it);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t in_use_ = 0;
  Map free_;  // offset -> size, coalesced
  Map live_;  // offset -> size
  static constexpr size_t kSpareNodes = 8;
  Map::node_type spare_[kSpareNodes];
  size_t spares_ = 0;
};

inline ArenaAllocator::ArenaAllocator(uint64_t bytes, uint64_t alignment)
    : capacity_(bytes / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

inline void ArenaAllocator::Put(Map& m, uint64_t key, uint64_t value) {
  if (spares_ == 0) {
    m.emplace(key, value);
    return;
  }
  Map::node_type node = std::move(spare_[--spares_]);
  node.key() = key;
  node.mapped() = value;
  m.insert(std::move(node));
}

inline void ArenaAllocator::Drop(Map& m, Map::iterator it) {
  Map::node_type node = m.extract(it);
  if (spares_ < kSpareNodes) spare_[spares_++] = std::move(node);
}

inline std::optional<uint64_t> ArenaAllocator::Allocate(uint64_t bytes) {
  const uint64_t want = bytes == 0 ? alignment_ : (bytes + alignment_ - 1) / alignment_ * alignment_;
  if (want < bytes) return std::nullopt;  // overflow
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - want;
    Drop(free_, it);
    if (rest > 0) Put(free_, offset + want, rest);
    Put(live_, offset, want);
    in_use_ += want;
    return offset;
  }
  return std::nullopt;
}

inline bool ArenaAllocator::Free(uint64_t offset) {
  auto live = live_.find(offset);
  if (live == live_.end()) return false;
  uint64_t start = offset, size = live->second;
  in_use_ -= size;
  Drop(live_, live);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    auto after = std::next(next);
    Drop(free_, next);
    next = after;
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      Drop(free_, prev);
    }
  }
  Put(free_, start, size);
  return true;
}

}  // namespace syncd

#endif  // SYNCD_PROTO_ARENA_ALLOCATOR_H_
