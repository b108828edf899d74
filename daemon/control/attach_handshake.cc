#include "daemon/control/attach_handshake.h"

namespace syncd {

std::string AttachingRank(const abi::AttachRequest& req, int32_t pid) {
  return "rank " + std::to_string(req.rank) + " (pid " + std::to_string(pid) + ")";
}

Status CheckAttachRequest(const abi::AttachRequest& req, int32_t pid, const AttachRules& rules) {
  if (req.magic != abi::kMagic || req.version != abi::kVersion)
    return Status(SYNCD_ERR_PROTOCOL, "pid " + std::to_string(pid) + " speaks protocol version " +
                                          std::to_string(req.version) + " (magic " + std::to_string(req.magic) +
                                          "); this daemon speaks version " + std::to_string(abi::kVersion));
  const std::string who = AttachingRank(req, pid);
  // A node service's client: its job first, so that nothing else is said to a process that may
  // not attach at all.
  if (rules.jobs != nullptr)
    if (Status st = rules.jobs->Admit(req.job_id, rules.uid, rules.gid); !st.ok()) return Status(st.code(), who + " " + st.message());
  if ((req.flags & ~abi::kAttachHandBack) != 0)
    return Status(SYNCD_ERR_PROTOCOL, who + ": attach flags " + std::to_string(req.flags) + " are not known here");
  if (!rules.accepting)
    return Status(SYNCD_ERR_REFUSED, who + ": syncd at " + rules.run_dir + " is draining and takes no new clients");
  if (req.local_size <= 0 || uint32_t(req.local_size) > kMaxLocalSize || req.local_rank < 0 ||
      req.local_rank >= req.local_size)
    return Status(SYNCD_ERR_INVALID, who + ": local rank " + std::to_string(req.local_rank) + " of " +
                                         std::to_string(req.local_size) + " is not valid (a node runs 1 to " +
                                         std::to_string(kMaxLocalSize) + " ranks)");
  const uint32_t ls = uint32_t(req.local_size);
  if (rules.local_size != 0 && ls != rules.local_size)
    return Status(SYNCD_ERR_REFUSED, who + " says local size " + std::to_string(ls) + " but this node runs " +
                                         std::to_string(rules.local_size) + " ranks");
  const uint64_t size = uint64_t(ls) * rules.nodes;
  const uint64_t rank = uint64_t(rules.node_rank) * ls + uint64_t(req.local_rank);
  if (req.size <= 0 || req.rank < 0 || uint64_t(req.size) != size || uint64_t(req.rank) != rank)
    return Status(SYNCD_ERR_REFUSED, who + ": rank " + std::to_string(req.rank) + " of " + std::to_string(req.size) +
                                         " does not fit node " + std::to_string(rules.node_rank) + " of " +
                                         std::to_string(rules.nodes) + " with " + std::to_string(ls) +
                                         " local ranks");
  return Status::Ok();
}

}  // namespace syncd
