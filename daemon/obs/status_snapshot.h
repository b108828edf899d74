// What `syncctl status` shows. Plain data: the engine captures its part (obs/status_builder.h),
// the status builder completes it off the engine thread; readers never touch engine state.
#ifndef SYNCD_DAEMON_OBS_STATUS_SNAPSHOT_H_
#define SYNCD_DAEMON_OBS_STATUS_SNAPSHOT_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/affinity.h"
#include "daemon/coord/job_health.h"
#include "daemon/coord/negotiation_stats.h"
#include "daemon/collectives/partial/stats.h"
#include "daemon/coord/topo_stats.h"
#include "daemon/core/residual_store.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/obs/metrics.h"
#include "daemon/obs/stragglers.h"
#include "daemon/obs/timeline_writer.h"
#include "syncd/client.h"

namespace syncd {

struct ClientSnapshot {
  uint64_t job_id = 0;  // the job it runs (as its rank named it; 0: unspecified)
  uint32_t rank = 0, local_rank = 0;
  int32_t pid = 0;
  // "attached", "lost", "left" (detached between collectives and not back in time, under
  // --on-loss continue or restore) or "vacant" (--vacant-ranks)
  std::string state;
  uint64_t ops = 0, bytes = 0, errors = 0;
  uint32_t submit_depth = 0, completion_depth = 0;
  double last_seen_s = -1;   // since its last submission (-1: none yet)
  std::string process;       // /proc state of its process: "running", "sleeping", "stopped", ...
  std::string unresponsive;  // why it holds others up (stopped; not calling syncd while awaited)
  char unresponsive_code = '-';  // UnresponsiveText's code for it
  // The others have waited for it past kUnresponsiveNs (obs/status_builder.h), for this tensor.
  bool awaited = false;
  std::string awaited_tensor;
  // A lost rank: why, when (Unix time, 0: not known), and whether the job went on without it
  // (--on-loss continue) or ended.
  std::string lost_why;
  double lost_unix_s = 0;
  bool job_went_on = false;
  double rejoin_grace_left_s = 0;  // a clean detach within its rejoin grace: the seconds left
};

// A tensor some ranks submitted while others have not, for longer than the stall threshold.
struct StallSnapshot {
  std::string name;
  double waiting_s = 0;
  std::vector<uint32_t> missing_ranks;    // global ranks that have not submitted it
  std::vector<uint32_t> submitted_ranks;  // global ranks known to have submitted it
  // A send or receive waiting for its peer: "send" or "recv" and its tag; "" for a collective.
  std::string transfer;
  int64_t tag = 0;
  uint64_t job_id = 0;  // the job whose set it is in
};

// One process set: its coordination, plan and stalls.
struct ProcessSetSnapshot {
  uint64_t job_id = 0;  // the job it belongs to (a node service serves several)
  int32_t id = 0;
  uint32_t size = 0;              // ranks in the set
  std::vector<uint32_t> ranks;    // global, ascending
  uint32_t nodes = 1;             // holding its ranks
  uint64_t pending_tensors = 0;   // waiting here for some local ranks
  // This node's requests of the set in flight, by state (core/request_ledger.h), every state in
  // its order: how many, and how long the oldest has been in that state.
  struct RequestsIn {
    const char* state = "";
    uint64_t count = 0;
    double oldest_s = 0;
  };
  std::vector<RequestsIn> requests;
  std::vector<PartialOpSnapshot> partial_ops;
  // TOPO, once a graph is registered.
  bool has_plan = false;
  uint64_t plan_hash = 0, plan_tensors = 0, plan_groups = 0, plan_gpu_tensors = 0;
  bool plan_in_use = false;
  TopoStats topo;
  uint64_t fallback_tensors = 0;
  uint32_t topo_next_group = 0;
  // Many-node jobs.
  bool coordinated = false;
  NegotiationStats negotiation;
  uint64_t pending_names = 0;
  std::string failure;
  std::vector<StallSnapshot> stalls;  // longest waiting first
};

// A job this daemon serves, and what it had of the engine (engine/tenant.h's Usage).
struct JobUsage {
  uint64_t job_id = 0;
  uint32_t ranks = 0;  // attached now
  uint64_t requests = 0, bytes = 0, errors = 0;
  double engine_s = 0;  // engine time on its rings and sets
  double waited_s = 0;  // engine time on other jobs while it had work in flight
  uint32_t node_rank = 0, nodes = 1, local_size = 0;  // its place: on links of its own, its own nodes
  uint64_t link_bytes = 0;  // bytes it sent to its other nodes since it started here
  uint64_t link_turns_waited = 0;  // its segments held back for other jobs' turns on the links
  const char* on_loss = "fail";  // its loss policy (its own, job add --on-loss, or the daemon's)
};

// One job's per-collective metrics and straggler figures (obs/completion_log.h).
struct JobFiguresSnapshot {
  CollectiveMetricsMap collectives;   // per (process set, kind)
  std::vector<StragglerRank> stragglers;  // this node's ranks of the job
  uint64_t straggler_window = 0, straggler_collectives = 0;
  StragglerWindow::NodeWait node_wait;  // this node's wait for the job's other nodes
};

struct StatusSnapshot {
  double uptime_s = 0;
  uint32_t node_rank = 0, node_count = 1, local_size = 0;
  std::vector<ClientSnapshot> clients;
  // By collective kind ("allreduce", ...), every kind of the registry in its order: tensors
  // executed and the bytes they moved.
  struct KindCount {
    uint64_t ops = 0, bytes = 0;
  };
  std::vector<std::pair<std::string, KindCount>> by_kind;
  uint64_t error_ops = 0;
  uint64_t fused_ops = 0, fused_tensors = 0;  // groups of kinds that fuse, and their members
  FusionHistogram fusion_sizes;               // tensors per such group
  CollectiveMetricsMap collectives;           // per (process set, kind): the metrics endpoint's
  uint64_t stall_warnings = 0;                // "stall:" warnings logged
  uint64_t health_messages = 0, health_bytes = 0;  // health reports sent to other daemons
  uint64_t open_requests = 0;                 // read off the rings, not yet completed
  uint64_t requests_finished_twice = 0;       // second completions refused (RequestLedger)
  uint64_t job_id = 0;                        // as the clients gave it (0: unspecified, or several)
  std::vector<JobUsage> jobs;                 // every job with a tenant here (engine/tenant.h)
  bool side_by_side = false;                  // jobs served side by side (a one-node node service)
  const char* on_loss = "fail";               // the job's loss policy (--on-loss: OnLossName)
  // This node's ranks over the last straggler_window collectives (straggler_collectives so far).
  std::vector<StragglerRank> stragglers;
  uint64_t straggler_window = 0, straggler_collectives = 0;
  // Jobs side by side: each one's metrics and stragglers (the fields above stay empty; a job's
  // view, StatusRequest.job, takes its own into them).
  std::map<uint64_t, JobFiguresSnapshot> job_figures;
  // Completion events the full queue refused (obs/completion_log.h): tensors missing from the
  // metrics and straggler figures (0 unless nobody folded them for a long time).
  uint64_t dropped_completion_events = 0;
  uint64_t engine_busy_ns = 0, engine_wakeups = 0;
  // The engine's cost per collective (issue: one wake-up per collective): its loop's turns that
  // did work, and the collectives completed here (with a rank of this node in them).
  uint64_t engine_work_turns = 0, collectives_completed = 0;
  uint64_t client_wakes = 0, engine_messages = 0;  // futex wakes of its clients; messages to other nodes
  std::string engine_wait;            // StatusReply.engine_wait
  double engine_core_wait_pct = -1;  // StatusReply.engine_core_wait_pct
  uint32_t engine_core_sharers = 0;  // StatusReply.engine_core_sharers
  double engine_cpu_s = 0;  // CPU time of the engine thread
  double daemon_cpu_s = 0;  // CPU time of the whole daemon (engine, control plane, gRPC)
  std::vector<StallSnapshot> stalls;  // every set's, longest waiting first
  // The unit of coordination: the global set first (id 0), the job's others after it.
  std::vector<ProcessSetSnapshot> process_sets;

  // Many-node jobs.
  bool coordinated = false;
  std::string coord_mode;
  std::vector<std::pair<uint32_t, std::string>> peers;  // node, state
  // Every daemon of the job and its ranks, node by node (this one's as of now, the others' as
  // their latest reports say): the job-wide health view.
  std::vector<NodeHealth> job_nodes;
  // Jobs of several nodes side by side on links of their own (a node service): each one's view
  // (`syncctl status --job ID` shows it as job_nodes).
  std::map<uint64_t, std::vector<NodeHealth>> own_link_job_nodes;
  // Elastic jobs: each change of the job's membership (Job::membership), first first.
  struct MembershipChange {
    uint32_t membership = 0;
    double unix_s = 0;
    std::string why;
  };
  std::vector<MembershipChange> membership_changes;
  TimelineState timeline;  // the daemon's one job's (jobs side by side: a job's view takes its own)
  std::map<uint64_t, TimelineState> job_timelines;  // every job's

  bool has_gpu = false;
  GpuStats gpu;
  // By syncd_compression: allreduces whose inter-node hop ran compressed (ExecutionCounters).
  struct Compressed {
    uint64_t tensors = 0, tensor_bytes = 0, wire_bytes = 0;
  };
  std::array<Compressed, SYNCD_COMPRESSION_COUNT> compressed{};
  ResidualStats residuals;  // the error-feedback residuals (core/residual_store.h)
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_STATUS_SNAPSHOT_H_
