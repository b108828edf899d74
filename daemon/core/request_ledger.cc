#include "daemon/core/request_ledger.h"

#include <cassert>

namespace syncd {

const char* RequestStateName(RequestState s) {
  switch (s) {
    case RequestState::kWaiting: return "waiting";
    case RequestState::kNegotiating: return "negotiating";
    case RequestState::kAgreed: return "agreed";
    case RequestState::kExecuting: return "executing";
  }
  return "?";
}

bool RequestLedger::Open(uint32_t client, uint64_t handle, uint64_t now_ns, uint64_t job, bool large) {
  if (!open_.try_emplace({client, handle}, Entry{job, -1, RequestState::kWaiting, now_ns, large}).second) return false;
  JobInFlight& j = jobs_[job];
  ++j.all;
  j.large += large;
  return true;
}

void RequestLedger::Enter(const Request& r, RequestState state, uint64_t now_ns) {
  if (r.client_id == kNoClient) return;
  auto it = open_.find({r.client_id, r.handle});
  if (it == open_.end()) return;
  Entry& e = it->second;
  if (e.set == r.process_set && e.state == state) return;  // already there: keep since when
  e.set = r.process_set;
  e.state = state;
  e.since_ns = now_ns;
}

bool RequestLedger::Finish(uint32_t client, uint64_t handle) {
  if (const auto it = open_.find({client, handle}); it != open_.end()) {
    const auto j = jobs_.find(it->second.job);
    if (j != jobs_.end()) {
      j->second.large -= it->second.large;
      if (--j->second.all == 0) jobs_.erase(j);
    }
    open_.erase(it);
    return true;
  }
  ++refused_;
  assert(false && "a request was completed twice (RequestLedger::Finish)");
  return false;
}

const RequestState* RequestLedger::StateOf(uint32_t client, uint64_t handle) const {
  auto it = open_.find({client, handle});
  return it == open_.end() ? nullptr : &it->second.state;
}

RequestStates RequestLedger::InSet(uint64_t job, int32_t set) const {
  RequestStates s;
  for (const auto& [key, e] : open_) {
    if (e.set != set || e.job != job) continue;
    const size_t i = size_t(e.state);
    ++s.count[i];
    if (s.oldest_since_ns[i] == 0 || e.since_ns < s.oldest_since_ns[i]) s.oldest_since_ns[i] = e.since_ns;
  }
  return s;
}

}  // namespace syncd
