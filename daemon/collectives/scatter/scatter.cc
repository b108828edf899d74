// Scatter (torch.distributed's scatter, MPI_Scatterv with Horovod's split): the root's tensor holds
// R rows; rank k of the set gets the k-th share of them in rank order, R / size rows, one more for
// the first (R % size) ranks (as reducescatter splits). Every other rank passes a tensor of 0 rows
// whose dtype and other dimensions say what it receives. A share's size is known only once the
// root has submitted, so it goes to a block of each rank's result area (the root's too). Never
// fuses. Across nodes on the host path: the root's node sends each node its ranks' shares in one
// message, straight from the root's tensor; each node copies them to its ranks.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/core/reduce_kernels.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

bool IsRoot(const Request& r) { return int32_t(r.rank) == r.root; }

// Every set rank's share of the root's rows, and the first row of each (size + 1 entries).
struct Shares {
  std::vector<int64_t> rows;
  std::vector<uint64_t> first;
};
Shares SharesOf(const ReadyTensor& t) {
  int64_t total = 0;  // only the root has rows
  RankScratch scratch;
  const absl::Span<const int64_t> ranks = RankRows(t, &scratch);
  for (int64_t r : ranks) total += r;
  const int64_t n = int64_t(ranks.size());
  Shares s;
  s.first.push_back(0);
  for (int64_t k = 0; k < n; ++k) {
    s.rows.push_back(total / n + (k < total % n ? 1 : 0));
    s.first.push_back(s.first.back() + uint64_t(s.rows.back()));
  }
  return s;
}

const Request* RootOf(const ReadyTensor& t) {
  for (const Request& r : t.requests)
    if (IsRoot(r)) return &r;
  return nullptr;
}

class ScatterCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kScatter; }
  const char* name() const override { return "scatter"; }
  bool shapes_vary() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    if (r->shape.empty()) return InvalidArgument(what + ": scatter needs a tensor of at least one dimension");
    return ParseRoot(e, set, what, "scatter", r);
  }

  // Checked here rather than in Parse, so that every rank fails, not only the one that erred.
  std::string Disagreement(const std::vector<Request>& rs) const override {
    std::string msg = SameShapeAfterFirst(rs);
    if (msg.empty()) msg = SameRoot(rs);
    if (!msg.empty()) return msg;
    for (const Request& r : rs) {
      // A rank's request as another node announced it may have no dimension at all (Parse
      // refuses that only for this node's ranks).
      if (r.shape.empty())
        return "tensor '" + r.name + "': rank " + std::to_string(r.rank) + " passed a scalar; scatter needs rows";
      if (!IsRoot(r) && r.shape[0] != 0)
        return "tensor '" + r.name + "': scatter sends the root's rows; rank " + std::to_string(r.rank) +
               " (not the root, rank " + std::to_string(r.root) + ") passed " + std::to_string(r.shape[0]) +
               " rows where it must pass 0";
    }
    return "";
  }

  // Rank k's block holds its share; the rows listed are every rank's share.
  bool ResultPlace(const ReadyTensor& t, size_t i, Placement* p) const override {
    Shares s = SharesOf(t);
    p->bytes = uint64_t(s.rows.at(t.requests[i].set_rank)) * RowBytes(t.first());
    p->rows = std::move(s.rows);
    return true;
  }
  uint64_t ResultBytes(const ReadyTensor& t, size_t) const override {
    return SharesOf(t).first.back() * RowBytes(t.first());
  }
  Status Joined(Request* r) const override {
    if (IsRoot(*r)) return InvalidArgument("its scatter root, rank " + std::to_string(r->rank) + ", has joined (hvd.join)");
    r->shape[0] = 0;
    r->bytes = 0;
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor&) const override {
    const ReadyTensor& t = *group.front();
    const Request* root = RootOf(t);
    if (root == nullptr) return;
    const Shares s = SharesOf(t);
    CopyShares(t, s, root->data, 0, RowBytes(t.first()));
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    const Shares s = SharesOf(t);
    const uint64_t row_bytes = RowBytes(t.first());
    const uint32_t nodes = run.nodes();
    const uint32_t root_node = run.NodeOfGlobal(uint32_t(t.first().root));
    // Node k's ranks' shares are one range of the root's rows.
    auto begin = [&](uint32_t node) { return s.first[(*run.offsets)[node]] * row_bytes; };
    if (run.node_rank == root_node) {
      const Request* root = RootOf(t);
      Transfers sends;
      for (uint32_t node = 0; node < nodes; ++node)
        if (node != root_node)
          sends.push_back(Transfer{node, root->data + begin(node), begin(node + 1) - begin(node), root->memory});
      CommTask out = Exchange(run.transport, run.tag, std::move(sends), {});
      Status st = co_await Await(&out);
      if (!st.ok()) co_return st;
      CopyShares(t, s, root->data, 0, row_bytes);
      co_return Status::Ok();
    }
    const uint64_t bytes = begin(run.node_rank + 1) - begin(run.node_rank);
    const HostBuffer::Block fusion = run.buffer->Reserve(bytes);
    CommTask in = Exchange(run.transport, run.tag, {}, {Transfer{root_node, fusion->data(), bytes, fusion}});
    Status st = co_await Await(&in);
    if (!st.ok()) co_return st;
    CopyShares(t, s, fusion->data(), begin(run.node_rank), row_bytes);
    co_return Status::Ok();
  }

 private:
  // Each local rank's share into its result block, from `rows`, which holds the root's rows from
  // byte `base` of the root's tensor on.
  static void CopyShares(const ReadyTensor& t, const Shares& s, const char* rows, uint64_t base, uint64_t row_bytes) {
    for (const Request& r : t.requests) {
      const uint64_t bytes = uint64_t(s.rows[r.set_rank]) * row_bytes;
      if (r.result != nullptr && bytes > 0) CopyStreaming(r.result, rows + s.first[r.set_rank] * row_bytes - base, bytes);
    }
  }
};

}  // namespace

const Collective& ScatterKind() {
  static const ScatterCollective kind;
  return kind;
}

}  // namespace syncd
