// A collective kind as one unit. Each kind (allreduce, broadcast, barrier, allgather, alltoall,
// reducescatter, join, partial allreduce, reduce, gather, scatter) is a Collective in a folder of
// its own (collectives/<kind>/), registered by one line of kinds.def. It says everything the rest of the daemon needs to know about the kind:
//
// - Parse: the ring entry's fields only this kind reads (reduce op and scale factors, a root).
// - Disagreement: what must agree across ranks beyond the kind, memory, dtype and shape that
//   every kind checks (agreement.h).
// - FusionKeyOf: whether two requests fuse (they share a key) or the kind always runs alone.
// - shapes_vary: whether ranks' first dimensions (and splits) may differ, so that the
//   coordinator must carry every rank's (RankRows, RankSplits give them to the kind).
// - ResultPlace / ResultBytes: where a rank's result goes (in place, or a block of its result
//   area when only the daemon knows its size) and how many bytes it holds.
// - RunLocal / RunAcross / EnqueueGpu: how a fused group runs on this node's host memory, across
//   nodes on the host path, and on the GPUs.
//
// The engine and the negotiator dispatch through this interface and never switch on the kind.
// Graph registration and failure notices travel on the ring too but are not collectives: the
// engine handles them (FindCollective returns nullptr for them).
#ifndef SYNCD_DAEMON_COLLECTIVES_COLLECTIVE_H_
#define SYNCD_DAEMON_COLLECTIVES_COLLECTIVE_H_

#include <absl/container/inlined_vector.h>
#include <absl/types/span.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/base/status.h"
#include "daemon/core/tensor_table.h"
#include "daemon/core/timeline.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/exec/host_executor.h"
#include "daemon/plan/fusion.h"
#include "daemon/transport/comm_task.h"
#include "daemon/transport/host_buffer.h"
#include "proto/shm_abi.h"

namespace syncd {

class ResidualStore;

// One fused group: its members share the kind's fusion key (a kind that never fuses: one member).
using CollectiveGroup = TensorGroup;

// What a many-node host execution runs with.
struct AcrossNodes {
  Transport* transport = nullptr;  // one participant per node of the set
  HostExecutor* host = nullptr;    // this node's ranks
  HostBuffer* buffer = nullptr;    // the fusion buffer of this kind of execution
  uint64_t tag = 0;                // unique to this group across the job; the low 12 bits are the group's
  // Where each node's ranks begin among the set's ranks (one entry per node, then the set's
  // size), and the set's ranks (global ranks, ascending). This node is `node_rank`.
  const std::vector<uint32_t>* offsets = nullptr;
  const std::vector<uint32_t>* ranks = nullptr;
  uint32_t node_rank = 0;
  // The timeline recorder (may be null) and the set, for the phases of the group's execution.
  Timeline* timeline = nullptr;
  int32_t set = 0;
  HostAllreduce host_allreduce = HostAllreduce::kAuto;  // --host-allreduce
  // --on-loss continue and restore: how many of the set's ranks stood in for a lost rank
  // (Request::absent), per member, summed over every node (the same on every node); nullptr: none
  // counted (no loss policy, or a kind that needs no count). AVERAGE divides by the tensors summed.
  std::shared_ptr<const std::vector<int64_t>> absent;
  // Top-k, 1-bit and PowerSGD: this daemon's error-feedback residuals (nullptr: none kept).
  ResidualStore* residuals = nullptr;
  // A pipelined run's segment (0: the kind's own). The same on every node of the set (the wire
  // carries segments): it may depend on nothing one node alone knows.
  uint64_t segment_bytes = 0;
  // Jobs served side by side (a node service; nullptr: the job is alone here): while another job
  // waits with small work (`others_wait`), a pipelined run's reductions and copies go
  // `piece_bytes` at a time, and between two pieces it steps aside (co_await StepAside): that
  // job's small collective waits behind a piece, not a segment. Node-local: nothing on the wire.
  struct SideBySide {
    uint64_t piece_bytes = 0;
    std::function<bool()> others_wait;
    // Whether a segment of `bytes` may go on the network now (the links shared by weight).
    std::function<bool(uint64_t bytes)> may_post;
  };
  const SideBySide* side_by_side = nullptr;
  // A failure every node reaches alike from the data, not the network (a compressed sum that
  // overflowed): the kind sets it and returns Ok once its exchanges are done, and the group's tensors
  // fail with it on every rank while the job goes on. nullptr: the kind returns it as a failure.
  Status* refused = nullptr;

  uint32_t nodes() const { return uint32_t(offsets->size() - 1); }
  uint32_t first() const { return (*offsets)[node_rank]; }  // this node's first set rank
  // The node holding the set rank of global rank `global` (a member).
  uint32_t NodeOfGlobal(uint32_t global) const;
};

// The ranks a request's process set holds: its size, and (nullptr: 0..size-1) its global ranks.
struct SetRanks {
  SetRanks(uint32_t n, const std::vector<uint32_t>* r = nullptr) : size(n), ranks(r) {}  // NOLINT: implicit
  uint32_t size;
  const std::vector<uint32_t>* ranks;
  bool Has(int64_t global) const;
};

// For kinds with a root (broadcast, reduce, gather, scatter): checks that the entry's root is a
// rank of the set, naming the kind (`kind_name`) and the set, and sets r->root.
Status ParseRoot(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, const char* kind_name,
                 Request* r);

// An allreduce's compression as it will run (Request::compression, after the kind's Parse): the
// request's, or for DEFAULT `fallback` (the daemon's --compression) when the tensor has at least
// `min_bytes` and it can reduce with the request's op (abi::CompressionReduces); NONE for GPU
// tensors and for dtypes other than float32 and float64.
// Top-k and random-k: the ratio asked (Request::compression_ppm), else `fallback_ppm`; PowerSGD:
// the rank asked, else `fallback_rank`; the others: 0.
void ResolveCompression(uint32_t fallback, uint64_t min_bytes, uint32_t fallback_ppm, uint32_t fallback_rank, bool gpu,
                        Request* r);
// "fp16", "topk (ratio 0.01)": for messages.
std::string CompressionText(uint32_t compression, uint32_t ppm);
// The same for a tensor of `bytes` that asked for `asked` (a TOPO graph's collective).
uint8_t ResolvedCompression(uint32_t asked, uint32_t fallback, uint64_t min_bytes, uint64_t bytes, bool gpu,
                            syncd_dtype dtype, syncd_reduce_op op);
// Its ratio or rank as it will run, for the resolved `compression` and the `asked` ppm.
uint32_t ResolvedCompressionPpm(uint8_t compression, uint32_t asked, uint32_t fallback_ppm, uint32_t fallback_rank);

// What a GPU execution runs with.
struct OnGpus {
  GpuExecutor* gpu = nullptr;
  uint32_t world_size = 1;
  uint32_t local_size = 1;
};

class Collective {
 public:
  virtual ~Collective() = default;

  virtual abi::OpKind kind() const = 0;
  virtual const char* name() const = 0;  // "allreduce": in errors and statistics
  // Whether its ring entries carry a tensor (dtype, shape, data or a GPU descriptor).
  virtual bool has_tensor() const { return true; }

  // Checks and copies this kind's own fields of `e` into `r` (after the common ones). `what`
  // names the tensor and the rank for errors.
  virtual Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const;
  // What else the ranks' requests must agree on: "" or the message (see Disagreement()).
  virtual std::string Disagreement(const std::vector<Request>& requests) const;
  // Requests with equal keys may run as one fused group; nullopt: each request runs alone.
  virtual std::optional<FusionKey> FusionKeyOf(const Request& r) const;
  // Whether its requests run in rounds of their own (a partial allreduce: collectives/partial/runner.h)
  // instead of being matched across ranks by the tensor table and coordinated.
  virtual bool partial() const { return false; }
  // Whether its host path reduces the ranks' tensors with their op (allreduce, reduce,
  // reducescatter): AVERAGE then divides by the tensors summed, which a loss changes.
  virtual bool reduces() const { return false; }
  // Whether it takes an inter-node compression (the request's method and ratio, or the client's
  // and daemon's defaults); every other kind refuses one.
  virtual bool compresses() const { return false; }
  // Whether the ranks' first dimensions and splits may differ (they then travel to the
  // coordinator for every rank, and the response cache holds every rank's).
  virtual bool shapes_vary() const { return false; }
  // Where local rank `i`'s result goes: false, in place in its own tensor; else a block of its
  // result area of `bytes`, with `rows` (one per rank of the set) in the block's header. `*p` is
  // the caller's, filled in place (its storage is reused from one collective to the next).
  struct Placement {
    uint64_t bytes = 0;
    std::vector<int64_t> rows;
  };
  virtual bool ResultPlace(const ReadyTensor&, size_t, Placement*) const { return false; }
  // The bytes local rank `i` gets back.
  virtual uint64_t ResultBytes(const ReadyTensor& t, size_t i) const { return t.requests[i].bytes; }
  // A joined rank's stand-in (see JoinedRequest), a copy of another rank's request: what this
  // kind makes of it (the default: the same shape, the identity of its reduction), or why it
  // cannot stand in.
  virtual Status Joined(Request*) const { return Status::Ok(); }
  // The one number its requests agree on beside the tensor (TensorMeta::arg on the wire): the
  // root by default (kinds without one leave it -1), join's last rank to join.
  virtual int32_t AgreedArg(const Request& r) const { return r.root; }
  virtual void SetAgreedArg(Request* r, int32_t arg) const { r->root = arg; }
  // The text a successful completion carries ("last rank 3" for a join), or "".
  virtual std::string CompletionText(const ReadyTensor&) const { return ""; }

  // One node, host memory: runs the group at once, in place in every rank's tensor.
  virtual void RunLocal(const CollectiveGroup& group, HostExecutor& host) const = 0;
  // Many nodes, host memory: the local step, the inter-node step, the local result.
  virtual CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const = 0;
  // GPU tensors: enqueues the group on the GPU executor; a ticket for GpuExecutor::Test.
  virtual StatusOr<uint64_t> EnqueueGpu(const CollectiveGroup& group, const OnGpus& run) const;
};

// Every rank's first dimension (0 for a scalar), in the set's rank order: the tensor's own
// (ReadyTensor::agreed: on many nodes the agreement always sets them), without a copy; else
// computed from the requests into `scratch`. Alltoall: the splits matrix rank-major
// (RankSplits(t)[s * size + d] rows from s to d).
// The scratch holds a set of up to 64 ranks' rows, or 8 ranks' splits, inline (no heap allocation).
using RankScratch = absl::InlinedVector<int64_t, 64>;
absl::Span<const int64_t> RankRows(const ReadyTensor& t, RankScratch* scratch);
absl::Span<const int64_t> RankSplits(const ReadyTensor& t, RankScratch* scratch);
// The same, copied into `out` (its room reused) for a caller that keeps them.
void RankRowsInto(const ReadyTensor& t, std::vector<int64_t>* out);
void RankSplitsInto(const ReadyTensor& t, std::vector<int64_t>* out);
// A result of every rank's rows (allgather; gather at its root): their bytes, and `p` with every
// rank's row count (true).
uint64_t EveryRanksBytes(const ReadyTensor& t);
bool PlaceEveryRank(const ReadyTensor& t, Collective::Placement* p);
// Bytes of one row (one index of the first dimension) of the tensor.
uint64_t RowBytes(const Request& r);

// A rank that has joined (abi::OpKind::kJoin) takes part in the others' collectives with nothing
// of its own: a request like `like` for it, with no client, by its kind's rule (the identity of
// the reduction: reduce_kernels.h's ReductionIdentity; no rows to gather or send), or an error naming the tensor (it is a broadcast's root, or the
// tensor lives on GPUs). A rank lost for good (`lost`, --on-loss continue/restore) also stands in
// for a process set's addition or removal and, beside a rank of its node that registers it, a TOPO
// plan's registration (the same as `like`: the others go on changing sets or registering the plan
// without it, a vacant slot from the job's start too); a rank that joined does not (it would miss
// the change when it comes back).
StatusOr<Request> JoinedRequest(const Request& like, uint32_t rank, uint32_t set_rank, uint32_t local,
                                bool lost = false);

// The kind's unit, or nullptr for graph registration and failure notices (and unknown kinds).
const Collective* FindCollective(abi::OpKind kind);
// "allreduce", "graph registration", ...
const char* OpKindName(abi::OpKind kind);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COLLECTIVES_COLLECTIVE_H_
