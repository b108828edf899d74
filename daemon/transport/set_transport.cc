#include "daemon/transport/set_transport.h"

#include <algorithm>

namespace syncd {

SetTransport::SetTransport(Transport* parent, std::vector<uint32_t> nodes, uint32_t slot)
    : parent_(parent), nodes_(std::move(nodes)), slot_bits_(uint64_t(slot) << kSetSlotShift) {
  rank_ = uint32_t(std::find(nodes_.begin(), nodes_.end(), parent_->rank()) - nodes_.begin());
}

std::optional<Status> SetTransport::PeerFailure() const {
  // Only a member's failure concerns the set.
  for (uint32_t n : nodes_)
    if (parent_->PeerLost(n)) return parent_->PeerFailure();
  return std::nullopt;
}

}  // namespace syncd
