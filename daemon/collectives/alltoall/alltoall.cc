// Alltoall: rank s sends splits[d] rows of its tensor (in order, from its first row) to each rank
// d; rank d ends with what every rank sent it, in rank order, and with how many rows each sent
// (the received splits, in its result block's header). No splits: equal parts (the first
// dimension must divide by the number of ranks). The other dimensions must agree. Never fuses.
// Across nodes on the host path: every piece travels as its own message, from the sender's tensor
// straight into the receiver's result block; all of them at once.
#include <algorithm>
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
  absl::Span<const int64_t> m;
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

  Status Parse(const abi::SubmitEntry&, const SetRanks& set, const TensorWhat& what, Request* r) const override {
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
      if (s > dim0 - sum)  // checked before adding: splits from shared memory could overflow the sum
        return InvalidArgument(what + ": alltoall splits add up to more than the tensor's " + std::to_string(dim0) +
                               " rows");
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

  // Rank i receives column d (its set rank) of the splits matrix; each rank has one split per
  // rank of the set.
  bool ResultPlace(const ReadyTensor& t, size_t i, Placement* p) const override {
    RankScratch scratch;  // stays empty where the tensor holds its splits
    const absl::Span<const int64_t> m = RankSplits(t, &scratch);
    const size_t n = t.first().splits.size(), d = t.requests[i].set_rank;
    p->rows.clear();
    p->bytes = 0;
    for (size_t s = 0; s < n; ++s) {
      p->rows.push_back(m[s * n + d]);
      p->bytes += uint64_t(m[s * n + d]) * RowBytes(t.first());
    }
    return true;
  }
  uint64_t ResultBytes(const ReadyTensor& t, size_t i) const override {
    RankScratch scratch;
    const absl::Span<const int64_t> m = RankSplits(t, &scratch);
    const size_t n = t.first().splits.size(), d = t.requests[i].set_rank;
    uint64_t bytes = 0;
    for (size_t s = 0; s < n; ++s) bytes += uint64_t(m[s * n + d]) * RowBytes(t.first());
    return bytes;
  }
  Status Joined(Request* r) const override {  // sends nothing; what it is sent is dropped
    r->shape[0] = 0;
    r->bytes = 0;
    r->splits.assign(r->splits.size(), 0);
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override {
    const ReadyTensor& t = *group.front();
    RankScratch scratch;
    host.Alltoall(t, RankSplits(t, &scratch), RowBytes(t.first()));
  }

  // Every piece goes straight from its sender's tensor to its receiver's result block: one
  // message per piece between nodes, a copy within the node, nothing staged.
  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    RankScratch splits;
    const absl::Span<const int64_t> m = RankSplits(t, &splits);
    const std::vector<uint32_t>& off = *run.offsets;
    const uint32_t nodes = run.nodes(), me = run.node_rank;
    const Pieces p{off.back(), m, RowBytes(t.first())};
    auto local = [&](uint32_t s) -> const Request& { return t.requests[s - off[me]]; };
    // Where s's piece lands in d's result: after the pieces of the ranks before s.
    auto into = [&](uint32_t s, uint32_t d) {
      uint64_t at = 0;
      for (uint32_t e = 0; e < s; ++e) at += p.Bytes(e, d);
      return at;
    };
    // A rank whose result block could not be allocated still receives what it was sent.
    uint64_t scratch_bytes = 0;
    for (uint32_t d = off[me]; d < off[me + 1]; ++d)
      if (local(d).result == nullptr)
        for (uint32_t s = 0; s < off.back(); ++s) scratch_bytes = std::max(scratch_bytes, p.Bytes(s, d));
    const HostBuffer::Block scratch = run.buffer->Reserve(scratch_bytes);
    Transfers sends, recvs;
    for (uint32_t q = 0; q < nodes; ++q) {
      if (q == me) continue;
      // The same order on both sides: for each receiving rank d, each sending rank s.
      for (uint32_t d = off[q]; d < off[q + 1]; ++d)
        for (uint32_t s = off[me]; s < off[me + 1]; ++s)
          sends.push_back(Transfer{q, local(s).data + p.From(s, d), p.Bytes(s, d), local(s).memory});
      for (uint32_t d = off[me]; d < off[me + 1]; ++d)
        for (uint32_t s = off[q]; s < off[q + 1]; ++s) {
          const Request& dest = local(d);
          if (dest.result != nullptr) recvs.push_back(Transfer{q, dest.result + into(s, d), p.Bytes(s, d), dest.memory});
          else recvs.push_back(Transfer{q, scratch->data(), p.Bytes(s, d), scratch});
        }
    }
    // This node's own pieces meanwhile.
    for (uint32_t d = off[me]; d < off[me + 1]; ++d) {
      if (local(d).result == nullptr) continue;
      for (uint32_t s = off[me]; s < off[me + 1]; ++s)
        if (p.Bytes(s, d) > 0) memcpy(local(d).result + into(s, d), local(s).data + p.From(s, d), p.Bytes(s, d));
    }
    CommTask exchange = Exchange(run.transport, run.tag, std::move(sends), std::move(recvs));
    Status st = co_await Await(&exchange);
    if (!st.ok()) co_return st;
    co_return Status::Ok();
  }

};

}  // namespace

const Collective& AlltoallKind() {
  static const AlltoallCollective kind;
  return kind;
}

}  // namespace syncd
