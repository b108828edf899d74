// Counters of TOPO execution (see topo_runner.h), shown by syncctl. Plain data.
#ifndef SYNCD_DAEMON_COORD_TOPO_STATS_H_
#define SYNCD_DAEMON_COORD_TOPO_STATS_H_

#include <cstdint>

namespace syncd {

struct TopoStats {
  uint64_t steps = 0;  // passes through every group
  uint64_t groups_executed = 0;
  uint64_t tensors_executed = 0;
  uint64_t execution_ns_total = 0;  // from issuing each group to its end
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_TOPO_STATS_H_
