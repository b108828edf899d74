// The job-wide health view, as NCCL's RAS subsystem gives NCCL users: every daemon of a many-node
// job builds a report of its node every kReportPeriodNs (its daemon, each of its ranks' last call
// into syncd, process state and straggler figures) and keeps the latest report of each other node.
// So `syncctl status` on any node shows every daemon and rank of the job, and names a daemon whose
// reports stopped coming for kSilentNs (stopped, hung, or its network gone) without waiting for a
// stall timeout.
//
// Reports travel in bundles through a tree (coord/health_tree.h: up to node 0, the whole view back
// down, round a silent node), so each daemon sends O(log N) bundles per period, not one to every
// other node. A bundle is text: for each node it carries, a line "@node age_ms" and that node's
// report (a header line and one line per rank); the age grows with every hop, so a report's age at
// the viewer is how long ago its node built it, whatever way it came. How a bundle crosses the
// network (inline in a control message, or a control message and the bundle after it) is the
// engine's (engine/health.cc).
//
// Threads: engine thread only.
#ifndef SYNCD_DAEMON_COORD_JOB_HEALTH_H_
#define SYNCD_DAEMON_COORD_JOB_HEALTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/coord/health_tree.h"

namespace syncd {

// Why a rank holds the others up, in words. `code`: 'S' stopped, 'Z' exited (zombie), 'N' not
// calling syncd while a tensor waits for it (`tensor`: which, "" when not known here), '-' none.
std::string UnresponsiveText(char code, double last_seen_s, const std::string& process, const std::string& tensor);

struct RankHealth {
  uint32_t rank = 0;  // global
  int32_t pid = 0;
  bool attached = true;      // false: the rank is gone (lost, or `left`)
  bool left = false;         // it detached between collectives and the job went on without it
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

// A bundle of reports due to go to node `to`: `down` from the node above, or up towards the root.
struct HealthBundle {
  uint32_t to = 0;
  bool down = false;
  std::string text;
};

class JobHealth {
 public:
  static constexpr uint64_t kReportPeriodNs = HealthTree::kPeriodNs;
  static constexpr uint64_t kSilentNs = 3'000'000'000;

  JobHealth() = default;
  // A job of `nodes` daemons seen from node `self`, from `start_ns` on.
  JobHealth(uint32_t nodes, uint32_t self, uint64_t start_ns);

  // This node's new report; the bundles due now. `lost[p]`: the transport lost node p.
  std::vector<HealthBundle> Report(const NodeHealth& mine, uint64_t now_ns, const std::vector<bool>& lost);
  // A bundle from node `from` (`down`: from a node above); the bundles it makes due go into *out.
  // An error naming the node when it does not decode (nothing of it is kept then).
  Status Receive(uint32_t from, bool down, const std::string& text, uint64_t now_ns, const std::vector<bool>& lost,
                 std::vector<HealthBundle>* out);
  // Every other node as this one sees it now.
  std::vector<NodeHealth> Peers(uint64_t now_ns, const std::vector<bool>& lost) const;
  // Where this node's bundles went up last (itself: it is the root, or acts as one).
  uint32_t above() const { return above_; }

  // One report as text and back (`from`: the node it names, for the error).
  static std::string EncodeReport(const NodeHealth& h);
  static StatusOr<NodeHealth> DecodeReport(uint32_t from, const std::string& text);

 private:
  struct Peer {
    NodeHealth latest;
    std::string text;        // as it came (forwarded as it is)
    uint64_t origin_ns = 0;  // when its node built it, on this node's clock (now less its age); 0: none yet
    bool from_below = false; // it came up from below (it goes on up)
  };
  // This node's bundle up, or down to those below it when it is the root.
  void Wave(uint64_t now_ns, const std::vector<bool>& lost, std::vector<HealthBundle>* out);
  void Down(uint64_t now_ns, const std::vector<bool>& lost, std::vector<HealthBundle>* out) const;
  std::string Bundle(bool down, uint64_t now_ns) const;

  uint32_t self_ = 0;
  uint64_t start_ns_ = 0;
  HealthTree tree_;
  uint32_t above_ = 0;
  std::string mine_;  // this node's latest report, as text
  uint64_t mine_ns_ = 0;
  std::vector<Peer> peers_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_JOB_HEALTH_H_
