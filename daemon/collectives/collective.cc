// The defaults of the Collective interface, and the registry of kinds.
#include "daemon/collectives/collective.h"

#include <algorithm>
#include <cstdio>

#include "daemon/collectives/agreement.h"
#include "daemon/core/reduce_kernels.h"
#include "proto/status_names.h"

namespace syncd {

Status Collective::Parse(const abi::SubmitEntry&, const SetRanks&, const TensorWhat&, Request*) const {
  return Status::Ok();
}

uint32_t AcrossNodes::NodeOfGlobal(uint32_t global) const {
  const uint32_t set_rank = uint32_t(std::lower_bound(ranks->begin(), ranks->end(), global) - ranks->begin());
  return uint32_t(std::upper_bound(offsets->begin(), offsets->end(), set_rank) - offsets->begin()) - 1;
}

bool SetRanks::Has(int64_t global) const {
  if (global < 0) return false;
  if (ranks == nullptr) return global < int64_t(size);
  return std::binary_search(ranks->begin(), ranks->end(), uint32_t(global));
}

Status ParseRoot(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, const char* kind_name,
                 Request* r) {
  if (!set.Has(e.root))
    return InvalidArgument(what + ": " + kind_name + " root " + std::to_string(e.root) + " is not a rank " +
                           (set.ranks ? "of process set " + std::to_string(r->process_set)
                                      : "(size " + std::to_string(set.size) + ")"));
  r->root = e.root;
  return Status::Ok();
}

uint8_t ResolvedCompression(uint32_t asked, uint32_t fallback, uint64_t min_bytes, uint64_t bytes, bool gpu,
                            syncd_dtype dtype, syncd_reduce_op op) {
  if (gpu || (dtype != SYNCD_FLOAT32 && dtype != SYNCD_FLOAT64)) return SYNCD_COMPRESSION_NONE;
  // The daemon's method where it cannot reduce with the op (Parse refused such a request).
  if (!abi::CompressionReduces(fallback, op)) fallback = SYNCD_COMPRESSION_NONE;
  if (asked == SYNCD_COMPRESSION_DEFAULT_CAST)
    asked = fallback == SYNCD_COMPRESSION_FP16 || fallback == SYNCD_COMPRESSION_BF16 ? SYNCD_COMPRESSION_DEFAULT
                                                                                       : SYNCD_COMPRESSION_NONE;
  if (asked == SYNCD_COMPRESSION_DEFAULT) return uint8_t(bytes >= min_bytes ? fallback : uint32_t(SYNCD_COMPRESSION_NONE));
  return uint8_t(asked);
}

void ResolveCompression(uint32_t fallback, uint64_t min_bytes, uint32_t fallback_ppm, uint32_t fallback_rank, bool gpu,
                        Request* r) {
  r->compression = ResolvedCompression(r->compression, fallback, min_bytes, r->bytes, gpu, r->dtype, r->op);
  r->compression_ppm = ResolvedCompressionPpm(r->compression, r->compression_ppm, fallback_ppm, fallback_rank);
}

uint32_t ResolvedCompressionPpm(uint8_t compression, uint32_t asked, uint32_t fallback_ppm, uint32_t fallback_rank) {
  if (compression == SYNCD_COMPRESSION_POWERSGD) return asked != 0 ? asked : fallback_rank;
  return compression != SYNCD_COMPRESSION_TOPK ? 0 : asked != 0 ? asked : fallback_ppm;
}

std::string CompressionText(uint32_t compression, uint32_t ppm) {
  std::string text = abi::CompressionName(compression);
  if (compression == SYNCD_COMPRESSION_POWERSGD) {
    text += " (rank " + std::to_string(ppm) + ")";
  } else if (ppm != 0) {
    char ratio[32];
    snprintf(ratio, sizeof(ratio), " (ratio %g)", ppm / 1e6);
    text += ratio;
  }
  return text;
}

std::string Collective::Disagreement(const std::vector<Request>& requests) const { return SameShape(requests); }

std::optional<FusionKey> Collective::FusionKeyOf(const Request&) const { return std::nullopt; }

StatusOr<uint64_t> Collective::EnqueueGpu(const CollectiveGroup&, const OnGpus&) const {
  return InvalidArgument(std::string(name()) + " has no GPU path");
}

absl::Span<const int64_t> RankRows(const ReadyTensor& t, RankScratch* scratch) {
  if (t.agreed) return t.agreed->rows;
  scratch->clear();
  for (const Request& r : t.requests) scratch->push_back(r.shape.empty() ? 0 : r.shape[0]);
  return *scratch;
}

absl::Span<const int64_t> RankSplits(const ReadyTensor& t, RankScratch* scratch) {
  if (t.agreed) return t.agreed->splits;
  scratch->clear();
  for (const Request& r : t.requests) scratch->insert(scratch->end(), r.splits.begin(), r.splits.end());
  return *scratch;
}

void RankRowsInto(const ReadyTensor& t, std::vector<int64_t>* out) {
  RankScratch scratch;
  const absl::Span<const int64_t> rows = RankRows(t, &scratch);
  out->assign(rows.begin(), rows.end());
}

void RankSplitsInto(const ReadyTensor& t, std::vector<int64_t>* out) {
  RankScratch scratch;
  const absl::Span<const int64_t> splits = RankSplits(t, &scratch);
  out->assign(splits.begin(), splits.end());
}

uint64_t EveryRanksBytes(const ReadyTensor& t) {
  RankScratch scratch;  // stays empty where the tensor holds its rows
  uint64_t bytes = 0;
  for (int64_t rows : RankRows(t, &scratch)) bytes += uint64_t(rows) * RowBytes(t.first());
  return bytes;
}

bool PlaceEveryRank(const ReadyTensor& t, Collective::Placement* p) {
  RankRowsInto(t, &p->rows);
  p->bytes = 0;
  for (int64_t n : p->rows) p->bytes += uint64_t(n) * RowBytes(t.first());
  return true;
}

StatusOr<Request> JoinedRequest(const Request& like, uint32_t rank, uint32_t set_rank, uint32_t local, bool lost) {
  const Collective* kind = FindCollective(like.kind);
  const std::string what = "tensor '" + like.name + "'";
  // A TOPO plan: where a rank of the node registers it, `like` holds the plan; where none does
  // (every rank of the node lost or vacant), `like` is the agreed name, with the plan's shape and
  // no plan: the node gets the plan from another when the registration runs (ExecuteAgreed).
  const bool plan = like.kind == abi::OpKind::kRegisterGraph;
  if (lost && (abi::IsSetChange(like.kind) || plan)) {
    Request r = like;  // the ranks added or the set removed, or the plan; no data
    r.client_id = kNoClient;
    r.rank = rank;
    r.set_rank = set_rank;
    r.local_rank = local;
    r.handle = 0;
    r.received_ns = 0;
    r.data = nullptr;
    r.memory = nullptr;
    return r;
  }
  if (kind == nullptr) {
    const char* why = abi::IsSetChange(like.kind)
                          ? " (hvd.join): process sets cannot be added or removed while a rank waits in join"
                          : "";
    return InvalidArgument(what + ": rank " + std::to_string(rank) + " has joined" + why);
  }
  if (like.gpu)
    return InvalidArgument(what + ": rank " + std::to_string(rank) + " has joined, and joined ranks take part in host "
                                  "collectives only");
  Request r;
  r.client_id = kNoClient;
  r.rank = rank;
  r.set_rank = set_rank;
  r.local_rank = local;
  r.process_set = like.process_set;
  r.kind = like.kind;
  r.dtype = like.dtype;
  r.op = like.op;
  r.root = like.root;
  r.prescale = like.prescale;
  r.postscale = like.postscale;
  r.compression = like.compression;
  r.compression_ppm = like.compression_ppm;
  r.shape = like.shape;
  r.splits = like.splits;
  // From the shape: `like` may be the coordinator's description of another node's request.
  r.bytes = kind->has_tensor() ? abi::DtypeSize(like.dtype) : 0;
  for (int64_t d : like.shape) r.bytes *= uint64_t(d);
  r.name = like.name;
  if (Status st = kind->Joined(&r); !st.ok()) return Status(st.code(), what + ": " + st.message());
  // The identity of its reduction (zeros for the kinds that reduce nothing): whatever reads it adds
  // nothing, though the host reductions leave stand-ins out anyway (Request::stands_in).
  auto identity = std::make_shared<std::vector<char>>(r.bytes);
  FillIdentity(r.dtype, r.op, identity->data(), r.bytes / std::max<size_t>(1, abi::DtypeSize(r.dtype)));
  r.data = identity->data();
  r.memory = std::move(identity);
  return r;
}

uint64_t RowBytes(const Request& r) {
  uint64_t bytes = abi::DtypeSize(r.dtype);
  for (size_t d = 1; d < r.shape.size(); ++d) bytes *= uint64_t(r.shape[d]);
  return bytes;
}

// The registry: each kind's folder defines its function; kinds.def lists each once.
#define SYNCD_KIND(fn) const Collective& fn();
#include "daemon/collectives/kinds.def"
#undef SYNCD_KIND

const Collective* FindCollective(abi::OpKind kind) {
#define SYNCD_KIND(fn) &fn(),
  static const Collective* const kKinds[] = {
#include "daemon/collectives/kinds.def"
  };
#undef SYNCD_KIND
  for (const Collective* c : kKinds)
    if (c->kind() == kind) return c;
  return nullptr;
}

const char* OpKindName(abi::OpKind kind) {
  if (const Collective* c = FindCollective(kind)) return c->name();
  switch (kind) {
    case abi::OpKind::kRegisterGraph: return "graph registration";
    case abi::OpKind::kFail: return "failure notice";
    case abi::OpKind::kTimeline: return "timeline";
    case abi::OpKind::kSend: return "send";
    case abi::OpKind::kRecv: return "recv";
    default: return "unknown";
  }
}

}  // namespace syncd
