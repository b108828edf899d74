// How a process set runs what is ready or agreed: fusion, then each group by its kind's unit
// (collectives/) on the host path or the GPUs, then completion. One node runs at once; many
// nodes run what every daemon agreed, in the same order everywhere.
#include "daemon/engine/process_set.h"

#include <absl/container/inlined_vector.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "daemon/collectives/allreduce/feedback.h"
#include "daemon/core/float_casts.h"
#include "daemon/transport/host_collectives.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

CollectiveGroup Members(const std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  CollectiveGroup members;
  members.reserve(g.size());
  for (size_t i : g) members.push_back(&ready[i]);
  return members;
}

}  // namespace

void ProcessSet::Fuse(const std::vector<ReadyTensor>& ready, std::vector<FusionGroup>* groups) {
  scratch_.candidates.clear();
  for (const ReadyTensor& t : ready) {
    const Request& f = t.first();
    const Collective* kind = FindCollective(f.kind);
    scratch_.candidates.push_back({kind != nullptr ? kind->FusionKeyOf(f) : std::nullopt, f.bytes});
  }
  PlanFusionInto(scratch_.candidates, config_.fusion_threshold, groups, &scratch_.fusion_taken);
}

void ProcessSet::Execute(std::vector<ReadyTensor>& ready, Stream stream) {
  // One node: nothing waits inside, so the groups' storage is the set's, reused turn after turn
  // (taken, and given back at the end, in case a completion ever runs Execute again).
  std::vector<FusionGroup> groups = std::move(scratch_.local_groups);
  Fuse(ready, &groups);
  for (const FusionGroup& g : groups) {
    ReadyTensor& head = ready[g.front()];
    if (head.first().kind == abi::OpKind::kRegisterGraph) {
      RegisterPlan(head, head.first().plan);  // completes the registrations itself
      continue;
    }
    if (abi::IsSetChange(head.first().kind)) {
      set_changes_.push_back(std::move(head));  // the job applies it, and completes it
      head.requests.clear();
      continue;
    }
    if (head.first().gpu) {
      ExecuteGpu(ready, g);
      continue;
    }
    // A failure notice is never agreed (CheckAgreement) and never gets here.
    if (CountsStandIns(head.first())) {
      int64_t stand_ins = 0;
      for (size_t i : g) stand_ins = std::max<int64_t>(stand_ins, HostExecutor::AbsentIn(ready[i]));
      if (FailsForLoss(ready, g, stand_ins - stand_in_baseline_, stream)) continue;
    }
    const uint64_t t0 = abi::MonotonicNs();
    const uint32_t id = StartGroup(ready, g);
    if (stream == kNegotiated && Slice(ready, g, id, t0)) continue;
    PlaceResults(ready, g);
    if (const Collective* kind = FindCollective(head.first().kind)) {
      scratch_.members.clear();
      for (size_t i : g) scratch_.members.push_back(&ready[i]);
      kind->RunLocal(scratch_.members, host_);
    }
    CountExecuted(ready, g);
    RecordGroup(ready, g, t0, id);
    CompleteRan(ready, g);
  }
  scratch_.local_groups = std::move(groups);
}

bool ProcessSet::Slice(std::vector<ReadyTensor>& ready, const FusionGroup& g, uint32_t id, uint64_t t0) {
  const EngineShare* share = hooks_.share;
  const Request& f = ready[g.front()].first();
  if (share == nullptr || share->slice_bytes == 0 || f.kind != abi::OpKind::kAllreduce || f.op == SYNCD_ADASUM)
    return false;
  uint64_t bytes = 0;
  for (size_t i : g) bytes += ready[i].first().bytes;
  if (bytes <= share->slice_bytes) return false;
  SlicedRun& run = slices_.runs.emplace_back();
  run.count = bytes / abi::DtypeSize(f.dtype);
  run.t0 = t0;
  run.id = id;
  for (size_t i : g) {
    run.group.push_back(run.tensors.size());
    run.tensors.push_back(std::move(ready[i]));
    ready[i].requests.clear();  // completed with the run
  }
  return true;
}

bool ProcessSet::RunSlices(bool all) {
  if (slices_.runs.empty()) return false;
  const EngineShare* share = hooks_.share;
  // Slices left once another job waits (none of the count goes while nobody does).
  uint32_t left = share != nullptr ? std::max(1u, share->slices_per_poll) : 1;
  // What the others wait with, as seen after each slice: it decides whether this job goes on
  // and how large its next slice is.
  auto others = [&] { return all || share == nullptr || !share->others_waiting ? OthersWait::kNone : share->others_waiting(); };
  OthersWait wait = others();
  while (!slices_.runs.empty() && (all || left > 0)) {
    SlicedRun& run = slices_.runs.front();
    scratch_.members.clear();
    for (const ReadyTensor& t : run.tensors) scratch_.members.push_back(&t);
    const size_t esize = abi::DtypeSize(run.tensors.front().first().dtype);
    // Large slices only while the others wait with large allreduces alone: a small request may
    // arrive at any moment otherwise, and waits for the slice in progress.
    const uint64_t bytes = share == nullptr ? 0 : wait == OthersWait::kLarge ? share->slice_bytes * kLargeSliceFactor
                                                                                : share->slice_bytes;
    const size_t slice = all || bytes == 0 ? run.count : std::max<size_t>(1, bytes / esize);
    const size_t end = std::min(run.count, run.next + slice);
    host_.AllreduceRange(scratch_.members, run.next, end);
    run.next = end;
    wait = others();
    if (wait != OthersWait::kNone) --left;
    if (run.next < run.count) continue;
    CountExecuted(run.tensors, run.group);
    RecordGroup(run.tensors, run.group, run.t0, run.id);
    CompleteRan(run.tensors, run.group);
    for (ReadyTensor& t : run.tensors) Recycle(t.requests);
    slices_.runs.pop_front();
  }
  return true;
}

CommTask ProcessSet::ExecuteLocal(std::vector<ReadyTensor>* ready, uint64_t) {
  Execute(*ready, kPlan);
  for (ReadyTensor& t : *ready) t.requests.clear();
  co_return Status::Ok();
}

CommTask ProcessSet::ExecuteAgreed(std::vector<ReadyTensor>* agreed, uint64_t tag, HostBuffer* buffer,
                                   std::optional<uint64_t> gpu_position, std::vector<FusionGroup>* fused,
                                   Stream stream) {
  std::vector<ReadyTensor>& ready = *agreed;
  const uint64_t agreed_ns = abi::MonotonicNs();
  for (ReadyTensor& t : ready)
    for (Request& r : t.requests) r.agreed_ns = agreed_ns;
  std::vector<FusionGroup>& groups = *fused;  // the run's: lives across the awaits below
  Fuse(ready, &groups);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const FusionGroup& g = groups[gi];
    const Request& f = ready[g.front()].first();
    const uint64_t group_tag = GroupTag(tag, gi);  // groups run one at a time
    const uint64_t t0 = abi::MonotonicNs();
    const uint32_t id = StartGroup(ready, g);
    if (f.kind == abi::OpKind::kRegisterGraph) {
      // A node with no rank to register (each lost or vacant) gets the plan from one that has it.
      PlanCarry carry{f.plan, Status::Ok()};
      CommTask share = SharePlan(place_.comm, SliceTag(group_tag), &carry);
      if (Status st = co_await Await(&share); !st.ok()) co_return st;
      RegisterPlan(ready[g.front()], carry.plan);  // completes the registrations itself
    } else if (abi::IsSetChange(f.kind)) {
      set_changes_.push_back(std::move(ready[g.front()]));  // the job applies it, and completes it
      ready[g.front()].requests.clear();
    } else if (f.gpu) {
      CommTask run = RunAgreedOnGpu(&ready, g, gpu_position);
      Status st = co_await Await(&run);
      if (!st.ok()) co_return st;
      RecordGroup(ready, g, t0, id, TraceKind::kGpu);
    } else if (const Collective* kind = FindCollective(f.kind)) {
      // Lost ranks' stand-ins may be on any node: each member's, summed over the nodes before any
      // data moves (the last tag of the group's 4,096: the kind reaches it only after this), and
      // after them the nodes' baselines (StartAfreshWithStandIns).
      // Owned by the network's operations too: a failure may cut the exchange off while they hold it.
      std::shared_ptr<std::vector<int64_t>> stand_ins;
      if (CountsStandIns(f)) {
        stand_ins = std::make_shared<std::vector<int64_t>>();
        for (size_t i : g) stand_ins->push_back(HostExecutor::AbsentIn(ready[i]));
        stand_ins->push_back(stand_in_baseline_);
        AllreduceOptions opts;
        opts.slices = 1;
        opts.algorithm = config_.host_allreduce;
        CommTask counts = syncd::Allreduce(place_.comm, group_tag | 4095, stand_ins->data(), stand_ins,
                                           stand_ins->size(), SYNCD_INT64, SYNCD_SUM, opts);
        Status st = co_await Await(&counts);
        if (!st.ok()) co_return st;
        const int64_t most = *std::max_element(stand_ins->begin(), stand_ins->end() - 1);
        if (FailsForLoss(ready, g, most - stand_ins->back(), stream)) {
          for (size_t i : g) Recycle(ready[i].requests);
          continue;
        }
      }
      AcrossNodes across{place_.comm, &host_, buffer, group_tag, &place_.offsets, &place_.ranks, place_.node_rank,
                         hooks_.timeline, place_.id, config_.host_allreduce, stand_ins, hooks_.residuals};
      // A node service's job (on every node of it): segments that leave the engine to the others soon.
      if (config_.node_service) across.segment_bytes = kNodeServiceSegmentBytes;
      if (hooks_.share != nullptr && hooks_.share->others) across.side_by_side = &side_by_side_;
      Status refused;  // the data's failure, the same on every node: the job goes on
      across.refused = &refused;
      PlaceResults(ready, g);
      CommTask run = kind->RunAcross(Members(ready, g), std::move(across));
      Status st = co_await Await(&run);
      if (!st.ok()) co_return st;
      if (!refused.ok()) {
        for (size_t i : g)
          if (!ready[i].requests.empty()) Finish(ready[i].requests, Status(refused.code(), refused.message()));
        for (size_t i : g) Recycle(ready[i].requests);
        continue;
      }
      RecordGroup(ready, g, t0, id);
    }
    CountExecuted(ready, g, !f.gpu);
    CompleteRan(ready, g);
    // Done: nothing left to fail should the job break later. The engine sends the completions
    // out once this run waits (on the network, for the next group) or ends.
    for (size_t i : g) Recycle(ready[i].requests);
  }
  co_return Status::Ok();
}

bool ProcessSet::CountsStandIns(const Request& first) const {
  if (place_.id != 0 || config_.on_loss == OnLoss::kFail || first.gpu) return false;
  // AVERAGE divides by the tensors summed (the kinds that reduce).
  const Collective* kind = FindCollective(first.kind);
  const bool averages = first.op == SYNCD_AVERAGE && kind != nullptr && kind->reduces();
  return config_.on_loss == OnLoss::kRestore || averages;
}

bool ProcessSet::FailsForLoss(std::vector<ReadyTensor>& ready, const FusionGroup& g, int64_t stand_ins,
                              Stream stream) {
  if (config_.on_loss != OnLoss::kRestore) return false;
  // Fewer stand-ins (a replacement took a lost rank's place): a later loss fails again.
  const int64_t lost = stand_ins - std::exchange(loss_stand_ins_[stream], stand_ins);
  if (lost <= 0) return false;
  for (size_t i : g) {
    std::vector<Request>& rs = ready[i].requests;
    if (rs.empty()) continue;
    const std::string ranks = std::to_string(lost) + (lost == 1 ? " rank" : " ranks");
    Status failed(SYNCD_ERR_RANK_LOST,
                  "tensor '" + rs.front().name + "': " + ranks +
                      " of the job lost while it was in flight (--on-loss restore: it fails on every rank "
                      "still running, the job goes on without the lost; hvd.elastic.run restores the last "
                      "commit)");
    Finish(rs, std::move(failed));
  }
  return true;
}

CommTask ProcessSet::RunAgreedOnGpu(std::vector<ReadyTensor>* agreed, FusionGroup g,
                                    std::optional<uint64_t> gpu_position) {
  // The GPU executor's NCCL communicator spans every GPU of the job: no host pipeline. Every
  // daemon enqueues the agreed groups in the same order, as NCCL requires; under TOPO the plan's
  // groups and the negotiated ones take turns in one job-wide order (GpuOrder).
  const bool ordered = config_.coord == abi::CoordMode::kTopo;
  if (ordered) {
    WaitUntil turn = gpu_position ? gpu_.order.NegotiatedTurn(*gpu_position) : gpu_.order.PlanTurn();
    co_await turn;
    Status in_turn = gpu_position ? gpu_.order.Turn(*gpu_position) : Status::Ok();
    if (!in_turn.ok()) co_return in_turn;
  }
  StatusOr<uint64_t> ticket = EnqueueGpu(*agreed, g);
  if (!ticket.ok()) co_return ticket.status();
  if (ordered && !gpu_position) gpu_.order.PlanIssued();
  const uint64_t id = *ticket;
  Status gpu_error;
  CommState state = CommState::kPending;
  WaitUntil gpu_done;
  gpu_done.ready = [this, id, &state, &gpu_error] {
    state = place_.gpu->Test(id, &gpu_error);
    return state != CommState::kPending;
  };
  co_await gpu_done;
  if (state == CommState::kFailed) co_return gpu_error;
  co_return Status::Ok();
}

StatusOr<uint64_t> ProcessSet::EnqueueGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  const Request& f = ready[g.front()].first();
  const Collective* kind = FindCollective(f.kind);
  if (kind == nullptr) return InvalidArgument(std::string(OpKindName(f.kind)) + " has no GPU path");
  if (place_.gpu == nullptr)
    return InvalidArgument("process set " + std::to_string(place_.id) + " has no GPU path yet: submit host tensors");
  return kind->EnqueueGpu(Members(ready, g), OnGpus{place_.gpu, world_size_, place_.local_size()});
}

void ProcessSet::ExecuteGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  StatusOr<uint64_t> ticket = EnqueueGpu(ready, g);
  if (!ticket.ok()) {
    for (size_t i : g) {
      Status failed(ticket.status().code(), "tensor '" + ready[i].first().name + "': " + ticket.status().message());
      Finish(ready[i].requests, std::move(failed));
    }
    return;
  }
  CountExecuted(ready, g);
  SetGpu::Op op{*ticket, {}, {}};
  if (hooks_.timeline->on()) {
    op.trace.kind = TraceKind::kGpu;
    op.trace.t0 = abi::MonotonicNs();
    op.trace.set = place_.id;
    op.trace.count = uint32_t(g.size());
    op.trace.op_kind = uint8_t(ready[g.front()].first().kind);
    op.trace.group = StartGroup(ready, g);
    for (size_t i : g) op.trace.bytes += ready[i].first().bytes;
  }
  for (size_t i : g) op.requests.push_back(std::move(ready[i].requests));
  gpu_.ops.push_back(std::move(op));
}

bool ProcessSet::PollGpu() {
  bool did = false;
  for (size_t i = 0; i < gpu_.ops.size();) {
    Status error;
    const CommState state = place_.gpu->Test(gpu_.ops[i].ticket, &error);
    if (state == CommState::kPending) {
      ++i;
      continue;
    }
    for (std::vector<Request>& rs : gpu_.ops[i].requests)
      if (!rs.empty()) {
        Status done = state == CommState::kDone ? Status::Ok()
                                                : Status(error.code(), "tensor '" + rs.front().name + "': " + error.message());
        Finish(rs, std::move(done));
      }
    if (gpu_.ops[i].trace.t0 != 0) {
      gpu_.ops[i].trace.t1 = abi::MonotonicNs();
      hooks_.timeline->Record(gpu_.ops[i].trace);
    }
    gpu_.ops.erase(gpu_.ops.begin() + i);
    did = true;
  }
  return did;
}

void ProcessSet::CountExecuted(const std::vector<ReadyTensor>& ready, const FusionGroup& g, bool across) {
  if (ready[g.front()].requests.empty()) return;  // completed by whoever ran it (a registration)
  const Request& f = ready[g.front()].first();
  const Collective* kind = FindCollective(f.kind);
  if (kind == nullptr) return;
  StatusSnapshot::KindCount& count = counters_->by_kind.at(uint32_t(f.kind));
  count.ops += g.size();
  for (size_t i : g) count.bytes += kind->ResultBytes(ready[i], 0);
  if (kind->FusionKeyOf(f)) {
    ++counters_->fused_ops;
    counters_->fused_tensors += g.size();
    counters_->fusion_sizes.Observe(kFusionBounds, double(g.size()));
  }
  // A group fuses one compression (FusionKey); its members crossed the nodes in the wire's dtype.
  if (!across || f.compression <= SYNCD_COMPRESSION_NONE || f.compression >= SYNCD_COMPRESSION_COUNT) return;
  StatusSnapshot::Compressed& c = counters_->compressed[f.compression];
  if (f.compression == SYNCD_COMPRESSION_POWERSGD) {  // each member's factors, or itself
    for (size_t i : g) {
      const Request& r = ready[i].first();
      ++c.tensors;
      c.tensor_bytes += r.bytes;
      c.wire_bytes += PowerSgdWireBytes(r.compression_ppm, r.shape, r.bytes, abi::DtypeSize(r.dtype));
    }
    return;
  }
  if (IsFeedbackCompression(f.compression)) {  // the group's segments, as each node sent them
    absl::InlinedVector<uint64_t, 8> bytes;
    for (size_t i : g) bytes.push_back(ready[i].first().bytes);
    c.tensors += g.size();
    for (uint64_t b : bytes) c.tensor_bytes += b;
    c.wire_bytes += FeedbackWireBytes(f.compression, f.compression_ppm, bytes, abi::DtypeSize(f.dtype));
    return;
  }
  const syncd_dtype wire = WireDtype(f.compression, f.dtype);
  if (wire == f.dtype) return;
  for (size_t i : g) {
    const uint64_t bytes = ready[i].first().bytes;
    ++c.tensors;
    c.tensor_bytes += bytes;
    c.wire_bytes += bytes / abi::DtypeSize(f.dtype) * abi::DtypeSize(wire);
  }
}

uint32_t ProcessSet::StartGroup(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  const uint32_t id = ++group_seq_;
  const uint64_t now = abi::MonotonicNs();
  for (size_t i : g) Enter(ready[i].requests, RequestState::kExecuting, now);
  if (!hooks_.timeline->on()) return id;
  for (size_t i : g)
    for (Request& r : ready[i].requests) {
      r.exec_ns = now;
      r.group = id;
    }
  return id;
}

void ProcessSet::RecordGroup(const std::vector<ReadyTensor>& ready, const FusionGroup& g, uint64_t t0, uint32_t id,
                             TraceKind what) {
  Timeline* tl = hooks_.timeline;
  if (!tl->on() || ready[g.front()].requests.empty()) return;
  TraceEvent e;
  e.kind = what;
  e.t0 = t0;
  e.t1 = abi::MonotonicNs();
  e.set = place_.id;
  e.group = id;
  e.count = uint32_t(g.size());
  e.op_kind = uint8_t(ready[g.front()].first().kind);
  e.name = tl->Name(ready[g.front()].first().name);
  for (size_t i : g) e.bytes += ready[i].first().bytes;
  tl->Record(e);
}

void ProcessSet::PlaceResults(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  for (size_t i : g) {
    ReadyTensor& t = ready[i];
    const Collective* kind = FindCollective(t.first().kind);
    if (kind == nullptr) continue;
    for (size_t l = 0; l < t.requests.size(); ++l) {
      Collective::Placement* place = &scratch_.placement;
      Request& r = t.requests[l];
      if (!kind->ResultPlace(t, l, place) || r.results == nullptr) continue;
      if (std::optional<ResultArea::Block> block = r.results->Allocate(place->bytes, place->rows)) {
        r.result = block->data;
        r.result_offset = block->offset;
      } else {
        r.failure = "tensor '" + r.name + "': rank " + std::to_string(r.rank) + "'s result area has no room for " +
                    std::to_string(place->bytes) + " bytes (" + std::to_string(r.results->bytes_in_use()) + " of " +
                    std::to_string(r.results->capacity()) + " in use by " + std::to_string(r.results->blocks()) +
                    " results not yet released; raise --result-area-size)";
      }
    }
  }
}

void ProcessSet::CompleteRan(std::vector<ReadyTensor>& ready, const FusionGroup& g) {
  for (size_t i : g) {
    std::vector<Request>& rs = ready[i].requests;
    if (rs.empty()) continue;
    const Collective* kind = FindCollective(rs.front().kind);
    Status done(SYNCD_OK, kind != nullptr ? kind->CompletionText(ready[i]) : "");
    if (rs.front().kind == abi::OpKind::kJoin) table_.JoinCompleted();
    if (std::none_of(rs.begin(), rs.end(), [](const Request& r) { return !r.failure.empty(); })) {
      Finish(rs, std::move(done));
      continue;
    }
    for (Request& r : rs) {
      Status st = r.failure.empty() ? done : Status(SYNCD_ERR_NO_MEMORY, r.failure);
      Finish(std::move(r), std::move(st));
    }
    rs.clear();
  }
}

void ProcessSet::FailHeld(const Status& why) {
  std::vector<FailedTensor> failed;
  table_.FailAll(why, &failed);
  for (FailedTensor& f : failed) {
    Status failed_here(why.code(), "tensor '" + f.requests.front().name + "': " + why.message());
    Finish(f.requests, std::move(failed_here));
  }
  if (topo_.runner) FailTopo(why);
  FailPartial(why);
  if (place_.gpu && place_.gpu->in_flight() > 0) {
    place_.gpu->Abort(why);
    PollGpu();
  }
  // Negotiated tensors fail when the daemon leaves the job (Leave).
}

void ProcessSet::PrepareGpu() {
  if (place_.comm == nullptr) {
    if (place_.gpu->aborted()) RebuildGpu(place_.gpu->MakeNcclId());
    return;
  }
  // Many nodes: the communicator spans them all, so every node rebuilds if any asks (job_join.h).
  gpu_.restart.rebuild = place_.gpu->aborted();
  if (place_.node_rank == 0) gpu_.restart.make_id = [gpu = place_.gpu] { return gpu->MakeNcclId(); };
  gpu_.restart_pending = true;
}

void ProcessSet::RestartGpu() {
  gpu_.restart_pending = false;
  if (!gpu_.restart.error.ok()) RebuildGpu(gpu_.restart.error);
  else if (!gpu_.restart.nccl_id.empty()) RebuildGpu(gpu_.restart.nccl_id);
}

void ProcessSet::RebuildGpu(StatusOr<std::string> nccl_id) {
  // The executor logs a rebuild; a failure is the job's to report.
  const Status st = nccl_id.ok() ? place_.gpu->Rebuild(*nccl_id) : nccl_id.status();
  if (!st.ok()) spdlog::error("job {}: GPU collectives stay down: {}", place_.job, st.message());
}

}  // namespace syncd
