// A name some of its participants submitted a while ago and others not yet: how long it has
// waited and whom it waits for, in the numbering of whoever reports it (a node's tensor table:
// local ranks; the coordinator: nodes). `syncctl stalls`, the health report and the stall
// warnings are built from these.
#ifndef SYNCD_DAEMON_CORE_STALL_H_
#define SYNCD_DAEMON_CORE_STALL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace syncd {

struct Stall {
  std::string name;
  uint64_t waiting_ns = 0;
  std::vector<uint32_t> missing;  // local ranks or nodes, by the reporter

  // Whether `who` (a local rank or a node) is one it waits for.
  bool Misses(uint32_t who) const { return std::find(missing.begin(), missing.end(), who) != missing.end(); }
};

// The longest-waiting first, as every list of stalls is shown.
inline void OldestFirst(std::vector<Stall>& stalls) {
  std::sort(stalls.begin(), stalls.end(), [](const Stall& a, const Stall& b) { return a.waiting_ns > b.waiting_ns; });
}

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_STALL_H_
