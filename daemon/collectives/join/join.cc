// Join (hvd.join): a rank with no more data. Being ready means every local rank joined, being
// agreed that every rank of the job did; running it is nothing. Its requests carry the last rank
// to join in `last_joined` (the tensor table sets it per node, the coordinator picks the last
// node's; AgreedArg carries it), and every rank's join completes with "last rank <r>". Until then
// joined ranks stand in for the others' collectives (Collective::Joined, core/tensor_table.h, the
// negotiator).
#include "daemon/collectives/collective.h"

namespace syncd {
namespace {

class JoinCollective final : public Collective {
 public:
  abi::OpKind kind() const override { return abi::OpKind::kJoin; }
  const char* name() const override { return "join"; }
  bool has_tensor() const override { return false; }
  int32_t AgreedArg(const Request& r) const override { return r.last_joined; }
  void SetAgreedArg(Request* r, int32_t arg) const override { r->last_joined = arg; }
  std::string CompletionText(const ReadyTensor& t) const override {
    return "last rank " + std::to_string(t.first().last_joined);
  }

  void RunLocal(const CollectiveGroup&, HostExecutor&) const override {}
  CommTask RunAcross(CollectiveGroup, AcrossNodes) const override { co_return Status::Ok(); }
};

}  // namespace

const Collective& JoinKind() {
  static const JoinCollective kind;
  return kind;
}

}  // namespace syncd
