// The defaults of the Collective interface, and the registry of kinds.
#include "daemon/collectives/collective.h"

#include "daemon/collectives/agreement.h"

namespace syncd {

Status Collective::Parse(const abi::SubmitEntry&, uint32_t, const std::string&, Request*) const {
  return Status::Ok();
}

std::string Collective::Disagreement(const std::vector<Request>& requests) const { return SameShape(requests); }

std::optional<FusionKey> Collective::FusionKeyOf(const Request&) const { return std::nullopt; }

StatusOr<uint64_t> Collective::EnqueueGpu(const CollectiveGroup&, const OnGpus&) const {
  return InvalidArgument(std::string(name()) + " has no GPU path");
}

// The registry: each kind's file defines its function; one line here declares it, one lists it.
const Collective& AllreduceKind();
const Collective& BroadcastKind();
const Collective& BarrierKind();

const Collective* FindCollective(abi::OpKind kind) {
  static const Collective* const kKinds[] = {
      &AllreduceKind(),
      &BroadcastKind(),
      &BarrierKind(),
  };
  for (const Collective* c : kKinds)
    if (c->kind() == kind) return c;
  return nullptr;
}

const char* OpKindName(abi::OpKind kind) {
  if (const Collective* c = FindCollective(kind)) return c->name();
  switch (kind) {
    case abi::OpKind::kRegisterGraph: return "graph registration";
    case abi::OpKind::kFail: return "failure notice";
    default: return "unknown";
  }
}

}  // namespace syncd
