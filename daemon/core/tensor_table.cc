#include "daemon/core/tensor_table.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

const char* KindName(abi::OpKind k) {
  switch (k) {
    case abi::OpKind::kAllreduce: return "allreduce";
    case abi::OpKind::kBroadcast: return "broadcast";
    case abi::OpKind::kBarrier: return "barrier";
    case abi::OpKind::kRegisterGraph: return "graph registration";
    case abi::OpKind::kFail: return "failure notice";
  }
  return "unknown";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// "tensor 'w': mismatched shape: [4,4] on ranks 0,1; [4,5] on rank 2", or "" when all agree.
template <typename F>
std::string Disagreement(const std::vector<Request>& rs, const char* what, F describe) {
  std::map<std::string, std::vector<uint32_t>> groups;
  std::vector<std::string> order;
  for (const Request& r : rs) {
    std::string v = describe(r);
    if (!groups.count(v)) order.push_back(v);
    groups[v].push_back(r.rank);
  }
  if (groups.size() <= 1) return "";
  std::string msg = "tensor '" + rs.front().name + "': mismatched " + what + " across ranks: ";
  for (size_t i = 0; i < order.size(); ++i)
    msg += (i ? "; " : "") + order[i] + " on " + RankList(groups[order[i]]);
  return msg;
}

}  // namespace

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

Status CheckAgreement(const std::vector<Request>& rs) {
  // A rank that could not take part (syncd_fail_async) fails the name for every rank, saying why.
  for (const Request& r : rs)
    if (r.kind == abi::OpKind::kFail)
      return Status(SYNCD_ERR_MISMATCH, "tensor '" + r.name + "': rank " + std::to_string(r.rank) +
                                            " could not take part: " +
                                            (r.failure.empty() ? "its own checks refused its tensor" : r.failure));
  std::string msg = Disagreement(rs, "operation", [](const Request& r) { return std::string(KindName(r.kind)); });
  if (msg.empty()) msg = Disagreement(rs, "memory", [](const Request& r) { return std::string(r.gpu ? "GPU" : "host"); });
  if (msg.empty()) msg = Disagreement(rs, "dtype", [](const Request& r) { return std::string(abi::DtypeName(r.dtype)); });
  if (msg.empty() && rs.front().kind == abi::OpKind::kRegisterGraph)
    msg = Disagreement(rs, "TOPO plan", [](const Request& r) {
      char hex[32];
      // The hash travels in the shape; the plan itself only within the node that computed it.
      snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)(r.shape.empty() ? 0 : r.shape[0]));
      std::string d = std::string("plan ") + hex;
      if (r.plan)
        d += " (" + std::to_string(r.plan->tensors.size()) + " tensors, " + std::to_string(r.plan->groups()) + " groups)";
      return d;
    });
  if (msg.empty()) msg = Disagreement(rs, "shape", [](const Request& r) { return ShapeText(r.shape); });
  const abi::OpKind kind = rs.front().kind;
  if (msg.empty() && kind == abi::OpKind::kAllreduce) {
    msg = Disagreement(rs, "reduce op", [](const Request& r) { return std::string(abi::ReduceOpName(r.op)); });
    if (msg.empty())
      msg = Disagreement(rs, "scale factors", [](const Request& r) {
        return "prescale " + std::to_string(r.prescale) + " postscale " + std::to_string(r.postscale);
      });
  }
  if (msg.empty() && kind == abi::OpKind::kBroadcast)
    msg = Disagreement(rs, "root", [](const Request& r) { return "root " + std::to_string(r.root); });
  if (msg.empty()) return Status::Ok();
  return Status(SYNCD_ERR_MISMATCH, msg);
}

void TensorTable::TakeCompleted(std::vector<ReadyTensor>* ready, std::vector<FailedTensor>* failed) {
  while (!completed_.empty()) {
    auto it = pending_.find(completed_.front());
    completed_.pop_front();
    std::vector<Request> requests = std::move(it->second.requests);
    pending_.erase(it);
    Status agreement = CheckAgreement(requests);
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
