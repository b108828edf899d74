// What the status shows of the partial allreduces (runner.h) of a process set.
#ifndef SYNCD_DAEMON_COLLECTIVES_PARTIAL_STATS_H_
#define SYNCD_DAEMON_COLLECTIVES_PARTIAL_STATS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace syncd {

// What `syncctl status` shows of one partial operation.
struct PartialOpSnapshot {
  std::string name;
  std::string mode;  // "solo", "majority"
  uint32_t quorum = 0;
  uint64_t rounds = 0;
  double mean_nap = 0;
  uint64_t late = 0;     // requests that arrived after their round ran
  uint64_t waiting = 0;  // fresh requests waiting for the next round now
  // Set ranks by how many rounds ran without their fresh contribution, most first (at most 8).
  std::vector<std::pair<uint32_t, uint64_t>> most_absent;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_PARTIAL_STATS_H_
