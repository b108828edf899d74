#include "daemon/transport/loopback/loopback_transport.h"

#include <cstring>

namespace syncd {

CommHandle LoopbackTransport::Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner) {
  const CommHandle h = next_++;
  Op op{false, peer, epoch_ | (tag & kTagMask), nullptr, bytes, CommState::kDone, Status::Ok(), {}};
  if (peer >= size() || hub_->lost(peer) || hub_->lost(rank_)) {
    op.state = CommState::kFailed;
    op.error = Status(SYNCD_ERR_RANK_LOST, "node " + std::to_string(peer) + " is lost");
  } else {
    const char* p = static_cast<const char*>(data);
    hub_->queues_[{rank_, peer, op.tag}].emplace_back(p, p + bytes);
  }
  ops_.emplace(h, std::move(op));
  return h;
}

CommHandle LoopbackTransport::Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) {
  const CommHandle h = next_++;
  ops_.emplace(h, Op{true, peer, epoch_ | (tag & kTagMask), data, bytes, CommState::kPending, Status::Ok(), std::move(owner)});
  return h;
}

bool LoopbackTransport::Progress() {
  bool did = false;
  for (auto& [h, op] : ops_) {
    if (!op.is_recv || op.state != CommState::kPending) continue;
    auto q = hub_->queues_.find({op.peer, rank_, op.tag});
    if (q != hub_->queues_.end() && !q->second.empty()) {
      std::vector<char>& msg = q->second.front();
      if (msg.size() != op.bytes) {
        op.state = CommState::kFailed;
        op.error = Status(SYNCD_ERR_PROTOCOL, "message from node " + std::to_string(op.peer) + " has " +
                                                  std::to_string(msg.size()) + " bytes, expected " +
                                                  std::to_string(op.bytes));
      } else {
        if (!msg.empty()) memcpy(op.data, msg.data(), msg.size());  // a 0-byte receive may post no buffer
        op.state = CommState::kDone;
      }
      q->second.pop_front();
      did = true;
    } else if (hub_->lost(op.peer)) {
      op.state = CommState::kFailed;
      op.error = Status(SYNCD_ERR_RANK_LOST, "node " + std::to_string(op.peer) + " is lost");
      did = true;
    }
  }
  return did;
}

CommState LoopbackTransport::Test(CommHandle h, Status* error) {
  auto it = ops_.find(h);
  if (it == ops_.end()) {
    *error = Status(SYNCD_ERR_INTERNAL, "unknown transport handle");
    return CommState::kFailed;
  }
  const CommState s = it->second.state;
  if (s == CommState::kPending) return s;
  if (s == CommState::kFailed) *error = it->second.error;
  ops_.erase(it);
  return s;
}

void LoopbackTransport::Cancel(CommHandle h) { ops_.erase(h); }

void LoopbackTransport::DiscardArrived() {
  Progress();  // what posted receives match is not "arrived unmatched"
  for (auto it = hub_->queues_.begin(); it != hub_->queues_.end();) {
    if (std::get<1>(it->first) == rank_) it = hub_->queues_.erase(it);
    else ++it;
  }
}

void LoopbackTransport::SetEpoch(uint32_t epoch) {
  epoch_ = uint64_t(epoch & kEpochMask) << 48;
  for (auto it = hub_->queues_.begin(); it != hub_->queues_.end();) {
    const auto& [src, dst, tag] = it->first;
    if (dst == rank_ && (tag & ~kTagMask) != epoch_) it = hub_->queues_.erase(it);
    else ++it;
  }
}

std::optional<Status> LoopbackTransport::PeerFailure() const {
  for (uint32_t r = 0; r < size(); ++r)
    if (r != rank_ && hub_->lost(r)) return Status(SYNCD_ERR_RANK_LOST, "node " + std::to_string(r) + " is lost");
  return std::nullopt;
}

}  // namespace syncd
