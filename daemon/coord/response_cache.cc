#include "daemon/coord/response_cache.h"

namespace syncd {

std::shared_ptr<const AgreedShapes> SharedShapes(const TensorMeta& meta) {
  if (meta.rows.empty() && meta.splits.empty()) return nullptr;
  return std::make_shared<const AgreedShapes>(AgreedShapes{meta.rows, meta.splits});
}

int32_t ResponseCache::FreeBit() const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (!entries_[i].used) return int32_t(i);
  return -1;
}

void ResponseCache::Put(int32_t bit, const std::string& name, const TensorMeta& meta) {
  if (bit < 0 || size_t(bit) >= entries_.size()) return;
  if (auto old = Find(name); old && *old != bit) Evict(*old);
  Evict(bit);
  entries_[size_t(bit)] = Entry{true, name, meta, SharedShapes(meta)};
  by_name_[name] = bit;
}

void ResponseCache::Evict(int32_t bit) {
  Entry& e = entries_[size_t(bit)];
  if (!e.used) return;
  by_name_.erase(e.name);
  e = Entry{};
}

std::optional<int32_t> ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

}  // namespace syncd
