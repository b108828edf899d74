// The parts a process set (process_set.h) owns, each for one role: agreed work being run
// (AgreedRun), the set's TOPO state (SetTopo), its GPU work (SetGpu) and the storage its turns
// reuse (SetScratch). They hold state; what it means is the set's.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_PROCESS_SET_PARTS_H_
#define SYNCD_DAEMON_ENGINE_PROCESS_SET_PARTS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "daemon/collectives/collective.h"
#include "daemon/coord/agreed_work.h"
#include "daemon/coord/gpu_order.h"
#include "daemon/coord/job_join.h"
#include "daemon/coord/topo_runner.h"
#include "daemon/core/tensor_table.h"
#include "daemon/core/timeline.h"
#include "daemon/plan/fusion.h"
#include "daemon/plan/topo.h"
#include "daemon/transport/comm_task.h"
#include "daemon/transport/host_buffer.h"

namespace syncd {

// Agreed work being run: a negotiated cycle's, or a TOPO plan group.
struct AgreedRun {
  AgreedWork work;
  CommTask task;  // ExecuteAgreed (or ExecuteLocal) over work.tensors
  bool active = false;
  std::vector<FusionGroup> groups;  // ExecuteAgreed's, kept from run to run for their storage
};

// A set's TOPO state: the plan its ranks registered (any --coord mode), and under --coord topo the
// runner that issues the plan's groups, the group running, and the stand-ins of a node whose
// every rank joined (topo_stand_in.cc).
struct SetTopo {
  std::shared_ptr<const TopoPlan> plan;  // the set's registered plan (any mode)
  std::unique_ptr<TopoRunner> runner;    // --coord topo, once a plan is registered
  AgreedRun run;                         // a plan group being run
  HostBuffer fusion_buffer;              // its own: negotiated and plan groups may be in flight at once
  uint64_t fallback_tensors = 0;         // names outside the plan while one was in use
  // The global set of a many-node job: the job start's TOPO part (job_join.h), applied once the
  // negotiator has joined (carry_pending), before its first cycle.
  PlanCarry carry;
  bool carry_pending = false;
  // A node whose every rank joined (hvd.join, or lost for good) has no tensors of its own to start
  // the plan's groups with: it tells the others, which tell it each group run they issue.
  struct StandIn {
    bool joined_here = false;        // every rank here joined, and the others were told
    std::vector<bool> joined_nodes;  // by node of the set: they told us so (until our join)
    bool wanted = false;             // another node ran group run `wanted_seq` while we stood in
    uint64_t wanted_seq = 0;
    uint64_t running_seq = 0;        // the group run issued here last
  };
  StandIn stand_in;
};

// A set's GPU work: one node's groups in flight, the job-wide order of GPU collectives, and the
// restart of a GPU path an earlier job aborted.
struct SetGpu {
  struct Op {
    uint64_t ticket;
    std::vector<std::vector<Request>> requests;  // by member tensor
    TraceEvent trace;  // what the timeline records once it is done (kGpu)
  };
  std::vector<Op> ops;  // one-node GPU groups in flight
  // --coord topo on many nodes: one order of plan and negotiated GPU collectives on every node.
  GpuOrder order;
  // The global set of a many-node job with GPUs: the job start's GPU part (job_join.h), applied
  // once the negotiator has joined (restart_pending).
  GpuRestart restart;
  bool restart_pending = false;
};

// Storage a set's turns reuse (no heap allocation per collective once sizes were seen): Poll's
// tensors, Fuse's candidates, the one-node path's groups and members, PlaceResults' placement.
// A one-node host allreduce run a slice at a time, so that the engine serves the other jobs it
// serves between two slices (engine/tenant.h, EngineShare); its tensors are held, and complete,
// once its last slice is done.
struct SlicedRun {
  std::vector<ReadyTensor> tensors;  // the fused group's members, in order
  FusionGroup group;                 // 0, 1, ... over `tensors`
  size_t next = 0, count = 0;        // elements done, and in all
  uint64_t t0 = 0;
  uint32_t id = 0;
};
struct SetSlices {
  std::deque<SlicedRun> runs;  // oldest first
  size_t tensors() const {
    size_t n = 0;
    for (const SlicedRun& r : runs) n += r.tensors.size();
    return n;
  }
};

struct SetScratch {
  std::vector<ReadyTensor> ready, local_ready;
  std::vector<FailedTensor> failed;
  std::vector<FusionCandidate> candidates;
  std::vector<bool> fusion_taken;
  std::vector<FusionGroup> local_groups;
  CollectiveGroup members;
  Collective::Placement placement;  // its rows' storage reused
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_PROCESS_SET_PARTS_H_
