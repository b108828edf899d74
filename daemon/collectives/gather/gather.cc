// Gather (torch.distributed's gather, MPI_Gatherv): the root ends with every rank's tensor,
// concatenated along the first dimension in rank order; the other ranks get nothing. First
// dimensions may differ by rank; the other dimensions must agree. The result's size is known only
// once every rank has submitted, so it goes to a block of the root's result area (the others'
// results are empty). Never fuses. Across nodes on the host path: each node packs its ranks'
// tensors into its block, every node sends its block straight to the root's node (one message
// per node: the root's link carries each byte once, as a tree's would), which copies the whole to
// the root.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/core/reduce_kernels.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

bool IsRoot(const Request& r) { return int32_t(r.rank) == r.root; }

class GatherCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kGather; }
  const char* name() const override { return "gather"; }
  bool shapes_vary() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    if (r->shape.empty()) return InvalidArgument(what + ": gather needs a tensor of at least one dimension");
    return ParseRoot(e, set, what, "gather", r);
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    std::string msg = SameShapeAfterFirst(rs);
    if (msg.empty()) msg = SameRoot(rs);
    return msg;
  }

  // The root's block holds every rank's rows; the other ranks have none.
  bool ResultPlace(const ReadyTensor& t, size_t i, Placement* p) const override {
    return IsRoot(t.requests[i]) && PlaceEveryRank(t, p);
  }
  uint64_t ResultBytes(const ReadyTensor& t, size_t) const override { return EveryRanksBytes(t); }
  Status Joined(Request* r) const override {  // no rows, unless it is the root
    if (IsRoot(*r)) return InvalidArgument("its gather root, rank " + std::to_string(r->rank) + ", has joined (hvd.join)");
    r->shape[0] = 0;
    r->bytes = 0;
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor&) const override {
    const ReadyTensor& t = *group.front();
    for (const Request& d : t.requests) {
      if (!IsRoot(d) || d.result == nullptr) continue;
      uint64_t at = 0;
      for (const Request& s : t.requests) {
        if (s.bytes > 0) CopyStreaming(d.result + at, s.data, s.bytes);
        at += s.bytes;
      }
    }
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    RankScratch scratch;
    const absl::Span<const int64_t> rows = RankRows(t, &scratch);
    const uint64_t row_bytes = RowBytes(t.first());
    const uint32_t nodes = run.nodes();
    const uint32_t root_node = run.NodeOfGlobal(uint32_t(t.first().root));
    BlockBounds bounds(nodes + 1, 0);
    for (uint32_t node = 0; node < nodes; ++node) {
      bounds[node + 1] = bounds[node];
      for (uint32_t r = (*run.offsets)[node]; r < (*run.offsets)[node + 1]; ++r) bounds[node + 1] += uint64_t(rows[r]) * row_bytes;
    }
    const bool at_root = run.node_rank == root_node;
    // The root's node holds every block; the others only their own (at offset 0).
    const uint64_t mine = bounds[run.node_rank];
    const HostBuffer::Block fusion = run.buffer->Reserve(at_root ? bounds[nodes] : bounds[run.node_rank + 1] - mine);
    uint64_t at = at_root ? mine : 0;
    for (const Request& r : t.requests) {
      if (r.bytes > 0) memcpy(fusion->data() + at, r.data, r.bytes);
      at += r.bytes;
    }
    Transfers sends, recvs;
    if (at_root) {
      for (uint32_t node = 0; node < nodes; ++node)
        if (node != root_node)
          recvs.push_back(Transfer{node, fusion->data() + bounds[node], bounds[node + 1] - bounds[node], fusion});
    } else {
      sends.push_back(Transfer{root_node, fusion->data(), bounds[run.node_rank + 1] - mine, fusion});
    }
    CommTask gather = Exchange(run.transport, run.tag, std::move(sends), std::move(recvs));
    Status st = co_await Await(&gather);
    if (!st.ok() || !at_root) co_return st;
    for (const Request& r : t.requests)
      if (IsRoot(r) && r.result != nullptr && bounds[nodes] > 0) CopyStreaming(r.result, fusion->data(), bounds[nodes]);
    co_return Status::Ok();
  }

};

}  // namespace

const Collective& GatherKind() {
  static const GatherCollective kind;
  return kind;
}

}  // namespace syncd
