// Horovod's response cache: once a name has been negotiated through the coordinator, every node
// stores it under the same bit. Later cycles agree on cached names with one bit-vector allreduce
// instead of the coordinator. All changes come from decisions every node sees identically (the
// coordinator's responses, the OR of invalidation bits), so the caches stay equal.
#ifndef SYNCD_DAEMON_COORD_RESPONSE_CACHE_H_
#define SYNCD_DAEMON_COORD_RESPONSE_CACHE_H_

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/coord/wire.h"
#include "daemon/core/tensor_table.h"

namespace syncd {

// A meta's rows and splits as a tensor holds them (null where it has none).
std::shared_ptr<const AgreedShapes> SharedShapes(const TensorMeta& meta);

class ResponseCache {
 public:
  explicit ResponseCache(uint32_t capacity) : entries_(capacity) {}

  uint32_t capacity() const { return uint32_t(entries_.size()); }
  // Coordinator only: a free bit for `name`, or -1 when full.
  int32_t FreeBit() const;
  void Put(int32_t bit, const std::string& name, const TensorMeta& meta);
  void Evict(int32_t bit);
  // The bit of `name`, if cached.
  std::optional<int32_t> Find(const std::string& name) const;
  const std::string& name(int32_t bit) const { return entries_[size_t(bit)].name; }
  const TensorMeta& meta(int32_t bit) const { return entries_[size_t(bit)].meta; }
  // The meta's rows and splits, shared with the tensors that run the name (null where it has none).
  const std::shared_ptr<const AgreedShapes>& shapes(int32_t bit) const { return entries_[size_t(bit)].shapes; }
  bool used(int32_t bit) const { return entries_[size_t(bit)].used; }

 private:
  struct Entry {
    bool used = false;
    std::string name;
    TensorMeta meta;
    std::shared_ptr<const AgreedShapes> shapes;
  };
  std::vector<Entry> entries_;
  std::unordered_map<std::string, int32_t> by_name_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_RESPONSE_CACHE_H_
