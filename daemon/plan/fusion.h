// Tensor fusion: which ready tensors execute together as one fused collective. Pure function.
//
// Rules (Horovod's): each collective kind says which of its requests may fuse by giving them a
// key (collectives/collective.h: allreduces of one dtype, op, scale factors and memory); a request
// without a key runs alone. A group's payload stays within `threshold` bytes (a larger tensor
// runs alone); 0 disables fusion. Groups are ordered by their first member and keep the ready
// order inside, so every daemon that sees the same ready list builds the same groups.
#ifndef SYNCD_DAEMON_PLAN_FUSION_H_
#define SYNCD_DAEMON_PLAN_FUSION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "proto/shm_abi.h"

namespace syncd {

// What members of one fused group share.
struct FusionKey {
  abi::OpKind kind = abi::OpKind::kAllreduce;
  syncd_dtype dtype = SYNCD_FLOAT32;
  syncd_reduce_op op = SYNCD_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  bool gpu = false;  // GPU tensors fuse only with GPU tensors, host with host
  int32_t root = 0;  // kinds with a root rank fuse only with requests of the same root
  uint8_t compression = 0;  // allreduce: the inter-node hop's (syncd_compression)
  uint32_t compression_ppm = 0;  // and its ratio (top-k, random-k)
  bool operator==(const FusionKey&) const = default;
};

struct FusionCandidate {
  std::optional<FusionKey> key;  // nullopt: never fuses
  uint64_t bytes = 0;
};

using FusionGroup = std::vector<size_t>;  // indices into the candidate list

std::vector<FusionGroup> PlanFusion(const std::vector<FusionCandidate>& ready, uint64_t threshold);

// PlanFusion into `*groups`, reusing its groups' storage and `*taken` (a caller that plans every
// turn allocates nothing once the group count has been seen).
void PlanFusionInto(const std::vector<FusionCandidate>& ready, uint64_t threshold, std::vector<FusionGroup>* groups,
                    std::vector<bool>* taken);

}  // namespace syncd

#endif  // SYNCD_DAEMON_PLAN_FUSION_H_
