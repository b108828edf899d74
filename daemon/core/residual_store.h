// The error-feedback residuals a daemon keeps for the allreduces it compresses with top-k,
// 1-bit or PowerSGD: per tensor (its process set and name), what compression has left out of this
// node's sums so far, added to the tensor's next sum before it is compressed again.
//
// Bounded: at most `capacity_bytes` in all. A residual that does not fit evicts those used least
// recently, never one that is pinned (a group being compressed holds its tensors'); one that
// cannot fit even so is refused and its tensor goes without error feedback that time. Both are
// counted. A residual is zeros when it is new or its tensor's size changed. Everything is dropped
// at a job's end and when the job's membership changes (the sums the residuals belong to are
// gone): Clear(). Engine thread only.
#ifndef SYNCD_DAEMON_CORE_RESIDUAL_STORE_H_
#define SYNCD_DAEMON_CORE_RESIDUAL_STORE_H_

#include <absl/container/node_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

namespace syncd {

struct ResidualStats {
  uint64_t tensors = 0;   // residuals held
  uint64_t bytes = 0;     // their size
  uint64_t capacity = 0;  // the bound
  uint64_t evicted = 0;   // residuals dropped to make room
  uint64_t refused = 0;   // times a tensor went without error feedback (it did not fit)
  uint64_t cleared = 0;   // residuals dropped by Clear (job ends, membership changes)

  // Summed over the jobs a daemon serves.
  ResidualStats& operator+=(const ResidualStats& o) {
    tensors += o.tensors;
    bytes += o.bytes;
    capacity += o.capacity;
    evicted += o.evicted;
    refused += o.refused;
    cleared += o.cleared;
    return *this;
  }
};

class ResidualStore {
  struct Entry;

 public:
  explicit ResidualStore(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  ResidualStore(const ResidualStore&) = delete;
  ResidualStore& operator=(const ResidualStore&) = delete;

  // A residual held for one use: not evicted until the pin is destroyed. data() is 8-byte aligned
  // (float64 residuals), nullptr when the residual was refused.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& o) noexcept : store_(std::exchange(o.store_, nullptr)), entry_(std::exchange(o.entry_, nullptr)) {}
    Pin& operator=(Pin&& o) noexcept;
    ~Pin() { Unpin(); }
    char* data() const;
    // How many times the residual was acquired since it was made (this one included): the
    // tensor's compressed exchanges, for the errors that name one.
    uint64_t uses() const;
    explicit operator bool() const { return entry_ != nullptr; }

   private:
    friend class ResidualStore;
    Pin(ResidualStore* store, Entry* entry) : store_(store), entry_(entry) {}
    void Unpin();
    ResidualStore* store_ = nullptr;
    Entry* entry_ = nullptr;
  };

  // The residual of tensor `name` of process set `set`, `bytes` long, pinned.
  Pin Acquire(int32_t set, const std::string& name, size_t bytes);
  // Drops every residual (a pinned one when its pin goes).
  void Clear();
  ResidualStats stats() const;

 private:
  using Key = std::pair<int32_t, std::string>;
  using Order = std::list<Key>;  // least recently used first
  struct Entry {
    std::unique_ptr<double[]> data;
    size_t bytes = 0;
    uint32_t pins = 0;
    uint64_t uses = 0;
    bool cleared = false;  // Clear() came while pinned: dropped at the last unpin
    Order::iterator at;
  };
  // Evicts unpinned residuals, least recently used first, until `bytes` more fit; false if they cannot.
  bool MakeRoom(size_t bytes);
  void Drop(absl::node_hash_map<Key, Entry>::iterator it);

  uint64_t capacity_;
  uint64_t used_ = 0;
  absl::node_hash_map<Key, Entry> entries_;
  Order order_;
  ResidualStats counts_;  // evicted, refused, cleared
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_RESIDUAL_STORE_H_
