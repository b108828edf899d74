// Allreduce: every rank ends with op(prescale * every rank's tensor) * postscale (AVERAGE divides
// by the tensors summed; ADASUM: adasum.h). Fuses with allreduces of the same dtype, op, scale factors and memory.
// Across nodes on the host path: hierarchical and pipelined (local reduce, inter-node allreduce,
// local scatter, one segment at a time); the inter-node allreduce compressed on request
// (Request::compression: cast to fp16 or bf16 and summed in it between nodes).
#include <absl/container/inlined_vector.h>

#include <algorithm>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/allreduce/adasum.h"
#include "daemon/collectives/allreduce/feedback.h"
#include "daemon/collectives/collective.h"
#include "daemon/core/float_casts.h"
#include "daemon/transport/host_collectives.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Fused groups move through the network in segments of this size, this many in flight.
constexpr size_t kPipelineSegmentBytes = 1 << 20;
constexpr size_t kPipelineDepth = 4;

// bool: logical or (SUM, MAX) and and (MIN, PRODUCT); an average or a scale factor means nothing.
// Adasum: float host tensors over a power of two of ranks.
Status CheckDtypeAndOp(syncd_dtype dtype, syncd_reduce_op op, double prescale, double postscale, bool gpu,
                       uint32_t set_size, const TensorWhat& what) {
  if (op == SYNCD_ADASUM) {
    if (dtype != SYNCD_FLOAT16 && dtype != SYNCD_BFLOAT16 && dtype != SYNCD_FLOAT32 && dtype != SYNCD_FLOAT64)
      return InvalidArgument(what + ": Adasum reduces float tensors (float16, bfloat16, float32, float64) only");
    if (gpu) return InvalidArgument(what + ": Adasum of GPU tensors is not supported yet (host tensors only)");
    if (set_size == 0 || (set_size & (set_size - 1)) != 0)
      return InvalidArgument(what + ": Adasum needs a power of two of ranks (as Horovod's), and the set has " +
                             std::to_string(set_size));
    return Status::Ok();
  }
  if (dtype != SYNCD_BOOL) return Status::Ok();
  if (op == SYNCD_AVERAGE)
    return InvalidArgument(what + ": allreduce of bool tensors cannot average; use Sum (logical or) or Min (logical and)");
  if (prescale != 1.0 || postscale != 1.0)
    return InvalidArgument(what + ": allreduce of bool tensors takes no prescale or postscale factor");
  return Status::Ok();
}

class AllreduceCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kAllreduce; }
  const char* name() const override { return "allreduce"; }
  bool reduces() const override { return true; }
  bool compresses() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    if (e.op >= SYNCD_REDUCE_OP_COUNT)
      return ProtocolError("malformed ring entry: " + what + " has unknown reduce op " + std::to_string(e.op));
    r->op = syncd_reduce_op(e.op);
    r->prescale = e.prescale;
    r->postscale = e.postscale;
    if (!abi::IsCompressionRequest(e.compression))
      return ProtocolError("malformed ring entry: " + what + " has unknown compression " +
                           std::to_string(e.compression));
    if (const char* why = abi::CompressionWithdrawn(e.compression)) return InvalidArgument(what + ": " + why);
    if ((e.flags & abi::kSubmitGpu) && e.compression > SYNCD_COMPRESSION_NONE && e.compression < SYNCD_COMPRESSION_COUNT)
      return InvalidArgument(what + ": " + abi::CompressionName(e.compression) +
                             " compression of GPU tensors is not supported yet (NCCL moves them as they are)");
    if (e.op < SYNCD_REDUCE_OP_COUNT && !abi::CompressionReduces(e.compression, e.op))
      return InvalidArgument(what + ": " + abi::CompressionName(e.compression) + " compression sums what each node "
                             "keeps of the tensor, so it cannot reduce with " + abi::ReduceOpName(e.op) +
                             "; use Sum or Average with it, or fp16, bf16 or no compression");
    if (e.compression_ppm > 1'000'000)
      return InvalidArgument(what + ": compression ratio " + std::to_string(e.compression_ppm / 1e6) + " is above 1");
    r->compression = uint8_t(e.compression);  // DEFAULT: ResolveCompression, with the daemon's setting
    r->compression_ppm = e.compression_ppm;
    return CheckDtypeAndOp(r->dtype, r->op, r->prescale, r->postscale, (e.flags & abi::kSubmitGpu) != 0, set.size,
                           what);
  }

  // A stand-in adds the identity, which Adasum's pairing has no use for: the tree over the ranks
  // left is not Adasum of a power of two of them.
  Status Joined(Request* r) const override {
    if (r->op != SYNCD_ADASUM) return Status::Ok();
    return InvalidArgument("Adasum pairs every rank's tensor, a power of two of them, and rank " +
                           std::to_string(r->rank) + " has none (it joined, was lost or has not attached)");
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    std::string msg = SameReduction(rs);
    if (msg.empty())
      msg = DisagreementBy(
          rs, "compression", [](const Request& r) { return uint64_t(r.compression) << 32 | r.compression_ppm; },
          [](const Request& r) { return CompressionText(r.compression, r.compression_ppm); });
    return msg;
  }

  std::optional<FusionKey> FusionKeyOf(const Request& r) const override {
    return FusionKey{r.kind, r.dtype, r.op, r.prescale, r.postscale, r.gpu, 0, r.compression, r.compression_ppm};
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override {
    if (group.front()->first().op == SYNCD_ADASUM) return AdasumLocal(group);
    host.Allreduce(group);
  }

  StatusOr<uint64_t> EnqueueGpu(const CollectiveGroup& group, const OnGpus& run) const override {
    return run.gpu->Allreduce(group, run.world_size);
  }

  // Top-k and 1-bit: feedback.h. The others: RunPipelined.
  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    if (group.front()->first().op == SYNCD_ADASUM) return RunAdasumAcross(std::move(group), std::move(run));
    if (IsFeedbackCompression(group.front()->first().compression))
      return RunAcrossWithFeedback(std::move(group), std::move(run));
    return RunPipelined(std::move(group), std::move(run));
  }

 private:
  // Pipelined in segments: while segment k is on the wire, k+1 is reduced locally and k-1 is
  // scattered back. The stages cycle through kPipelineDepth segment slots, so the working set
  // stays in cache however large the fused group is. Compressed (fp16, bf16): each segment is
  // cast into a wire slot of its own after its local reduction, crosses the nodes in that type,
  // and is cast back before the scatter.
  static CommTask RunPipelined(CollectiveGroup group, AcrossNodes run) {
    const Request& f = group.front()->first();
    uint64_t bytes = 0;
    for (const ReadyTensor* t : group) bytes += t->first().bytes;
    const size_t esize = abi::DtypeSize(f.dtype);
    const size_t count = bytes / esize;
    const size_t seg = std::max<size_t>(1, (run.segment_bytes != 0 ? run.segment_bytes : kPipelineSegmentBytes) / esize);
    const size_t slot_bytes = seg * esize;
    const syncd_dtype wire = WireDtype(f.compression, f.dtype);
    const size_t wire_esize = abi::DtypeSize(wire);
    const size_t wire_slot_bytes = wire != f.dtype ? seg * wire_esize : 0;
    const HostBuffer::Block fusion = run.buffer->Reserve((slot_bytes + wire_slot_bytes) * kPipelineDepth);
    char* const wire_slots = fusion->data() + slot_bytes * kPipelineDepth;
    struct Stage {
      CommTask task;
      size_t begin, end;
      char* slot;
      char* on_wire;  // the slot itself, uncompressed
      uint64_t posted_ns;
      uint32_t slot_index;
    };
    // The timeline: each segment's local reduction, its inter-node step and its copy back.
    Timeline* tl = run.timeline != nullptr && run.timeline->on() ? run.timeline : nullptr;
    auto record = [&](TraceKind what, uint64_t t0, size_t elements, uint32_t slot_index) {
      TraceEvent e;
      e.kind = what;
      e.t0 = t0;
      e.t1 = abi::MonotonicNs();
      e.set = run.set;
      e.bytes = elements * (what == TraceKind::kNetwork ? wire_esize : esize);
      e.count = slot_index;
      e.op_kind = uint8_t(abi::OpKind::kAllreduce);
      tl->Record(e);
    };
    absl::InlinedVector<Stage, kPipelineDepth> inflight;  // oldest first
    AllreduceOptions opts;
    opts.slices = 1;  // the segments already overlap
    opts.algorithm = run.host_allreduce;
    // AVERAGE divides each member by the tensors summed (counted by the set before the group ran).
    const std::vector<int64_t>* absent = f.op == SYNCD_AVERAGE ? run.absent.get() : nullptr;
    // Jobs side by side: a segment's reduction and copies back go in pieces, with another job's
    // work between two of them while that job waits with small work; alone, a segment at once.
    const AcrossNodes::SideBySide* shared = run.side_by_side;
    const size_t piece = shared != nullptr ? std::max<size_t>(1, shared->piece_bytes / esize) : seg;
    auto step_aside = [shared] { return shared != nullptr && shared->others_wait(); };
    size_t next = 0;
    uint64_t segment = 0;
    while (next < count || !inflight.empty()) {
      while (next < count && inflight.size() < kPipelineDepth) {
        const size_t end = std::min(count, next + seg);
        // Jobs side by side share the links by weight: held back, it waits for its oldest segment
        // in flight, or with none for the engine's next pass.
        if (shared != nullptr && !shared->may_post((end - next) * wire_esize)) {
          if (!inflight.empty()) break;
          co_await StepAside{};
          continue;
        }
        char* slot = fusion->data() + (segment % kPipelineDepth) * slot_bytes;
        char* on_wire = wire != f.dtype ? wire_slots + (segment % kPipelineDepth) * wire_slot_bytes : slot;
        const uint64_t reduce_ns = tl ? abi::MonotonicNs() : 0;
        for (size_t b = next; b < end; b += piece) {
          run.host->ReduceRange(group, b, std::min(end, b + piece), slot + (b - next) * esize);
          if (step_aside()) co_await StepAside{};
        }
        if (on_wire != slot) CastToWire(f.dtype, wire, slot, on_wire, end - next);
        if (tl) record(TraceKind::kReduce, reduce_ns, end - next, 0);
        inflight.push_back(Stage{syncd::Allreduce(run.transport, run.tag | (segment % 4096), on_wire, fusion,
                                                  end - next, wire, f.op, opts),
                                 next, end, slot, on_wire, tl ? abi::MonotonicNs() : 0,
                                 uint32_t(segment % kPipelineDepth)});
        ++segment;
        next = end;
      }
      CommTasks stages;
      for (Stage& s : inflight) stages.push_back(&s.task);
      Status st = co_await AwaitFirst(stages);
      if (!st.ok()) co_return st;
      const Stage& done = inflight.front();
      if (tl) record(TraceKind::kNetwork, done.posted_ns, done.end - done.begin, done.slot_index);
      const uint64_t scatter_ns = tl ? abi::MonotonicNs() : 0;
      if (done.on_wire != done.slot) CastFromWire(wire, f.dtype, done.on_wire, done.slot, done.end - done.begin);
      // Its members' stand-ins counted (AVERAGE), or none.
      const absl::Span<const int64_t> stand_ins = absent != nullptr ? absl::Span<const int64_t>(*absent) : absl::Span<const int64_t>();
      for (size_t b = done.begin; b < done.end; b += piece) {
        run.host->ScatterRange(group, b, std::min(done.end, b + piece), done.slot + (b - done.begin) * esize, stand_ins);
        if (step_aside()) co_await StepAside{};
      }
      if (tl) record(TraceKind::kScatter, scatter_ns, done.end - done.begin, 0);
      inflight.erase(inflight.begin());
    }
    co_return Status::Ok();
  }
};

}  // namespace

const Collective& AllreduceKind() {
  static const AllreduceCollective kind;
  return kind;
}

}  // namespace syncd
