// Alltoall: rank s sends splits[d] rows of its tensor (in order, from its first row) to each rank
// d; rank d ends with what every rank sent it, in rank order, and with how many rows each sent
// (the received splits, in its result block's header). No splits: equal parts (the first
// dimension must divide by the number of ranks). The other dimensions must agree. Never fuses.
// Across nodes on the host path: each node packs, for every other node, what its ranks send to
// that node's ranks, and every pair of nodes exchanges its packs at once.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

// Where each piece of an alltoall lies, for a set of `n` ranks with the splits matrix `m`
// (rank-major: m[s * n + d] rows from s to d).
struct Pieces {
  uint32_t n;
  const std::vector<int64_t>& m;
  uint64_t row_bytes;
  uint64_t Bytes(uint32_t s, uint32_t d) const { return uint64_t(m[size_t(s) * n + d]) * row_bytes; }
  // Offset of the piece for d in s's tensor.
  uint64_t From(uint32_t s, uint32_t d) const {
    uint64_t at = 0;
    for (uint32_t j = 0; j < d; ++j) at += Bytes(s, j);
    return at;
  }
};

class AlltoallCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kAlltoall; }
  const char* name() const override { return "alltoall"; }
  bool shapes_vary() const override { return true; }

  Status Parse(const abi::SubmitEntry&, const SetRanks& set, const std::string& what, Request* r) const override {
    const uint32_t world_size = set.size;
    if (r->shape.empty()) return InvalidArgument(what + ": alltoall needs a tensor of at least one dimension");
    const int64_t dim0 = r->shape[0];
    if (r->splits.empty()) {
      if (dim0 % int64_t(world_size) != 0)
        return InvalidArgument(what + ": alltoall without splits divides the first dimension equally, but " +
                               std::to_string(dim0) + " rows do not divide among " + std::to_string(world_size) +
                               " ranks; pass splits");
      r->splits.assign(world_size, dim0 / int64_t(world_size));
      return Status::Ok();
    }
    if (r->splits.size() != world_size)
      return InvalidArgument(what + ": alltoall has " + std::to_string(r->splits.size()) + " splits for " +
                             std::to_string(world_size) + " ranks");
    int64_t sum = 0;
    for (int64_t s : r->splits) {
      if (s < 0) return InvalidArgument(what + ": alltoall split " + std::to_string(s) + " is negative");
      sum += s;
    }
    if (sum != dim0)
      return InvalidArgument(what + ": alltoall splits add up to " + std::to_string(sum) + " rows, the tensor has " +
                             std::to_string(dim0));
    return Status::Ok();
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    return SameShapeAfterFirst(rs);
  }

  std::optional<Placement> ResultPlace(const ReadyTensor& t, size_t i) const override {
    const std::vector<int64_t> m = RankSplits(t);
    const size_t n = RankRows(t).size();
    Placement p;
    const size_t d = t.requests[i].set_rank;
    for (size_t s = 0; s < n; ++s) p.rows.push_back(m[s * n + d]);
    for (int64_t rows : p.rows) p.bytes += uint64_t(rows) * RowBytes(t.first());
    return p;
  }
  uint64_t ResultBytes(const ReadyTensor& t, size_t i) const override { return ResultPlace(t, i)->bytes; }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override {
    const ReadyTensor& t = *group.front();
    host.Alltoall(t, RankSplits(t), RowBytes(t.first()));
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    const std::vector<int64_t> m = RankSplits(t);
    const std::vector<uint32_t>& off = *run.offsets;
    const uint32_t nodes = run.nodes(), me = run.node_rank;
    const Pieces p{off.back(), m, RowBytes(t.first())};
    // The fusion buffer: a pack to send to each other node, then a pack received from each.
    // The pack node `from` sends node `to`: for each rank d of `to`, each rank s of `from`'s piece for d.
    auto pack_bytes = [&](uint32_t from, uint32_t to) {
      uint64_t bytes = 0;
      for (uint32_t d = off[to]; d < off[to + 1]; ++d)
        for (uint32_t s = off[from]; s < off[from + 1]; ++s) bytes += p.Bytes(s, d);
      return bytes;
    };
    auto local = [&](uint32_t s) -> const Request& { return t.requests[s - off[me]]; };
    std::vector<ByteSpan> sends(nodes), recvs(nodes);
    uint64_t total = 0;
    for (uint32_t q = 0; q < nodes; ++q)
      if (q != me) total += pack_bytes(me, q) + pack_bytes(q, me);
    const HostBuffer::Block fusion = run.buffer->Reserve(total);
    char* at = fusion->data();
    for (uint32_t q = 0; q < nodes; ++q) {
      if (q == me) continue;
      sends[q] = ByteSpan{at, pack_bytes(me, q)};
      for (uint32_t d = off[q]; d < off[q + 1]; ++d)
        for (uint32_t s = off[me]; s < off[me + 1]; ++s) {
          const uint64_t bytes = p.Bytes(s, d);
          if (bytes > 0) memcpy(at, local(s).data + p.From(s, d), bytes);
          at += bytes;
        }
    }
    for (uint32_t q = 0; q < nodes; ++q) {
      if (q == me) continue;
      recvs[q] = ByteSpan{at, pack_bytes(q, me)};
      at += recvs[q].bytes;
    }
    CommTask exchange = ExchangeBlocks(run.transport, run.tag, sends, recvs, fusion);
    Status st = co_await Await(&exchange);
    if (!st.ok()) co_return st;
    // Rank d's result: from each node q in order, each of q's ranks' pieces for d, in rank order.
    for (uint32_t d = off[me]; d < off[me + 1]; ++d) {
      const Request& dest = local(d);
      if (dest.result == nullptr) continue;
      char* out = dest.result;
      for (uint32_t q = 0; q < nodes; ++q) {
        if (q == me) {
          for (uint32_t s = off[me]; s < off[me + 1]; ++s) {
            const uint64_t bytes = p.Bytes(s, d);
            if (bytes > 0) memcpy(out, local(s).data + p.From(s, d), bytes);
            out += bytes;
          }
          continue;
        }
        // In q's pack for this node, the pieces for d follow those for this node's earlier ranks.
        uint64_t skip = 0;
        for (uint32_t e = off[me]; e < d; ++e)
          for (uint32_t s = off[q]; s < off[q + 1]; ++s) skip += p.Bytes(s, e);
        uint64_t bytes = 0;
        for (uint32_t s = off[q]; s < off[q + 1]; ++s) bytes += p.Bytes(s, d);
        if (bytes > 0) memcpy(out, recvs[q].data + skip, bytes);
        out += bytes;
      }
    }
    co_return Status::Ok();
  }

};

}  // namespace

const Collective& AlltoallKind() {
  static const AlltoallCollective kind;
  return kind;
}

}  // namespace syncd
