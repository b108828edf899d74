// The names a set's negotiator holds here (pending_tensors.h). Engine thread only.
#include "daemon/coord/pending_tensors.h"

#include <algorithm>
#include <tuple>

namespace syncd {

bool PendingTensors::Add(ReadyTensor&& t, Status local_error, uint64_t now_ns, std::vector<Request>* refused) {
  // The name is read from the tensor, in place, before the tensor moves (no copy of it).
  Map::iterator it;
  if (!spare_.empty()) {
    Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = t.first().name;
    node.mapped() = PendingTensor{std::move(t), std::move(local_error), now_ns};
    auto placed = map_.insert(std::move(node));
    if (!placed.inserted) {
      *refused = std::move(placed.node.mapped().tensor.requests);
      spare_.push_back(std::move(placed.node));
      return false;
    }
    it = placed.position;
  } else {
    bool inserted = false;
    std::tie(it, inserted) = map_.try_emplace(t.first().name);
    if (!inserted) {
      *refused = std::move(t.requests);
      return false;
    }
    it->second = PendingTensor{std::move(t), std::move(local_error), now_ns};
  }
  order_.push_back(&it->first);
  return true;
}

PendingTensor PendingTensors::Remove(const std::string& name) {
  const auto it = map_.find(name);
  order_.erase(std::find(order_.begin(), order_.end(), &it->first));
  announced_.erase(it->first);
  PendingTensor p = std::move(it->second);
  Map::node_type node = map_.extract(it);
  if (spare_.size() < kSpareNodes) spare_.push_back(std::move(node));
  return p;
}

std::vector<std::string> PendingTensors::Names() const {
  std::vector<std::string> names;
  names.reserve(order_.size());
  for (const std::string* n : order_) names.push_back(*n);
  return names;
}

}  // namespace syncd
