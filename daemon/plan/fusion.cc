#include "daemon/plan/fusion.h"

namespace syncd {

std::vector<FusionGroup> PlanFusion(const std::vector<FusionCandidate>& ready, uint64_t threshold) {
  std::vector<FusionGroup> groups;
  std::vector<bool> taken;
  PlanFusionInto(ready, threshold, &groups, &taken);
  return groups;
}

void PlanFusionInto(const std::vector<FusionCandidate>& ready, uint64_t threshold, std::vector<FusionGroup>* groups,
                    std::vector<bool>* taken_out) {
  std::vector<bool>& taken = *taken_out;
  taken.assign(ready.size(), false);
  size_t n = 0;
  for (size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    if (n == groups->size()) groups->emplace_back();
    FusionGroup& g = (*groups)[n++];
    g.clear();
    g.push_back(i);
    uint64_t bytes = ready[i].bytes;
    if (threshold > 0 && ready[i].key) {
      for (size_t j = i + 1; j < ready.size() && bytes < threshold; ++j) {
        if (taken[j] || ready[j].key != ready[i].key || bytes + ready[j].bytes > threshold) continue;
        taken[j] = true;
        g.push_back(j);
        bytes += ready[j].bytes;
      }
    }
  }
  groups->resize(n);
}

}  // namespace syncd
