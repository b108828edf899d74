#include "daemon/core/tensor_table.h"

#include <algorithm>

#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {

Status TensorTable::Add(Request r) {
  if (r.local_rank >= local_size_)
    return InvalidArgument("tensor '" + r.name + "': local rank " + std::to_string(r.local_rank) +
                           " out of range (local size " + std::to_string(local_size_) + ")");
  auto it = pending_.find(r.name);
  const bool inserted = it == pending_.end();
  if (inserted && !spare_.empty()) {
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = r.name;  // into the room the last name left
    node.mapped().count = 0;
    node.mapped().queued = false;
    it = pending_.insert(std::move(node)).position;
  } else if (inserted) {
    it = pending_.try_emplace(r.name).first;
  }
  Entry& e = it->second;
  if (inserted) {
    if (e.requests.capacity() < local_size_ && !spare_lists_.empty()) {
      e.requests = std::move(spare_lists_.back());
      spare_lists_.pop_back();
    }
    e.requests.resize(local_size_);
    e.present.assign(local_size_, false);
    e.first_seen_ns = abi::MonotonicNs();
  }
  if (e.present[r.local_rank])
    return Status(SYNCD_ERR_DUPLICATE,
                  "tensor '" + r.name + "' is already in flight on rank " + std::to_string(r.rank));
  const bool join = r.kind == abi::OpKind::kJoin && join_ != nullptr;
  if (join) {
    const Joined& was = joined_[r.local_rank];
    joined_[r.local_rank] = Joined{true, r.rank, r.set_rank, was.lost, was.replaced};
    last_joined_ = r.rank;
  }
  e.present[r.local_rank] = true;
  e.requests[r.local_rank] = std::move(r);
  ++e.count;
  if (join) {
    for (auto& [name, other] : pending_) QueueIfReady(name, other);  // they wait for one rank less
  } else {
    QueueIfReady(it->first, e);
  }
  return Status::Ok();
}

void TensorTable::QueueIfReady(const std::string& name, Entry& e) {
  if (e.queued) return;
  const bool join = name == abi::kJoinName;
  for (uint32_t l = 0; l < local_size_; ++l)
    if (!e.present[l] && (join ? !joined_[l].lost : !joined_[l].joined)) return;
  e.queued = true;
  completed_.push_back(&name);
}

void TensorTable::TakeCompleted(std::vector<ReadyTensor>* ready, std::vector<FailedTensor>* failed) {
  // In the order the names completed; ResetJoined may complete more while this runs (at the end).
  for (size_t i = 0; i < completed_.size(); ++i) {
    auto it = pending_.find(*completed_[i]);
    Entry& e = it->second;
    std::vector<Request> requests = std::move(e.requests);
    Status agreement;
    // Joined ranks stand in; the first present request shows what the collective is.
    const Request* like = nullptr;
    for (uint32_t l = 0; l < local_size_ && like == nullptr; ++l)
      if (e.present[l]) like = &requests[l];
    for (uint32_t l = 0; l < local_size_ && agreement.ok(); ++l) {
      if (e.present[l]) continue;
      StatusOr<Request> stand_in = join_(*like, joined_[l].rank, joined_[l].set_rank, l, joined_[l].lost);
      if (stand_in.ok()) {
        requests[l] = std::move(stand_in.value());
        requests[l].absent = joined_[l].lost;
      }
      else agreement = stand_in.status();
    }
    if (!agreement.ok()) {  // only the present requests fail
      std::vector<Request> present;
      for (uint32_t l = 0; l < local_size_; ++l)
        if (e.present[l]) present.push_back(std::move(requests[l]));
      requests = std::move(present);
    }
    // A lost rank's replacement submitted this name itself: it takes part again from here on.
    for (uint32_t l = 0; l < local_size_; ++l)
      if (e.present[l] && joined_[l].lost && joined_[l].replaced) {
        joined_[l] = Joined{};
        --lost_count_;
      }
    if (it->first == abi::kJoinName) {
      // Every local rank joined: the join goes on (to the other nodes); joining ends here.
      for (Request& r : requests) r.last_joined = int32_t(last_joined_);
      ResetJoined();
    }
    auto node = pending_.extract(it);
    if (spare_.size() < kSpareEntries) spare_.push_back(std::move(node));
    if (agreement.ok()) agreement = check_(requests);
    if (agreement.ok()) {
      ready->push_back(ReadyTensor{std::move(requests)});
    } else {
      failed->push_back(FailedTensor{std::move(requests), std::move(agreement)});
    }
  }
  completed_.clear();  // keeps its room: a deque let a block go every 64 names
}

std::vector<Stall> TensorTable::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<Stall> out;
  for (const auto& [name, e] : pending_) {
    if (e.count == local_size_ || now_ns - e.first_seen_ns < min_age_ns) continue;
    Stall s{name, now_ns - e.first_seen_ns, {}};
    for (uint32_t i = 0; i < local_size_; ++i)
      if (!e.present[i] && !joined_[i].joined) s.missing.push_back(i);
    if (s.missing.empty()) continue;  // complete (joined ranks stand in)
    out.push_back(std::move(s));
  }
  OldestFirst(out);
  return out;
}

bool TensorTable::HasRequestsOf(uint32_t local_rank) const {
  if (local_rank >= local_size_) return false;
  for (const auto& [name, e] : pending_)
    if (e.present[local_rank]) return true;
  return false;
}

void TensorTable::FailAll(const Status& error, std::vector<FailedTensor>* failed) {
  for (auto& [name, e] : pending_) {
    FailedTensor f{{}, Status(error.code(), "tensor '" + name + "': " + error.message())};
    for (uint32_t i = 0; i < local_size_; ++i)
      if (e.present[i]) f.requests.push_back(std::move(e.requests[i]));
    failed->push_back(std::move(f));
  }
  pending_.clear();
  completed_.clear();
  ResetJoined();
}

void TensorTable::ResetJoined() {
  for (Joined& j : joined_)
    if (!j.lost) j = Joined{};
}

void TensorTable::Replaced(uint32_t local) {
  if (local < local_size_ && joined_[local].lost) joined_[local].replaced = true;
}

void TensorTable::MarkLost(uint32_t local, const Request& join) {
  if (local >= local_size_ || joined_[local].lost) return;
  joined_[local] = Joined{true, join.rank, join.set_rank, true};
  ++lost_count_;
  if (lost_count_ == local_size_) {
    lost_join_ = join;
    auto it = pending_.find(join.name);
    if (it == pending_.end() || !it->second.present[local]) (void)Add(join);
  }
  for (auto& [name, e] : pending_) QueueIfReady(name, e);  // they wait for one rank less
}

void TensorTable::JoinCompleted() {
  if (lost_count_ != local_size_ || local_size_ == 0) return;
  auto it = pending_.find(lost_join_.name);
  if (it != pending_.end() && it->second.present[lost_join_.local_rank]) return;
  Request join = lost_join_;
  join.received_ns = abi::MonotonicNs();
  (void)Add(std::move(join));
}

}  // namespace syncd
