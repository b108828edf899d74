#include "daemon/collectives/agreement.h"

#include <algorithm>
#include <map>

#include "daemon/collectives/collective.h"
#include "daemon/plan/topo.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

std::string ShapeText(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// The plan's description travels in the shape; the plan itself only within the node that computed it.
std::string PlanText(const Request& r) { return DescribePlan(std::vector<int64_t>(r.shape.begin(), r.shape.end())); }

}  // namespace

std::string SameShape(const std::vector<Request>& rs) {
  return DisagreementBy(
      rs, "shape", [](const Request& r) -> const Shape& { return r.shape; },
      [](const Request& r) { return ShapeText(r.shape); });
}

std::string SameReduction(const std::vector<Request>& rs) {
  std::string msg = SameShape(rs);
  if (msg.empty())
    msg = DisagreementBy(
        rs, "reduce op", [](const Request& r) { return r.op; },
        [](const Request& r) { return std::string(abi::ReduceOpName(r.op)); });
  if (msg.empty())
    msg = DisagreementBy(rs, "scale factors", [](const Request& r) { return std::make_pair(r.prescale, r.postscale); },
                         [](const Request& r) {
      return "prescale " + std::to_string(r.prescale) + " postscale " + std::to_string(r.postscale);
    });
  return msg;
}

std::string SameShapeAfterFirst(const std::vector<Request>& rs) {
  if (rs.size() < 2 || std::all_of(rs.begin(), rs.end(), [&](const Request& r) {
        return r.shape.size() == rs.front().shape.size() &&
               std::equal(r.shape.begin() + (r.shape.empty() ? 0 : 1), r.shape.end(),
                          rs.front().shape.begin() + (rs.front().shape.empty() ? 0 : 1));
      }))
    return "";
  return Disagreement(rs, "shape after the first dimension", [](const Request& r) {
    std::string s = "[*";
    for (size_t i = 1; i < r.shape.size(); ++i) s += "," + std::to_string(r.shape[i]);
    return s + "]";
  });
}

std::string Disagreement(const std::vector<Request>& rs, const char* what,
                         const std::function<std::string(const Request&)>& describe) {
  std::map<std::string, std::vector<uint32_t>> groups;
  std::vector<std::string> order;
  for (const Request& r : rs) {
    std::string v = describe(r);
    if (!groups.count(v)) order.push_back(v);
    groups[v].push_back(r.rank);
  }
  if (groups.size() <= 1) return "";
  std::string msg = "tensor '" + rs.front().name + "': mismatched " + what + " across ranks: ";
  for (size_t i = 0; i < order.size(); ++i) msg += (i ? "; " : "") + order[i] + " on " + RankList(groups[order[i]]);
  return msg;
}

Status CheckAgreement(const std::vector<Request>& rs) {
  // A rank that could not take part (syncd_fail_async) fails the name for every rank, saying why.
  for (const Request& r : rs)
    if (r.kind == abi::OpKind::kFail)
      return Status(SYNCD_ERR_MISMATCH, "tensor '" + r.name + "': rank " + std::to_string(r.rank) +
                                            " could not take part: " +
                                            (r.failure.empty() ? "its own checks refused its tensor" : r.failure));
  std::string msg = DisagreementBy(
      rs, "operation", [](const Request& r) { return r.kind; },
      [](const Request& r) { return std::string(OpKindName(r.kind)); });
  if (msg.empty())
    msg = DisagreementBy(
        rs, "memory", [](const Request& r) { return r.gpu; },
        [](const Request& r) { return std::string(r.gpu ? "GPU" : "host"); });
  if (msg.empty())
    msg = DisagreementBy(
        rs, "dtype", [](const Request& r) { return r.dtype; },
        [](const Request& r) { return std::string(abi::DtypeName(r.dtype)); });
  if (msg.empty() && rs.front().kind == abi::OpKind::kRegisterGraph) msg = Disagreement(rs, "TOPO plan", PlanText);
  if (msg.empty() && rs.front().kind == abi::OpKind::kAddProcessSet)
    msg = Disagreement(rs, "process set", [](const Request& r) {
      std::string s = "ranks";
      for (size_t i = 0; i < r.splits.size(); ++i) s += (i ? "," : " ") + std::to_string(r.splits[i]);
      return s;
    });
  if (msg.empty() && rs.front().kind == abi::OpKind::kRemoveProcessSet)
    msg = Disagreement(rs, "process set", [](const Request& r) { return "id " + std::to_string(r.removed_set); });
  if (msg.empty()) {
    const Collective* c = FindCollective(rs.front().kind);
    msg = c != nullptr ? c->Disagreement(rs) : SameShape(rs);
  }
  if (msg.empty()) return Status::Ok();
  return Status(SYNCD_ERR_MISMATCH, msg);
}

std::string SameRoot(const std::vector<Request>& requests) {
  return DisagreementBy(
      requests, "root", [](const Request& r) { return r.root; },
      [](const Request& r) { return "root " + std::to_string(r.root); });
}

}  // namespace syncd
