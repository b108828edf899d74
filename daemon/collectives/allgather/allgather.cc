// Allgather: every rank ends with every rank's tensor, concatenated along the first dimension in
// rank order. First dimensions may differ by rank; the other dimensions must agree. The result's
// size is known only once every rank has submitted, so it goes to a block of each rank's result
// area. Never fuses. Across nodes on the host path: each node packs its ranks' tensors into its
// block of the result, a ring passes the blocks around, each node copies the whole to its ranks.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

class AllgatherCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kAllgather; }
  const char* name() const override { return "allgather"; }
  bool shapes_vary() const override { return true; }

  Status Parse(const abi::SubmitEntry&, const SetRanks&, const TensorWhat& what, Request* r) const override {
    if (r->shape.empty()) return InvalidArgument(what + ": allgather needs a tensor of at least one dimension");
    return Status::Ok();
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    return SameShapeAfterFirst(rs);
  }

  bool ResultPlace(const ReadyTensor& t, size_t, Placement* p) const override { return PlaceEveryRank(t, p); }
  uint64_t ResultBytes(const ReadyTensor& t, size_t) const override { return EveryRanksBytes(t); }
  Status Joined(Request* r) const override {  // no rows
    r->shape[0] = 0;
    r->bytes = 0;
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override { host.Allgather(*group.front()); }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    RankScratch scratch;
    const absl::Span<const int64_t> rows = RankRows(t, &scratch);
    const uint64_t row_bytes = RowBytes(t.first());
    const uint32_t nodes = run.transport->size();
    BlockBounds bounds(nodes + 1, 0);
    for (uint32_t node = 0; node < nodes; ++node) {
      bounds[node + 1] = bounds[node];
      for (uint32_t r = (*run.offsets)[node]; r < (*run.offsets)[node + 1]; ++r) bounds[node + 1] += uint64_t(rows[r]) * row_bytes;
    }
    const HostBuffer::Block fusion = run.buffer->Reserve(bounds[nodes]);
    uint64_t at = bounds[run.node_rank];
    for (const Request& r : t.requests) {
      if (r.bytes > 0) memcpy(fusion->data() + at, r.data, r.bytes);
      at += r.bytes;
    }
    CommTask ring = AllgatherBlocks(run.transport, run.tag, fusion->data(), fusion, bounds);
    Status st = co_await Await(&ring);
    if (!st.ok()) co_return st;
    run.host->CopyToResults(t, fusion->data(), bounds[nodes]);
    co_return Status::Ok();
  }
};

}  // namespace

const Collective& AllgatherKind() {
  static const AllgatherCollective kind;
  return kind;
}

}  // namespace syncd
