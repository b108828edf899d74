#include "daemon/core/tensor_table.h"

#include <algorithm>

#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {

Status TensorTable::Add(Request r) {
  if (r.local_rank >= local_size_)
    return InvalidArgument("tensor '" + r.name + "': local rank " + std::to_string(r.local_rank) +
                           " out of range (local size " + std::to_string(local_size_) + ")");
  auto [it, inserted] = pending_.try_emplace(r.name);
  Entry& e = it->second;
  if (inserted) {
    e.requests.resize(local_size_);
    e.present.assign(local_size_, false);
    e.first_seen_ns = abi::MonotonicNs();
  }
  if (e.present[r.local_rank])
    return Status(SYNCD_ERR_DUPLICATE,
                  "tensor '" + r.name + "' is already in flight on rank " + std::to_string(r.rank));
  e.present[r.local_rank] = true;
  e.requests[r.local_rank] = std::move(r);
  if (++e.count == local_size_) completed_.push_back(it->first);
  return Status::Ok();
}

void TensorTable::TakeCompleted(std::vector<ReadyTensor>* ready, std::vector<FailedTensor>* failed) {
  while (!completed_.empty()) {
    auto it = pending_.find(completed_.front());
    completed_.pop_front();
    std::vector<Request> requests = std::move(it->second.requests);
    pending_.erase(it);
    Status agreement = check_(requests);
    if (agreement.ok()) {
      ready->push_back(ReadyTensor{std::move(requests)});
    } else {
      failed->push_back(FailedTensor{std::move(requests), std::move(agreement)});
    }
  }
}

std::vector<TensorTable::Stall> TensorTable::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<Stall> out;
  for (const auto& [name, e] : pending_) {
    if (e.count == local_size_ || now_ns - e.first_seen_ns < min_age_ns) continue;
    Stall s{name, now_ns - e.first_seen_ns, {}};
    for (uint32_t i = 0; i < local_size_; ++i)
      if (!e.present[i]) s.missing_local_ranks.push_back(i);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const Stall& a, const Stall& b) { return a.waiting_ns > b.waiting_ns; });
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
}

}  // namespace syncd
