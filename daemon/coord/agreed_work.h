// What coordination hands to execution: tensors every node of a set agreed to run, in the same
// order on every node (a negotiation cycle's agreement, or a TOPO plan group). The process set
// takes it, runs it (exec/, collectives/), completes its requests and reports the outcome back;
// coordination itself never runs a collective or completes a request.
#ifndef SYNCD_DAEMON_COORD_AGREED_WORK_H_
#define SYNCD_DAEMON_COORD_AGREED_WORK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/core/tensor_table.h"

namespace syncd {

struct AgreedWork {
  std::vector<ReadyTensor> tensors;
  // Unique to this work across the job: the executor uses slots 1..4095 of it
  // (tag | slot << 12 | segment; transport/tag_space.h).
  uint64_t tag = 0;
  // A negotiated cycle under --coord topo: its GPU collectives go after this many plan GPU groups
  // (GpuOrder). nullopt: a TOPO plan group.
  std::optional<uint64_t> gpu_position;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_AGREED_WORK_H_
