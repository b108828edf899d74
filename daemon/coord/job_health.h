// The job-wide health view, as NCCL's RAS subsystem gives NCCL users: every daemon of a many-node
// job sends every other one a report of its node every kReportPeriodNs (its daemon, each of its
// ranks' last call into syncd, process state and straggler figures) on the global set's control
// channel, and keeps the latest report of each node. So `syncctl status` on any node shows every
// daemon and rank of the job, and names a daemon whose reports stopped coming for kSilentNs
// (stopped, hung, or its network gone) without waiting for a stall timeout.
//
// Reports go to every node (N-1 messages of kControlMessageBytes per node per period), not through
// node 0: no node's loss hides the others, and a node's silence is seen by each peer directly.
// A report is text; a node with many ranks sends it in several chunks (the message's `cycle`
// carries the report's number, the chunk's and their count), and a report counts once all its
// chunks are in.
//
// Reports are built off the engine thread and sent every kReportPeriodNs by the engine's
// observer (engine/engine.h); this view is the engine's.
//
// Threads: engine thread only.
#ifndef SYNCD_DAEMON_COORD_JOB_HEALTH_H_
#define SYNCD_DAEMON_COORD_JOB_HEALTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/coord/wire.h"

namespace syncd {

// Why a rank holds the others up, in words. `code`: 'S' stopped, 'Z' exited (zombie), 'N' not
// calling syncd while a tensor waits for it (`tensor`: which, "" when not known here), '-' none.
std::string UnresponsiveText(char code, double last_seen_s, const std::string& process, const std::string& tensor);

struct RankHealth {
  uint32_t rank = 0;  // global
  int32_t pid = 0;
  bool attached = true;      // false: the rank is gone (lost)
  double last_seen_s = -1;   // since its last submission (-1: none yet)
  std::string process;       // its process's state: "running", "sleeping", "stopped", ... ("": gone)
  char unresponsive = '-';   // UnresponsiveText's code
  std::string why;           // UnresponsiveText of it ("" when '-')
  // Its node's straggler window (StragglerWindow): collectives with it, how often it was last,
  // how late behind the node's first submitter, its share of the node's waiting.
  uint64_t collectives = 0, last = 0;
  double mean_late_ms = 0, p95_late_ms = 0, wait_share = 0;
  // Behind the job's first node, mean (CompareNodeWaits; -1: not known; not sent).
  double job_late_ms = -1;
};

struct NodeHealth {
  uint32_t node = 0;
  std::string host;
  int32_t daemon_pid = 0;
  uint64_t pending = 0;  // tensors waiting on this node for some of its ranks
  // Over its last collectives that span nodes (StragglerWindow::RecordNodeWait): how many, and its
  // wait from its last rank's submission to their end, median and 95th percentile.
  uint64_t collectives = 0;
  double wait_p50_ms = 0, wait_p95_ms = 0;
  double spread_p50_ms = 0;  // from its first local rank's submission to its last's
  std::vector<RankHealth> ranks;
  // As the viewer sees it (not sent): "ok", "unresponsive" (no report for kSilentNs), "lost" (the
  // transport lost it), "waiting" (no report yet); how old its latest report is; why, in words.
  std::string state = "ok";
  double report_age_s = 0;
  std::string why;
  // How late it comes behind the node that waits longest (CompareNodeWaits), -1: not known.
  double late_ms = -1;
};

// Sets each node's late_ms: the longest median wait among the nodes minus its own. Every node ends
// a collective at about the same time, so a node that comes `d` later than another waits `d` less:
// no clocks are compared. (Medians over each node's own window: a daemon that sees an end late,
// descheduled on a loaded machine, moves its mean but not its median; exact when the same nodes
// are late throughout the window, an estimate when the order changes.) And each rank's
// job_late_ms: its node's lateness less the node's median spread (the node was ready when its last
// rank came) plus the rank's own mean lateness behind its node's first rank.
void CompareNodeWaits(std::vector<NodeHealth>* nodes);

class JobHealth {
 public:
  static constexpr uint64_t kReportPeriodNs = 500'000'000;
  static constexpr uint64_t kSilentNs = 3'000'000'000;

  JobHealth() = default;
  // A job of `nodes` daemons seen from node `self`, from `start_ns` on.
  JobHealth(uint32_t nodes, uint32_t self, uint64_t start_ns);

  // `mine` as the control messages that carry it (one per chunk), for `job`.
  std::vector<ControlMessage> Encode(const NodeHealth& mine, uint64_t job);
  // A report chunk from node `from`; an error when it does not decode.
  Status Receive(uint32_t from, const ControlMessage& m, uint64_t now_ns);
  // Every other node as this one sees it now (`lost`: whether the transport lost each node).
  std::vector<NodeHealth> Peers(uint64_t now_ns, const std::vector<bool>& lost) const;

 private:
  struct Peer {
    NodeHealth latest;
    uint64_t received_ns = 0;  // 0: no report yet
    // The report being assembled: its number and chunks so far.
    uint64_t building_seq = UINT64_MAX;
    std::vector<std::string> chunks;
  };
  uint32_t self_ = 0;
  uint64_t start_ns_ = 0, seq_ = 0;
  std::vector<Peer> peers_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_JOB_HEALTH_H_
