// Barrier: no data. Being ready means every local rank arrived, being agreed that every rank of
// every node did, so running it is nothing at all.
#include "daemon/collectives/collective.h"

namespace syncd {
namespace {

class BarrierCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kBarrier; }
  const char* name() const override { return "barrier"; }
  bool has_tensor() const override { return false; }

  void RunLocal(const CollectiveGroup&, HostExecutor&) const override {}
  CommTask RunAcross(CollectiveGroup, AcrossNodes) const override { co_return Status::Ok(); }
};

}  // namespace

const Collective& BarrierKind() {
  static const BarrierCollective kind;
  return kind;
}

}  // namespace syncd
