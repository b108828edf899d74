// Reducescatter: the ranks' tensors are reduced (Sum or Average, with scale factors, as allreduce)
// and the result's first dimension is divided among the ranks in rank order; when it does not
// divide evenly the first (rows % size) ranks get one row more (as Horovod). In place: a rank's
// part lands at the start of its own tensor. Never fuses. Across nodes on the host path: local
// reduction of the whole tensor, a ring reduce-scatter over the nodes' parts (each node's part is
// its ranks' rows), then each rank's rows finished into its tensor.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/transport/host_collectives.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Elements [bounds[i], bounds[i+1]) are rank i's part of a tensor like `r` among `size` ranks.
BlockBounds PartBounds(const Request& r, uint32_t size) {
  const uint64_t dim0 = uint64_t(r.shape.at(0));
  const uint64_t row = RowBytes(r) / abi::DtypeSize(r.dtype);
  BlockBounds bounds(size + 1, 0);
  for (uint32_t i = 0; i < size; ++i) bounds[i + 1] = bounds[i] + (dim0 / size + (i < dim0 % size ? 1 : 0)) * row;
  return bounds;
}

class ReducescatterCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kReducescatter; }
  const char* name() const override { return "reducescatter"; }
  bool reduces() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks&, const TensorWhat& what, Request* r) const override {
    if (e.op != SYNCD_SUM && e.op != SYNCD_AVERAGE)
      return InvalidArgument(what + ": reducescatter supports the ops Sum and Average, not " +
                             (e.op < SYNCD_REDUCE_OP_COUNT ? abi::ReduceOpName(syncd_reduce_op(e.op)) : std::to_string(e.op)));
    if (r->dtype == SYNCD_BOOL) return InvalidArgument(what + ": reducescatter of bool tensors is not supported");
    if (r->shape.empty()) return InvalidArgument(what + ": reducescatter needs a tensor of at least one dimension");
    r->op = syncd_reduce_op(e.op);
    r->prescale = e.prescale;
    r->postscale = e.postscale;
    return Status::Ok();
  }

  std::string Disagreement(const std::vector<Request>& rs) const override { return SameReduction(rs); }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override {
    const ReadyTensor& t = *group.front();
    host.Reducescatter(t, PartBounds(t.first(), uint32_t(t.requests.size())));
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    const Request& f = t.first();
    const uint32_t nodes = run.transport->size();
    const BlockBounds parts = PartBounds(f, run.offsets->back());
    BlockBounds bounds(nodes + 1);
    for (uint32_t node = 0; node <= nodes; ++node) bounds[node] = parts[(*run.offsets)[node]];
    const size_t esize = abi::DtypeSize(f.dtype);
    const uint64_t count = f.bytes / esize;
    const HostBuffer::Block fusion = run.buffer->Reserve(f.bytes);
    if (count > 0) run.host->ReduceRange(group, 0, count, fusion->data());
    CommTask ring = ReduceScatterBlocks(run.transport, run.tag, fusion->data(), fusion, bounds, f.dtype, f.op);
    Status st = co_await Await(&ring);
    if (!st.ok()) co_return st;
    for (uint32_t l = 0; l < uint32_t(t.requests.size()); ++l) {
      const uint32_t rank = run.first() + l;
      char* part = fusion->data() + parts[rank] * esize;
      const uint64_t elems = parts[rank + 1] - parts[rank];
      run.host->Finish(f, part, elems, run.absent != nullptr ? uint32_t(run.absent->front()) : 0);
      if (elems > 0) memcpy(t.requests[l].data, part, elems * esize);
    }
    co_return Status::Ok();
  }
};

}  // namespace

const Collective& ReducescatterKind() {
  static const ReducescatterCollective kind;
  return kind;
}

}  // namespace syncd
