// The status (`syncctl status`, the metrics endpoint) and this node's health report, built off
// the engine thread. The engine captures what only it can read as plain copies (EngineFacts:
// counters, its clients, its sets' requests and stalls, the other nodes' latest reports); the
// builder adds the rest on the asking thread: the per-collective metrics and stragglers folded
// from the engine's completion events (obs/completion_log.h), each rank's process state read from
// /proc, why a rank holds the others up in words, kind names, the job-wide view merged and
// sorted, the daemon's CPU time.
//
// Threads: Build and Latest from any thread but the engine's (concurrent calls are fine).
#ifndef SYNCD_DAEMON_OBS_STATUS_BUILDER_H_
#define SYNCD_DAEMON_OBS_STATUS_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/coord/job_health.h"
#include "daemon/obs/completion_log.h"
#include "daemon/obs/status_snapshot.h"
#include "proto/mutex.h"

namespace syncd {

// What the engine captures for one status or health report, on its thread, without reading
// files or formatting text.
struct EngineFacts {
  uint64_t now_ns = 0;
  // The engine's part of the status: everything but the fields the builder fills (each client's
  // `process` and `unresponsive`, `by_kind`, `collectives`, the stragglers, `job_nodes`,
  // `daemon_cpu_s`, `peers`; `stalls` unsorted).
  StatusSnapshot status;
  std::vector<StatusSnapshot::KindCount> kind_counts;  // by abi::OpKind value
  std::vector<std::pair<uint32_t, bool>> peers_lost;   // every other node: whether the transport lost it
  // A job runs here: its host name, tensors waiting for this node's ranks, and, when it spans
  // nodes (health reports go out), the other nodes' latest reports as this one sees them.
  bool has_job = false;
  bool reports_health = false;
  std::string host;
  uint64_t pending = 0;
  std::vector<NodeHealth> peer_health;
  // Jobs of several nodes on links of their own (a node service's, side by side): each reports
  // its own health to its own nodes; this node's place in it, its waiting tensors, its peers.
  struct OwnLinkJob {
    uint64_t job = 0;
    uint32_t node_rank = 0;
    std::string host;
    uint64_t pending = 0;
    std::vector<NodeHealth> peer_health;
  };
  std::vector<OwnLinkJob> own_link_jobs;
};

// How long the others must have waited for a rank, and it been away from syncd, before status
// calls it unresponsive (well before the stall warning: a live view, not an alarm).
inline constexpr uint64_t kUnresponsiveNs = 2'000'000'000;

// The state letter of /proc/PID/stat, in words ("" when the process is gone).
std::string ProcessState(int32_t pid);

class StatusBuilder {
 public:
  explicit StatusBuilder(CompletionLog* completions) : completions_(completions) {}

  // The status from `facts`, kept as the latest (unless a newer one was built meanwhile). With
  // `mine`, this node's health report too (when facts.reports_health); with `own`, that of each job
  // on links of its own (facts.own_link_jobs), by job.
  std::shared_ptr<const StatusSnapshot> Build(EngineFacts facts, NodeHealth* mine = nullptr,
                                              std::vector<std::pair<uint64_t, NodeHealth>>* own = nullptr);
  // The latest built (an empty status before the first).
  std::shared_ptr<const StatusSnapshot> Latest() const;

 private:
  CompletionLog* completions_;
  // A mutex held for a pointer copy, not std::atomic<shared_ptr>: libstdc++ 12 implements that
  // with a lock bit ThreadSanitizer cannot see under clang.
  mutable Mutex mu_;
  std::shared_ptr<const StatusSnapshot> latest_ SYNCD_GUARDED_BY(mu_) = std::make_shared<StatusSnapshot>();
  uint64_t latest_ns_ SYNCD_GUARDED_BY(mu_) = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_STATUS_BUILDER_H_
