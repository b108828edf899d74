#include "daemon/engine/submission.h"

#include <cstring>

#include "daemon/collectives/collective.h"
#include "daemon/plan/graph_codec.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// A registered graph: decoded from a copy (the client could change the arena meanwhile) and
// planned at once, so every rank's plan can be compared by its hash.
StatusOr<Request> ParseGraph(const abi::SubmitEntry& e, const Submitter& who, Request r, const std::string& rank) {
  const char* bytes = who.segment->ArenaRange(e.arena_offset, e.bytes);
  if (bytes == nullptr || e.bytes == 0) return InvalidArgument("graph from " + rank + ": range outside the client's arena");
  const std::string copy(bytes, e.bytes);
  StatusOr<Graph> graph = DecodeGraph(copy.data(), copy.size());
  if (!graph.ok()) return Status(graph.status().code(), "graph from " + rank + ": " + graph.status().message());
  for (GraphOp& op : graph->ops) {  // as each of the tensor's submissions will be
    if (!op.collective) continue;
    op.compression = ResolvedCompression(op.compression, who.compression, who.compression_min_bytes,
                                         op.count * abi::DtypeSize(op.dtype), op.gpu, op.dtype, op.op);
    op.compression_ppm =
        ResolvedCompressionPpm(op.compression, op.compression_ppm, who.compression_ppm, who.compression_rank);
  }
  StatusOr<TopoPlan> plan = PlanTopo(*graph, who.fusion_threshold);
  if (!plan.ok()) return Status(plan.status().code(), "graph from " + rank + ": " + plan.status().message());
  r.plan = std::make_shared<const TopoPlan>(std::move(plan.value()));
  const std::vector<int64_t> plan_shape = PlanShape(*r.plan);  // what ranks and nodes compare
  r.shape.assign(plan_shape.begin(), plan_shape.end());
  return r;
}

Status Malformed(const std::string& why) { return ProtocolError("malformed ring entry: " + why); }

// A process set change: a collective of the global set; adding one names its ranks (ascending,
// in the arena), removing one its id.
StatusOr<Request> ParseSetChange(const abi::SubmitEntry& e, const Submitter& who, Request r, const TensorWhat& what) {
  if (e.process_set != 0)
    return InvalidArgument(what + ": process sets are added and removed by every rank of the job (the global set)");
  if (r.kind == abi::OpKind::kRemoveProcessSet) {
    if (e.root <= 0) return InvalidArgument(what + ": process set " + std::to_string(e.root) + " cannot be removed");
    r.removed_set = e.root;
    return r;
  }
  const char* at = who.segment->ArenaRange(e.arena_offset, e.bytes);
  if (at == nullptr || e.bytes == 0 || e.bytes % sizeof(int64_t) != 0 || e.bytes > uint64_t(who.world_size) * sizeof(int64_t))
    return Malformed(what + ": process set ranks outside the arena or more than the job's " + std::to_string(who.world_size));
  r.splits.resize(e.bytes / sizeof(int64_t));
  memcpy(r.splits.data(), at, e.bytes);  // copied first: the client could change it meanwhile
  for (size_t i = 0; i < r.splits.size(); ++i)
    if (r.splits[i] < 0 || r.splits[i] >= int64_t(who.world_size) || (i > 0 && r.splits[i] <= r.splits[i - 1]))
      return InvalidArgument(what + ": process set ranks must be distinct ranks of the job, ascending");
  return r;
}

// dtype, shape and size of a tensor entry.
Status ParseTensor(const abi::SubmitEntry& e, const TensorWhat& what, Request* r) {
  if ((e.flags & ~abi::kSubmitGpu) != 0) return Malformed(what + " has unknown flags " + std::to_string(e.flags));
  if (e.dtype >= SYNCD_DTYPE_COUNT) return Malformed(what + " has unknown dtype " + std::to_string(e.dtype));
  r->dtype = syncd_dtype(e.dtype);
  if (e.ndim > abi::kMaxDims) return Malformed(what + " has " + std::to_string(e.ndim) + " dimensions");
  const uint64_t esize = abi::DtypeSize(r->dtype);
  uint64_t count = 1;
  for (uint32_t d = 0; d < e.ndim; ++d) {
    if (e.shape[d] < 0 || (e.shape[d] > 0 && count > (UINT64_MAX / esize) / uint64_t(e.shape[d])))
      return Malformed(what + " has an invalid shape");
    count *= uint64_t(e.shape[d]);
    r->shape.push_back(e.shape[d]);
  }
  if (count * esize != e.bytes)
    return Malformed(what + " says " + std::to_string(e.bytes) + " bytes but its shape holds " +
                     std::to_string(count * esize));
  r->bytes = e.bytes;
  return Status::Ok();
}

// The splits of an alltoall (at most one per rank), copied out of the arena.
Status ParseSplits(const abi::SubmitEntry& e, const Submitter& who, const TensorWhat& what, Request* r) {
  if (e.aux_bytes == 0) return Status::Ok();
  if (e.aux_bytes % sizeof(int64_t) != 0 || e.aux_bytes > uint64_t(who.world_size) * sizeof(int64_t))
    return Malformed(what + " has " + std::to_string(e.aux_bytes) + " bytes of splits for " +
                     std::to_string(who.world_size) + " ranks");
  const char* at = who.segment->ArenaRange(e.aux_offset, e.aux_bytes);
  if (at == nullptr) return Malformed(what + ": splits outside the arena");
  r->splits.resize(e.aux_bytes / sizeof(int64_t));
  memcpy(r->splits.data(), at, e.aux_bytes);
  return Status::Ok();
}

// The ranks of the set the submitter's entry names.
SetRanks RanksOf(const Submitter& who) {
  return who.set_ranks ? SetRanks(uint32_t(who.set_ranks->size()), who.set_ranks) : SetRanks(who.world_size);
}

// A host tensor's data: a range of the client's arena.
Status ParseHostData(const abi::SubmitEntry& e, const Submitter& who, const TensorWhat& what, Request* r) {
  if (r->bytes == 0) return Status::Ok();
  r->memory = who.segment->memory();
  r->data = who.segment->ArenaRange(e.arena_offset, e.bytes);
  if (r->data == nullptr)
    return InvalidArgument(what + ": data range [" + std::to_string(e.arena_offset) + ", +" + std::to_string(e.bytes) +
                           ") is outside the client's arena of " + std::to_string(who.segment->arena_bytes()) + " bytes");
  return Status::Ok();
}

// A send or receive: its peer (a global rank of the set, not the submitter; a receive may name
// any rank, -1) and its tag.
StatusOr<Request> ParsePointToPoint(const abi::SubmitEntry& e, const Submitter& who, Request r, const TensorWhat& what) {
  const char* op = r.kind == abi::OpKind::kSend ? "send" : "recv";
  SYNCD_RETURN_IF_ERROR(ParseTensor(e, what, &r));
  if (e.flags & abi::kSubmitGpu) return InvalidArgument(std::string(op) + " of " + what + ": GPU tensors are not supported by send and recv");
  const SetRanks set = RanksOf(who);
  const bool any = r.kind == abi::OpKind::kRecv && e.root == -1;
  if (!any && !set.Has(e.root))
    return InvalidArgument(std::string(op) + " of " + what + ": peer " + std::to_string(e.root) + " is not a rank of process set " +
                           std::to_string(e.process_set));
  if (!any && uint32_t(e.root) == who.rank) return InvalidArgument(std::string(op) + " of " + what + ": a rank cannot " + op + " to itself");
  if (e.tag < 0) return InvalidArgument(std::string(op) + " of " + what + ": tag " + std::to_string(e.tag) + " is negative");
  r.peer = e.root;
  r.tag = e.tag;
  SYNCD_RETURN_IF_ERROR(ParseHostData(e, who, what, &r));
  return r;
}

}  // namespace

StatusOr<Request> ParseSubmission(const abi::SubmitEntry& e, const Submitter& who,
                                  std::optional<abi::GpuDescriptor>* gpu, Request blank) {
  Request r = std::move(blank);
  r.client_id = who.client_id;
  r.rank = who.rank;
  r.local_rank = who.local_rank;
  r.handle = e.handle;
  auto rank = [&r] { return "rank " + std::to_string(r.rank); };  // for messages only
  const size_t name_len = strnlen(e.name, abi::kNameBytes);
  if (name_len == 0 || name_len == abi::kNameBytes)
    return ProtocolError("malformed ring entry from " + rank() + ": tensor name is empty or not terminated");
  r.name.assign(e.name, name_len);
  const TensorWhat what(r.name, r.rank);
  if (e.kind < uint32_t(abi::OpKind::kAllreduce) || e.kind > abi::kOpKindLast)
    return Malformed(what + " has unknown operation " + std::to_string(e.kind));
  r.kind = abi::OpKind(e.kind);
  if ((r.kind == abi::OpKind::kRegisterGraph) != (r.name == abi::kTopoPlanName))
    return InvalidArgument(what + ": the name '" + abi::kTopoPlanName + "' is reserved for graph registration");
  if (r.kind == abi::OpKind::kRegisterGraph) return ParseGraph(e, who, std::move(r), rank());
  if (abi::IsSetChange(r.kind)) return ParseSetChange(e, who, std::move(r), what);
  r.process_set = e.process_set;
  if (r.kind == abi::OpKind::kTimeline) {
    const char* text = e.bytes ? who.segment->ArenaRange(e.arena_offset, e.bytes) : "";
    if (text == nullptr || e.bytes >= abi::kTimelinePathBytes)
      return Malformed("timeline request from " + rank() + ": its file name is outside the arena or over " +
                       std::to_string(abi::kTimelinePathBytes - 1) + " bytes");
    r.text.assign(text, strnlen(text, e.bytes));
    return r;
  }
  if (r.kind == abi::OpKind::kFail) {
    const char* text = who.segment->ArenaRange(e.arena_offset, e.bytes);
    if (text == nullptr || e.bytes == 0 || e.bytes >= abi::kFailMessageBytes)
      return Malformed("failure notice for " + what + " outside the arena or over " +
                       std::to_string(abi::kFailMessageBytes - 1) + " bytes");
    r.failure.assign(text, strnlen(text, e.bytes));  // copied: the client could change it meanwhile
    return r;
  }
  if (abi::IsPointToPoint(r.kind)) return ParsePointToPoint(e, who, std::move(r), what);
  const Collective* kind = FindCollective(r.kind);
  if (kind == nullptr) return Malformed(what + " has unknown operation " + std::to_string(e.kind));
  if (!kind->has_tensor()) {
    if (e.bytes != 0) return Malformed(std::string(kind->name()) + " " + what + " carries data");
    return r;
  }
  SYNCD_RETURN_IF_ERROR(ParseTensor(e, what, &r));
  SYNCD_RETURN_IF_ERROR(ParseSplits(e, who, what, &r));
  const SetRanks set = RanksOf(who);
  if (!kind->compresses() && (e.compression != SYNCD_COMPRESSION_DEFAULT || e.compression_ppm != 0))
    return Malformed(what + ": only an allreduce takes a compression");
  SYNCD_RETURN_IF_ERROR(kind->Parse(e, set, what, &r));
  if (kind->compresses())
    ResolveCompression(who.compression, who.compression_min_bytes, who.compression_ppm, who.compression_rank,
                       (e.flags & abi::kSubmitGpu) != 0, &r);
  if (kind->shapes_vary()) r.results = who.segment->results();
  if (e.flags & abi::kSubmitGpu) {
    r.gpu = true;
    const char* at = who.segment->ArenaRange(e.arena_offset, sizeof(abi::GpuDescriptor));
    if (at == nullptr) return Malformed(what + ": GPU descriptor outside the arena");
    abi::GpuDescriptor desc;
    memcpy(&desc, at, sizeof(desc));  // copied out first: the client could change it meanwhile
    *gpu = desc;
  } else {
    SYNCD_RETURN_IF_ERROR(ParseHostData(e, who, what, &r));
  }
  return r;
}

}  // namespace syncd
