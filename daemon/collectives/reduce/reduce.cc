// Reduce (torch.distributed's reduce, MPI_Reduce): the root ends with op(prescale * every rank's
// tensor) * postscale (AVERAGE divides by the tensors summed, as allreduce), in place in its own tensor; every other
// rank's tensor is left as it was. Fuses with reduces of the same root, dtype, op and scale
// factors. Across nodes on the host path: each node reduces its ranks' tensors into one buffer,
// then the nodes reduce towards the root's node: up a binomial tree of nodes for small groups
// (log2(nodes) steps of the whole buffer), as a ring reduce-scatter followed by a gather of the
// reduced blocks at the root's node for large ones (each node sends about 2x the buffer / nodes,
// the root's link is not the bottleneck); the root's node finishes the result into the root's
// tensors.
#include <cstring>
#include <memory>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/core/reduce_kernels.h"
#include "daemon/transport/host_collectives.h"
#include "daemon/transport/tag_space.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Groups of at least this many bytes take the reduce-scatter and gather; smaller ones the tree.
constexpr uint64_t kTreeBelowBytes = 64 * 1024;

// Binomial tree towards `root`: after it, the root holds op over every node's `count` elements.
// Interior nodes' buffers are left holding partial results.
CommTask TreeReduce(Transport* t, uint64_t tag, char* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                    syncd_reduce_op op, uint32_t root) {
  const uint32_t n = t->size();
  const size_t bytes = count * abi::DtypeSize(dtype);
  if (n == 1 || bytes == 0) co_return Status::Ok();
  const uint32_t vrank = (t->rank() + n - root) % n;
  const std::shared_ptr<char[]> incoming = ScratchFor(bytes);
  for (uint32_t mask = 1; mask < n; mask <<= 1) {
    if (vrank & mask) {  // send the partial result up and stop
      co_return co_await Wait(t, t->Send((vrank - mask + root) % n, SliceTag(tag), data, bytes, owner));
    }
    if (vrank + mask < n) {
      Status st = co_await Wait(t, t->Recv((vrank + mask + root) % n, SliceTag(tag), incoming.get(), bytes, incoming));
      if (!st.ok()) co_return st;
      ReduceInto(dtype, op, data, incoming.get(), count);
    }
  }
  co_return Status::Ok();
}

// Ring reduce-scatter over equal element blocks, then every block sent to the root's node.
CommTask ScatterGatherReduce(Transport* t, uint64_t tag, char* data, BufferOwner owner, size_t count,
                             syncd_dtype dtype, syncd_reduce_op op, uint32_t root) {
  const uint32_t n = t->size(), me = t->rank();
  if (n == 1 || count == 0) co_return Status::Ok();
  BlockBounds bounds(n + 1, 0);
  for (uint32_t i = 0; i < n; ++i) bounds[i + 1] = bounds[i] + count / n + (i < count % n ? 1 : 0);
  CommTask rs = ReduceScatterBlocks(t, tag, data, owner, bounds, dtype, op);
  Status st = co_await Await(&rs);
  if (!st.ok()) co_return st;
  const size_t esize = abi::DtypeSize(dtype);
  auto block = [&](uint32_t i) {
    return Transfer{i, data + bounds[i] * esize, (bounds[i + 1] - bounds[i]) * esize, owner};
  };
  Transfers sends, recvs;
  if (me == root) {
    for (uint32_t i = 0; i < n; ++i)
      if (i != root) recvs.push_back(block(i));
  } else {
    Transfer mine = block(me);
    mine.peer = root;
    sends.push_back(mine);
  }
  CommTask gather = Exchange(t, tag + 1, std::move(sends), std::move(recvs));
  co_return co_await Await(&gather);
}

// The local rank holding the root's request, or nullptr (the root is on another node).
const Request* RootOf(const ReadyTensor& t) {
  for (const Request& r : t.requests)
    if (int32_t(r.rank) == r.root) return &r;
  return nullptr;
}

Status CheckDtypeAndOp(const Request& r, const TensorWhat& what) {
  if (r.dtype != SYNCD_BOOL) return Status::Ok();
  if (r.op == SYNCD_AVERAGE)
    return InvalidArgument(what + ": reduce of bool tensors cannot average; use Sum (logical or) or Min (logical and)");
  if (r.prescale != 1.0 || r.postscale != 1.0)
    return InvalidArgument(what + ": reduce of bool tensors takes no prescale or postscale factor");
  return Status::Ok();
}

class ReduceCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kReduce; }
  const char* name() const override { return "reduce"; }
  bool reduces() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    if (e.op >= SYNCD_REDUCE_OP_COUNT)
      return ProtocolError("malformed ring entry: " + what + " has unknown reduce op " + std::to_string(e.op));
    if (e.op == SYNCD_ADASUM) return InvalidArgument(what + ": reduce supports Sum, Average, Min, Max and Product, not Adasum");
    if (Status st = ParseRoot(e, set, what, "reduce", r); !st.ok()) return st;
    r->op = syncd_reduce_op(e.op);
    r->prescale = e.prescale;
    r->postscale = e.postscale;
    return CheckDtypeAndOp(*r, what);
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    std::string msg = SameReduction(rs);
    if (msg.empty()) msg = SameRoot(rs);
    return msg;
  }

  std::optional<FusionKey> FusionKeyOf(const Request& r) const override {
    return FusionKey{r.kind, r.dtype, r.op, r.prescale, r.postscale, r.gpu, r.root};
  }

  Status Joined(Request* r) const override {  // the identity to reduce, unless it is the root
    if (int32_t(r->rank) == r->root)
      return InvalidArgument("its reduce root, rank " + std::to_string(r->rank) + ", has joined (hvd.join)");
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override {
    const Request& head = group.front()->first();
    const ReduceSpec spec{head.dtype, head.op == SYNCD_AVERAGE ? SYNCD_SUM : head.op, head.prescale, 1.0, 1};
    const size_t esize = abi::DtypeSize(head.dtype);
    const size_t n = group.front()->requests.size();
    std::vector<const void*> in(n);
    for (const ReadyTensor* t : group) {
      const Request* root = RootOf(*t);
      if (root == nullptr) continue;
      const size_t count = root->bytes / esize;
      for (size_t off = 0; off < count; off += kReduceChunkElements) {
        const size_t m = std::min(kReduceChunkElements, count - off);
        const size_t k = HostExecutor::Contributions(*t, off * esize, in.data());
        void* out[1] = {root->data + off * esize};
        ReduceChunk(spec, in.data(), k, out, 1, m);
      }
      host.Finish(head, root->data, count, HostExecutor::AbsentIn(*t));  // postscale and the average's divisor
    }
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const Request& head = group.front()->first();
    const size_t esize = abi::DtypeSize(head.dtype);
    uint64_t bytes = 0;
    for (const ReadyTensor* t : group) bytes += t->first().bytes;
    const size_t count = bytes / esize;
    const uint32_t root_node = run.NodeOfGlobal(uint32_t(head.root));
    const HostBuffer::Block fusion = run.buffer->Reserve(bytes);
    if (count > 0) run.host->ReduceRange(group, 0, count, fusion->data());
    CommTask inter = bytes < kTreeBelowBytes
                         ? TreeReduce(run.transport, run.tag, fusion->data(), fusion, count, head.dtype, head.op, root_node)
                         : ScatterGatherReduce(run.transport, run.tag, fusion->data(), fusion, count, head.dtype,
                                               head.op, root_node);
    Status st = co_await Await(&inter);
    if (!st.ok() || run.node_rank != root_node) co_return st;
    uint64_t at = 0;
    for (size_t member = 0; member < group.size(); ++member) {
      const ReadyTensor* t = group[member];
      // The average divides by the tensors summed: lost ranks' stand-ins, counted on every node, not.
      const uint32_t absent = run.absent != nullptr ? uint32_t((*run.absent)[member]) : 0;
      run.host->Finish(head, fusion->data() + at, t->first().bytes / esize, absent);
      if (const Request* root = RootOf(*t); root != nullptr && root->bytes > 0)
        memcpy(root->data, fusion->data() + at, root->bytes);
      at += t->first().bytes;
    }
    co_return Status::Ok();
  }
};

}  // namespace

const Collective& ReduceKind() {
  static const ReduceCollective kind;
  return kind;
}

}  // namespace syncd
