// PlanSimulatedNodes (launcher.h): the cores of several simulated nodes on one machine.
#include "daemon/launch/launcher.h"

#include <algorithm>

namespace syncd {

std::vector<SimulatedNodeCores> PlanSimulatedNodes(const CoreSet& allowed, int nodes) {
  std::vector<SimulatedNodeCores> plan(size_t(std::max(nodes, 0)));
  const size_t c = allowed.size(), n = plan.size();
  if (c == 0) return plan;
  for (size_t i = 0; i < n; ++i) {
    SimulatedNodeCores& p = plan[i];
    if (c >= n) {
      // Contiguous groups; the engine takes each group's last core, the ranks the others.
      const CoreSet group(allowed.begin() + ptrdiff_t(i * c / n), allowed.begin() + ptrdiff_t((i + 1) * c / n));
      p.daemon = {group.back()};
      p.workers = group.size() > 1 ? CoreSet(group.begin(), group.end() - 1) : group;
    } else {
      p.daemon = p.workers = {allowed[i % c]};  // more nodes than cores: nodes share cores
    }
  }
  return plan;
}

}  // namespace syncd
