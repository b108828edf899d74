// Decodes a TOPO graph as a client sent it (proto/graph_wire.h). Pure; trusts nothing in the bytes.
#ifndef SYNCD_DAEMON_PLAN_GRAPH_CODEC_H_
#define SYNCD_DAEMON_PLAN_GRAPH_CODEC_H_

#include <cstddef>

#include "daemon/base/status.h"
#include "daemon/plan/topo.h"

namespace syncd {

// Fails with SYNCD_ERR_INVALID naming what is wrong (truncation, bad magic or version, unknown
// dtype, op or memory kind, a tensor name that is empty or too long) and, for an operation, its
// index and name.
StatusOr<Graph> DecodeGraph(const char* data, size_t bytes);

}  // namespace syncd

#endif  // SYNCD_DAEMON_PLAN_GRAPH_CODEC_H_
