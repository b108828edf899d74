// Engine::ExecuteAgreed: how a many-node job runs the tensors its daemons agreed on. Kept apart
// from engine.cc (intake, the loop, one-node execution) because it is the part that talks to
// the other nodes.
#include <cstring>
#include <deque>

#include "daemon/engine/engine.h"
#include "daemon/transport/host_collectives.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Fused groups move through the network in segments of this size, this many in flight.
constexpr size_t kPipelineSegmentBytes = 1 << 20;
constexpr size_t kPipelineDepth = 4;

}  // namespace

CommTask Engine::ExecuteAgreed(std::vector<ReadyTensor>* agreed, uint64_t tag, HostBuffer* buffer,
                               std::optional<uint64_t> gpu_position) {
  std::vector<ReadyTensor>& ready = *agreed;
  std::vector<FusionCandidate> candidates;
  for (const ReadyTensor& t : ready) {
    const Request& f = t.first();
    candidates.push_back({f.kind, f.dtype, f.op, f.prescale, f.postscale, f.bytes, f.gpu});
  }
  const std::vector<FusionGroup> groups = PlanFusion(candidates, config_.fusion_threshold);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const FusionGroup& g = groups[gi];
    const ReadyTensor& head = ready[g.front()];
    const Request& f = head.first();
    const uint64_t group_tag = tag | (uint64_t(gi % 4095 + 1) << 12);  // groups run one at a time
    if (f.gpu) {
      // The GPU executor's NCCL communicator spans every GPU of the job: no host pipeline. Every
      // daemon enqueues the agreed groups in the same order, as NCCL requires; under TOPO the
      // plan's groups and the negotiated ones take turns in one job-wide order (GpuOrder).
      const bool ordered = config_.coord == abi::CoordMode::kTopo;
      if (ordered) {
        WaitUntil turn = gpu_position ? gpu_order_.NegotiatedTurn(*gpu_position) : gpu_order_.PlanTurn();
        co_await turn;
        Status in_turn = gpu_position ? gpu_order_.Turn(*gpu_position) : Status::Ok();
        if (!in_turn.ok()) co_return in_turn;
      }
      StatusOr<uint64_t> ticket = EnqueueGpu(ready, g);
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
    } else if (f.kind == abi::OpKind::kAllreduce) {
      std::vector<const ReadyTensor*> members;
      uint64_t bytes = 0;
      for (size_t i : g) {
        members.push_back(&ready[i]);
        bytes += ready[i].first().bytes;
      }
      // Pipeline in segments: while segment k is on the wire, k+1 is reduced locally and k-1 is
      // scattered back. The stages cycle through kPipelineDepth segment slots, so the working
      // set stays in cache however large the fused group is.
      const size_t esize = abi::DtypeSize(f.dtype);
      const size_t count = bytes / esize;
      const size_t seg = std::max<size_t>(1, kPipelineSegmentBytes / esize);
      const size_t slot_bytes = seg * esize;
      const HostBuffer::Block fusion = buffer->Reserve(slot_bytes * kPipelineDepth);
      struct Stage {
        CommTask task;
        size_t begin, end;
        char* slot;
      };
      std::deque<Stage> inflight;
      AllreduceOptions opts;
      opts.slices = 1;  // the segments already overlap
      size_t next = 0;
      uint64_t segment = 0;
      while (next < count || !inflight.empty()) {
        while (next < count && inflight.size() < kPipelineDepth) {
          const size_t end = std::min(count, next + seg);
          char* slot = fusion->data() + (segment % kPipelineDepth) * slot_bytes;
          executor_.ReduceRange(members, next, end, slot);
          inflight.push_back(Stage{Allreduce(transport_.get(), group_tag | (segment % 4096), slot, fusion, end - next,
                                             f.dtype, f.op, opts),
                                   next, end, slot});
          ++segment;
          next = end;
        }
        std::vector<CommTask*> stages;
        for (Stage& s : inflight) stages.push_back(&s.task);
        Status st = co_await AwaitFirst(std::move(stages));
        if (!st.ok()) co_return st;
        executor_.ScatterRange(members, inflight.front().begin, inflight.front().end, inflight.front().slot);
        inflight.pop_front();
      }
    } else if (f.kind == abi::OpKind::kRegisterGraph) {
      RegisterPlan(ready[g.front()]);  // completes the registrations itself
    } else if (f.kind == abi::OpKind::kBroadcast) {
      const uint32_t root_node = uint32_t(f.root) / local_size_;
      const HostBuffer::Block fusion = buffer->Reserve(f.bytes);
      if (root_node == config_.node_rank)
        for (const Request& r : head.requests)
          if (int32_t(r.rank) == r.root && r.bytes > 0) memcpy(fusion->data(), r.data, r.bytes);
      CommTask inter = Broadcast(transport_.get(), group_tag, fusion->data(), fusion, f.bytes, root_node);
      Status st = co_await Await(&inter);
      if (!st.ok()) co_return st;
      executor_.ScatterBroadcast(head, fusion->data());
    }
    // A barrier needs nothing more: being agreed means every rank of every node has arrived.
    CountExecuted(ready, g);
    for (size_t i : g) {
      CompleteAll(ready[i].requests, Status::Ok());
      ready[i].requests.clear();  // done: nothing left to fail should the job break later
    }
    FlushClients();
  }
  co_return Status::Ok();
}

}  // namespace syncd
