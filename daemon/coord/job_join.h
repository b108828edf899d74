// The start of a job's coordination on every node: a two-round handshake that makes sure nothing
// an earlier job left on the wire can reach the new job's receives.
//
//  1. Every node sends HELLO(job) to every other, once it has left its previous job (its earlier
//     messages were all sent before). Messages from one peer arrive in order, so once a peer's
//     HELLO is in, everything it sent for an earlier job is in too.
//  2. With every HELLO in, each node posts its READY receives, drops every other message that
//     arrived (Transport::DiscardArrived) and sends READY. No node sends anything of the new job
//     before it has every READY, so nothing the drop could hit belongs to the new job.
//
// GPUs: a node whose GPU path an earlier job aborted says so in its HELLO; node 0, once every
// HELLO is in, makes a fresh NCCL unique id if any node asked and sends it in its READY, so that
// every node rebuilds the job's communicator with it before the first GPU collective (the
// communicator spans every node: all rebuild, or none).
//
// TOPO: a global set made afresh (a membership change: a lost node, a node taken back, a daemon
// restarted) runs the job's registered plan on, if its nodes can agree on it. Each node names the
// plan it holds in its HELLO (the old set's, or none: a restarted daemon has none), so every node
// knows what every node holds. If the holders agree on one plan, the lowest of them sends it
// (plan/plan_codec.h) to each node without it once the READY round is done (round 3), and each
// checks that it hashes to what was named; if they hold different plans, every node goes on
// without one. Every node decides the same from the same HELLOs.
//
// Engine thread only; the task is polled like any collective.
#ifndef SYNCD_DAEMON_COORD_JOB_JOIN_H_
#define SYNCD_DAEMON_COORD_JOB_JOIN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/plan/topo.h"
#include "daemon/transport/comm_task.h"

namespace syncd {

// The rounds' tags: kJoinHelloTag, kJoinReadyTag, kJoinPlanTag (transport/tag_space.h).

// The GPU part of the handshake. `rebuild`: this node's GPU path was aborted. `make_id` (node 0):
// a fresh NCCL unique id. Out: `nccl_id`, set on every node when some node asked (empty: no
// rebuild), or `error` when node 0 could not make one.
struct GpuRestart {
  bool rebuild = false;
  std::function<StatusOr<std::string>()> make_id;
  std::string nccl_id;
  Status error;
};

// The TOPO part. `plan`: in, the plan this node holds (null: none); out, the set's (null: none).
// `error`: why the set goes on without a plan although some node held one.
struct PlanCarry {
  std::shared_ptr<const TopoPlan> plan;
  Status error;
};

// Runs the handshake for `job`. `joined[p]` becomes true once node p's HELLO is in (for stall
// reports: the nodes whose ranks have not started the job yet); `gpu` and `plan` (may be null:
// not this set's business) as above. All must outlive the task. A plan that does not arrive
// whole, or hashes to another than was named, fails the handshake (the set could not run).
CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined, GpuRestart* gpu = nullptr,
                 PlanCarry* plan = nullptr);

// The TOPO part alone, outside a job's start: a plan registration agreed while some node had no
// rank to register with (every rank of it lost, or vacant since the start) runs it on every node
// of the set, so that such a node gets the plan the others registered. Each node names the plan
// it holds (on `tag`), and the plan moves as in round 3 (on `tag + 1`).
CommTask SharePlan(Transport* t, uint64_t tag, PlanCarry* plan);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_JOB_JOIN_H_
