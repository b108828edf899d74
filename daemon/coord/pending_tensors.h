// The names a set's negotiator holds here (negotiator.h): tensors every local rank submitted,
// waiting for the other nodes, in the order they became ready, and which of them were announced
// to the coordinator. A name agreed every step costs no allocation: the hash nodes of names that
// left, with their keys' room, are kept for the next.
//
// Engine thread only (the negotiator's).
#ifndef SYNCD_DAEMON_COORD_PENDING_TENSORS_H_
#define SYNCD_DAEMON_COORD_PENDING_TENSORS_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/tensor_table.h"

namespace syncd {

struct PendingTensor {
  ReadyTensor tensor;
  Status local_error;     // the local ranks disagreed: every rank of the job learns it
  uint64_t since_ns = 0;  // when it became ready here
};

class PendingTensors {
 public:
  using Map = std::unordered_map<std::string, PendingTensor>;

  // Adds `t`, ready since `now_ns`. False when its name is already pending here (never expected:
  // the table hands a name out once until it completes): nothing is replaced, and `t`'s requests
  // are moved to `*refused`.
  bool Add(ReadyTensor&& t, Status local_error, uint64_t now_ns, std::vector<Request>* refused);
  // Takes `name` out (it must be pending).
  PendingTensor Remove(const std::string& name);

  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  bool Has(const std::string& name) const { return map_.count(name) > 0; }
  const PendingTensor* Find(const std::string& name) const {
    const auto it = map_.find(name);
    return it == map_.end() ? nullptr : &it->second;
  }
  const Map& map() const { return map_; }
  // The names in the order they became ready here (valid until the next Add or Remove).
  const std::vector<const std::string*>& order() const { return order_; }
  // The names, copied: for loops that remove them.
  std::vector<std::string> Names() const;

  // Whether `name` went to the coordinator uncached (it waits for its response, not for a hit).
  bool Announced(const std::string& name) const { return announced_.count(name) > 0; }
  void Announce(const std::string& name) { announced_.insert(name); }

 private:
  Map map_;
  // map_'s keys in the order they became ready (a node's key stays where it is until the node
  // leaves the map).
  std::vector<const std::string*> order_;
  // Nodes of names that left (up to kSpareNodes), with their key's room, for the next names.
  static constexpr size_t kSpareNodes = 64;
  std::vector<Map::node_type> spare_;
  std::unordered_set<std::string> announced_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_PENDING_TENSORS_H_
