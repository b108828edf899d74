#include "daemon/core/residual_store.h"

#include <cstring>

namespace syncd {

ResidualStore::Pin& ResidualStore::Pin::operator=(Pin&& o) noexcept {
  if (this != &o) {
    Unpin();
    store_ = std::exchange(o.store_, nullptr);
    entry_ = std::exchange(o.entry_, nullptr);
  }
  return *this;
}

char* ResidualStore::Pin::data() const {
  return entry_ != nullptr ? reinterpret_cast<char*>(entry_->data.get()) : nullptr;
}

uint64_t ResidualStore::Pin::uses() const { return entry_ != nullptr ? entry_->uses : 0; }

void ResidualStore::Pin::Unpin() {
  if (entry_ == nullptr) return;
  Entry* e = std::exchange(entry_, nullptr);
  if (--e->pins == 0 && e->cleared) store_->Drop(store_->entries_.find(*e->at));
  store_ = nullptr;
}

ResidualStore::Pin ResidualStore::Acquire(int32_t set, const std::string& name, size_t bytes) {
  auto it = entries_.find(Key{set, name});
  if (it != entries_.end() && (it->second.bytes != bytes || it->second.cleared)) {
    if (it->second.pins > 0) {  // the same tensor twice at once with another size: never expected
      ++counts_.refused;
      return Pin();
    }
    Drop(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    if (bytes > capacity_ || !MakeRoom(bytes)) {
      ++counts_.refused;
      return Pin();
    }
    order_.push_back(Key{set, name});
    it = entries_.try_emplace(order_.back()).first;
    Entry& e = it->second;
    e.data.reset(new double[(bytes + 7) / 8]());  // zeros
    e.bytes = bytes;
    e.at = std::prev(order_.end());
    used_ += bytes;
  } else {
    order_.splice(order_.end(), order_, it->second.at);  // now the most recently used
  }
  ++it->second.pins;
  ++it->second.uses;
  return Pin(this, &it->second);
}

bool ResidualStore::MakeRoom(size_t bytes) {
  for (auto at = order_.begin(); used_ + bytes > capacity_ && at != order_.end();) {
    auto it = entries_.find(*at++);
    if (it->second.pins > 0) continue;
    Drop(it);
    ++counts_.evicted;
  }
  return used_ + bytes <= capacity_;
}

void ResidualStore::Drop(absl::node_hash_map<Key, Entry>::iterator it) {
  used_ -= it->second.bytes;
  order_.erase(it->second.at);
  entries_.erase(it);
}

void ResidualStore::Clear() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (!it->second.cleared) ++counts_.cleared;
    if (it->second.pins > 0) it->second.cleared = true;
    else Drop(it);
    it = next;
  }
}

ResidualStats ResidualStore::stats() const {
  ResidualStats s = counts_;
  s.capacity = capacity_;
  s.bytes = used_;
  for (const auto& [key, e] : entries_) s.tensors += e.cleared ? 0 : 1;
  return s;
}

}  // namespace syncd
