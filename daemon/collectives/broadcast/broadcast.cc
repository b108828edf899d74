// Broadcast: every rank ends with the root's tensor. Never fuses. Across nodes on the host path:
// the root's node sends it down a binomial tree of nodes, each node copies it to its ranks.
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/transport/host_collectives.h"

namespace syncd {
namespace {

class BroadcastCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kBroadcast; }
  const char* name() const override { return "broadcast"; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    return ParseRoot(e, set, what, "broadcast", r);
  }

  std::string Disagreement(const std::vector<Request>& rs) const override {
    std::string msg = SameShape(rs);
    if (msg.empty()) msg = SameRoot(rs);
    return msg;
  }

  Status Joined(Request* r) const override {
    if (int32_t(r->rank) == r->root)
      return InvalidArgument("its broadcast root, rank " + std::to_string(r->rank) + ", has joined (hvd.join) and has no data");
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup& group, HostExecutor& host) const override { host.Broadcast(*group.front()); }

  StatusOr<uint64_t> EnqueueGpu(const CollectiveGroup& group, const OnGpus& run) const override {
    const ReadyTensor& t = *group.front();
    return run.gpu->Broadcast(t, uint32_t(t.first().root) / run.local_size);
  }

  CommTask RunAcross(CollectiveGroup group, AcrossNodes run) const override {
    const ReadyTensor& t = *group.front();
    const Request& f = t.first();
    const uint32_t root_node = run.NodeOfGlobal(uint32_t(f.root));
    const HostBuffer::Block fusion = run.buffer->Reserve(f.bytes);
    if (root_node == run.node_rank)
      for (const Request& r : t.requests)
        if (int32_t(r.rank) == r.root && r.bytes > 0) memcpy(fusion->data(), r.data, r.bytes);
    CommTask inter = syncd::Broadcast(run.transport, run.tag, fusion->data(), fusion, f.bytes, root_node);
    Status st = co_await Await(&inter);
    if (!st.ok()) co_return st;
    run.host->ScatterBroadcast(t, fusion->data());
    co_return Status::Ok();
  }
};

}  // namespace

const Collective& BroadcastKind() {
  static const BroadcastCollective kind;
  return kind;
}

}  // namespace syncd
