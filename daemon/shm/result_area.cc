#include "daemon/shm/result_area.h"

#include <algorithm>
#include <cstring>

namespace syncd {

ResultArea::ResultArea(std::shared_ptr<const void> memory, char* segment_base, uint64_t offset, uint64_t bytes)
    : memory_(std::move(memory)), base_(segment_base + offset), offset_(offset), alloc_(bytes, abi::kArenaAlignment) {}

std::optional<ResultArea::Block> ResultArea::Allocate(uint64_t data_bytes, const std::vector<int64_t>& rows) {
  const uint64_t head = abi::ResultDataOffset(uint32_t(rows.size()));
  if (data_bytes > UINT64_MAX - head) return std::nullopt;
  // Released blocks first: the lowest free block is then usually the one just given back, whose
  // pages are mapped and warm in both processes (a fresh one costs a page fault per page).
  Reclaim();
  std::optional<uint64_t> at = alloc_.Allocate(head + data_bytes);
  if (!at) return std::nullopt;
  char* block = base_ + *at;
  auto* h = new (block) abi::ResultHeader();
  h->ranks = uint32_t(rows.size());
  h->data_offset = head;
  h->data_bytes = data_bytes;
  if (!rows.empty()) memcpy(block + sizeof(abi::ResultHeader), rows.data(), rows.size() * sizeof(int64_t));
  h->released.store(0, std::memory_order_relaxed);
  live_.insert(std::lower_bound(live_.begin(), live_.end(), *at), *at);
  return Block{block + head, offset_ + *at};
}

void ResultArea::Free(uint64_t offset) {
  if (offset < offset_) return;
  auto it = std::lower_bound(live_.begin(), live_.end(), offset - offset_);
  if (it == live_.end() || *it != offset - offset_) return;
  alloc_.Free(*it);
  live_.erase(it);
}

size_t ResultArea::Reclaim() {
  const size_t before = live_.size();
  live_.erase(std::remove_if(live_.begin(), live_.end(),
                             [this](uint64_t at) {
                               const auto* h = reinterpret_cast<const abi::ResultHeader*>(base_ + at);
                               if (h->released.load(std::memory_order_acquire) == 0) return false;
                               alloc_.Free(at);
                               return true;
                             }),
              live_.end());
  return before - live_.size();
}

}  // namespace syncd
