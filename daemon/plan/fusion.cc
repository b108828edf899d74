#include "daemon/plan/fusion.h"

namespace syncd {
namespace {

bool Fusable(const FusionCandidate& a, const FusionCandidate& b) {
  return a.kind == abi::OpKind::kAllreduce && b.kind == abi::OpKind::kAllreduce && a.dtype == b.dtype &&
         a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale && a.gpu == b.gpu;
}

}  // namespace

std::vector<FusionGroup> PlanFusion(const std::vector<FusionCandidate>& ready, uint64_t threshold) {
  std::vector<FusionGroup> groups;
  std::vector<bool> taken(ready.size(), false);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    FusionGroup g{i};
    uint64_t bytes = ready[i].bytes;
    if (threshold > 0 && ready[i].kind == abi::OpKind::kAllreduce) {
      for (size_t j = i + 1; j < ready.size() && bytes < threshold; ++j) {
        if (taken[j] || !Fusable(ready[i], ready[j]) || bytes + ready[j].bytes > threshold) continue;
        taken[j] = true;
        g.push_back(j);
        bytes += ready[j].bytes;
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace syncd
