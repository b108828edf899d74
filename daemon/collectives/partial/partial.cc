// Partial allreduce (eager-SGD's solo and majority allreduce): a persistent allreduce of one name
// that runs in rounds once enough ranks arrived, summing what every rank contributed since the
// last round. Its requests are never matched across ranks by the tensor table: the process set
// hands them to its PartialRunner (runner.h), which holds the contributions and
// decides when a round runs. This unit checks a request's fields; a round's data never goes
// through RunLocal or RunAcross.
#include "daemon/collectives/collective.h"

namespace syncd {
namespace {

class PartialAllreduceCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kPartialAllreduce; }
  const char* name() const override { return "partial allreduce"; }
  bool partial() const override { return true; }

  Status Parse(const abi::SubmitEntry& e, const SetRanks& set, const TensorWhat& what, Request* r) const override {
    if (e.op != SYNCD_SUM && e.op != SYNCD_AVERAGE)
      return InvalidArgument(what + ": partial allreduce supports the ops Sum and Average");
    if (r->dtype == SYNCD_BOOL) return InvalidArgument(what + ": partial allreduce of bool tensors is not supported");
    if (e.partial_mode != SYNCD_PARTIAL_SOLO && e.partial_mode != SYNCD_PARTIAL_MAJORITY)
      return InvalidArgument(what + ": unknown partial allreduce mode " + std::to_string(e.partial_mode));
    if (e.root < 0 || uint32_t(e.root) > set.size)
      return InvalidArgument(what + ": partial allreduce quorum " + std::to_string(e.root) + " is not 0.." +
                             std::to_string(set.size));
    if (e.flags & abi::kSubmitGpu) return InvalidArgument(what + ": partial allreduce of GPU tensors is not supported yet");
    r->op = syncd_reduce_op(e.op);
    r->quorum = e.root;
    r->partial_mode = e.partial_mode;
    return Status::Ok();
  }

  void RunLocal(const CollectiveGroup&, HostExecutor&) const override {}
  CommTask RunAcross(CollectiveGroup, AcrossNodes) const override {
    co_return Status(SYNCD_ERR_PROTOCOL, "a partial allreduce runs in rounds, never as a negotiated group");
  }
};

}  // namespace

const Collective& PartialAllreduceKind() {
  static const PartialAllreduceCollective kind;
  return kind;
}

}  // namespace syncd
