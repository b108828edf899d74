// Engine::ExecuteAgreed: how a many-node job runs the tensors its daemons agreed on. Kept apart
// from engine.cc (intake, the loop, one-node execution) because it is the part that talks to
// the other nodes. What each group does is its kind's (collectives/); this is the order.
#include "daemon/engine/engine.h"

namespace syncd {

CommTask Engine::ExecuteAgreed(std::vector<ReadyTensor>* agreed, uint64_t tag, HostBuffer* buffer,
                               std::optional<uint64_t> gpu_position) {
  std::vector<ReadyTensor>& ready = *agreed;
  const std::vector<FusionGroup> groups = Fuse(ready);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const FusionGroup& g = groups[gi];
    const Request& f = ready[g.front()].first();
    const uint64_t group_tag = tag | (uint64_t(gi % 4095 + 1) << 12);  // groups run one at a time
    if (f.kind == abi::OpKind::kRegisterGraph) {
      RegisterPlan(ready[g.front()]);  // completes the registrations itself
    } else if (f.gpu) {
      CommTask run = RunAgreedOnGpu(&ready, g, gpu_position);
      Status st = co_await Await(&run);
      if (!st.ok()) co_return st;
    } else if (const Collective* kind = FindCollective(f.kind)) {
      CommTask run = kind->RunAcross(Members(ready, g), AcrossNodes{transport_.get(), &executor_, buffer, group_tag,
                                                                    local_size_, config_.node_rank});
      Status st = co_await Await(&run);
      if (!st.ok()) co_return st;
    }
    CountExecuted(ready, g);
    for (size_t i : g) {
      CompleteAll(ready[i].requests, Status::Ok());
      ready[i].requests.clear();  // done: nothing left to fail should the job break later
    }
    FlushClients();
  }
  co_return Status::Ok();
}

CommTask Engine::RunAgreedOnGpu(std::vector<ReadyTensor>* agreed, FusionGroup g, std::optional<uint64_t> gpu_position) {
  // The GPU executor's NCCL communicator spans every GPU of the job: no host pipeline. Every
  // daemon enqueues the agreed groups in the same order, as NCCL requires; under TOPO the plan's
  // groups and the negotiated ones take turns in one job-wide order (GpuOrder).
  const bool ordered = config_.coord == abi::CoordMode::kTopo;
  if (ordered) {
    WaitUntil turn = gpu_position ? gpu_order_.NegotiatedTurn(*gpu_position) : gpu_order_.PlanTurn();
    co_await turn;
    Status in_turn = gpu_position ? gpu_order_.Turn(*gpu_position) : Status::Ok();
    if (!in_turn.ok()) co_return in_turn;
  }
  StatusOr<uint64_t> ticket = EnqueueGpu(*agreed, g);
  if (!ticket.ok()) co_return ticket.status();
  if (ordered && !gpu_position) gpu_order_.PlanIssued();
  const uint64_t id = *ticket;
  Status gpu_error;
  CommState state = CommState::kPending;
  WaitUntil gpu_done;
  gpu_done.ready = [this, id, &state, &gpu_error] {
    state = gpu_->Test(id, &gpu_error);
    return state != CommState::kPending;
  };
  co_await gpu_done;
  if (state == CommState::kFailed) co_return gpu_error;
  co_return Status::Ok();
}

}  // namespace syncd
