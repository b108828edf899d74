// Core sets and pinning (static core partitioning). The daemon pins its whole process before it
// starts any thread, so every thread it creates (engine, control, gRPC's) inherits the set.
#ifndef SYNCD_DAEMON_BASE_AFFINITY_H_
#define SYNCD_DAEMON_BASE_AFFINITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"

namespace syncd {

using CoreSet = std::vector<uint32_t>;  // sorted, unique logical CPU ids

// "1,3-4" -> {1,3,4}, sorted and unique, each below `limit`. Errors name `what` ("core list") and
// the offending token.
StatusOr<std::vector<uint32_t>> ParseNumberList(const std::string& text, const std::string& what, uint64_t limit);
// A number list of CPU ids.
StatusOr<CoreSet> ParseCoreList(const std::string& text);
// {1,3,4} -> "1,3-4" (ParseNumberList's form; ascending input).
std::string FormatNumberList(const std::vector<uint32_t>& numbers);
inline std::string FormatCoreList(const CoreSet& cores) { return FormatNumberList(cores); }

// CPUs this process (or process `pid`) may run on now; empty when `pid` does not exist.
CoreSet AllowedCores(int pid = 0);

// Other processes named `comm` (as /proc/PID/comm has it: "syncd") that may run on one of
// `cores`: the daemons whose engines would take turns on them.
uint32_t ProcessesSharingCores(const char* comm, const CoreSet& cores);

struct CorePartition {
  CoreSet daemon;   // empty: not pinned
  CoreSet workers;  // what remains for framework processes
};

// Resolves the `cores` setting: "auto" takes the last physical core (all its hardware threads)
// that this process may use, found with hwloc; "none" pins nothing. A list must be a subset of
// the allowed CPUs.
StatusOr<CorePartition> ResolveCores(const std::string& setting);

// Pins the calling thread (before other threads exist: the whole process) to `cores`.
Status PinCurrentThread(const CoreSet& cores);

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_AFFINITY_H_
