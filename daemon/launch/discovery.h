// syncrun's elastic growth (--max-np, --host-discovery-script), in horovodrun's role: where the
// job's ranks sit, and which slots a host discovery script offers now.
//
// The job's ranks are slots, node-major: node k holds ranks k*S .. k*S+S-1, S = world / nodes
// (the daemons number ranks so). With --max-np M the world is M slots; the -n ranks that start are
// spread over the nodes as evenly as possible (the first nodes take one more), each node's from its
// first slot, and the rest are vacant (syncd --vacant-ranks) until a rank starts in one. Fewer
// ranks than nodes leave the last nodes without one: they join the job's collectives once the
// script offers them (their daemons start the job without a rank, syncd --job-id).
#ifndef SYNCD_DAEMON_LAUNCH_DISCOVERY_H_
#define SYNCD_DAEMON_LAUNCH_DISCOVERY_H_

#include <string>
#include <vector>

#include "daemon/base/status.h"

namespace syncd {

struct SlotLayout {
  int world = 0;              // slots: ranks are numbered below it
  int slots_per_node = 0;     // S
  std::vector<int> launched;  // the ranks started at launch, ascending
  std::vector<int> vacant;    // the others, ascending
};
// `ranks` started over `nodes` nodes, in `max_np` slots (0: as many as `ranks`, which must then
// spread evenly). Errors say what to change.
StatusOr<SlotLayout> PlanSlots(int nodes, int ranks, int max_np);

// "1,3-4" for {1,3,4} (the list syncd --vacant-ranks and SYNCD_VACANT_RANKS take).
std::string FormatRanks(const std::vector<int>& ranks);

// A host discovery script's output: one host per line, "HOST" or "HOST:SLOTS", where HOST names one
// of syncrun's nodes ("node2", or "2"); blank lines and lines starting with '#' are skipped. Returns
// the slots each node offers (a node not listed: 0; at most `slots_per_node`). An unknown host or
// a bad count is an error naming the line.
StatusOr<std::vector<int>> ParseDiscoveredHosts(const std::string& output, int nodes, int slots_per_node);

// The ranks to start: on each node, the free slots (not `held`), lowest first, until it runs as
// many as `offered` says.
std::vector<int> SlotsToFill(const std::vector<int>& offered, const std::vector<bool>& held, int slots_per_node);

// Runs `script` (with /bin/sh -c) and returns what it wrote to stdout; an error when it cannot be
// run, exits non-zero or takes longer than `timeout_ms` (it is then killed).
StatusOr<std::string> RunDiscoveryScript(const std::string& script, int timeout_ms);

}  // namespace syncd

#endif  // SYNCD_DAEMON_LAUNCH_DISCOVERY_H_
