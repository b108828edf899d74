// Live straggler attribution among a daemon's ranks: over the last `window` collectives in which
// two or more of its ranks took part, per rank how often it submitted last, how late it was
// behind the first submitter (mean and 95th percentile), and its share of the waiting it caused.
// A collective's waiting is what its ranks spent between their own submission and the last one's,
// summed over ranks; all of it is the last submitter's doing (the collective could run only once
// it came). Fed from the engine's completion events off its thread (obs/completion_log.h,
// O(ranks) each); summarised for snapshots.
#ifndef SYNCD_DAEMON_OBS_STRAGGLERS_H_
#define SYNCD_DAEMON_OBS_STRAGGLERS_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace syncd {

struct StragglerRank {
  uint32_t rank = 0;            // global
  uint64_t collectives = 0;     // in the window, with this rank
  uint64_t last = 0;            // of those, how many it submitted last
  double mean_late_ms = 0;      // behind the first submitter
  double p95_late_ms = 0;
  double wait_share = 0;        // of the window's waiting, the part it caused (0..1)
};

class StragglerWindow {
 public:
  static constexpr size_t kDefaultWindow = 100;
  explicit StragglerWindow(size_t window = kDefaultWindow) : window_(window) {}

  // One collective: (global rank, when its request reached the daemon) for each local rank in it.
  // Fewer than two ranks say nothing about stragglers and are ignored.
  void Record(const std::vector<std::pair<uint32_t, uint64_t>>& arrivals);

  // Every rank seen in the window, the one that caused most waiting first.
  std::vector<StragglerRank> Summary() const;

  // Between nodes, without comparing their clocks: for each collective that spans nodes, this
  // node's wait, from its last local rank's submission to the collective's end. A collective ends
  // at about the same time on every node, so the node that came last waited least; the job view
  // compares the nodes' medians (JobHealth: robust to a daemon seeing an end late, descheduled). `spread_ns`: from its first local rank's submission to
  // its last's.
  void RecordNodeWait(uint64_t wait_ns, uint64_t spread_ns);
  struct NodeWait {
    uint64_t collectives = 0;
    double mean_ms = 0, p50_ms = 0, p95_ms = 0;
    double spread_p50_ms = 0;  // median spread
  };
  NodeWait node_wait() const;
  size_t collectives() const { return count_; }
  size_t window() const { return window_; }

 private:
  struct Record_ {
    std::vector<std::pair<uint32_t, uint64_t>> late_ns;  // per rank: behind the first submitter
    uint32_t last = 0;
    uint64_t wait_ns = 0;
  };
  size_t window_;
  // A ring of the last window_ records, reused in place (no allocation once it has gone round).
  std::vector<Record_> records_;
  size_t next_ = 0, count_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> node_waits_;  // (wait, spread): a ring of the last window_ too
  size_t node_next_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_STRAGGLERS_H_
