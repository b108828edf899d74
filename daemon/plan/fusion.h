// Tensor fusion: which ready tensors execute together as one fused allreduce. Pure function.
//
// Rules (Horovod's): only allreduces fuse; members share dtype, op, scale factors and memory (host or GPU); a group's
// payload stays within `threshold` bytes (a larger tensor runs alone); 0 disables fusion. Groups
// are ordered by their first member and keep the ready order inside, so every daemon that sees
// the same ready list builds the same groups.
#ifndef SYNCD_DAEMON_PLAN_FUSION_H_
#define SYNCD_DAEMON_PLAN_FUSION_H_

#include <cstdint>
#include <vector>

#include "proto/shm_abi.h"

namespace syncd {

struct FusionCandidate {
  abi::OpKind kind;
  syncd_dtype dtype;
  syncd_reduce_op op;
  double prescale;
  double postscale;
  uint64_t bytes;
  bool gpu = false;  // GPU tensors fuse only with GPU tensors, host with host
};

using FusionGroup = std::vector<size_t>;  // indices into the candidate list

std::vector<FusionGroup> PlanFusion(const std::vector<FusionCandidate>& ready, uint64_t threshold);

}  // namespace syncd

#endif  // SYNCD_DAEMON_PLAN_FUSION_H_
