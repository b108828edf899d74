// TOPO: a tensor order and fusion plan computed once from the training graph, so that daemons
// need no per-cycle negotiation. Pure functions, O(V + E).
//
// The graph: operations (nodes), dependency edges from producer to consumer, and the fetches
// (the sinks a step runs). Some operations are collectives: they name the tensor they reduce.
//
// 1. Logical order (LogicalOrder): the operations a step runs are those reached by a reverse
//    depth-first search from the fetches. Each gets its depth, the longest path from an
//    operation without inputs, and ids go by depth, then by the order the search finished
//    them. So parents get smaller ids than children (a linear extension of the dependencies),
//    siblings follow insertion order, and parallel operations that are not siblings follow
//    depth: a gradient computed earlier in the backward pass comes first.
// 2. Fusion plan (PlanTopo): the collectives in id order, cut into groups of consecutive ones
//    that share dtype, op, memory (host or GPU) and compression (with its ratio or rank), stay within the fusion threshold
//    and are logically concurrent: no member depends on another, however indirectly.
//
// Every daemon computes the plan from the same registered graph and compares PlanHash values.
#ifndef SYNCD_DAEMON_PLAN_TOPO_H_
#define SYNCD_DAEMON_PLAN_TOPO_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/base/status.h"
#include "syncd/client.h"

namespace syncd {

struct GraphOp {
  std::string name;        // for error messages
  bool collective = false;  // an allreduce of `tensor`
  std::string tensor;
  syncd_dtype dtype = SYNCD_FLOAT32;
  uint64_t count = 0;  // elements
  syncd_reduce_op op = SYNCD_SUM;
  bool gpu = false;  // the tensor is in GPU memory
  // syncd_compression: as decoded, what the rank asked for; planned, as it runs (ResolvedCompression,
  // as for a submission of the tensor).
  uint8_t compression = SYNCD_COMPRESSION_NONE;
  // Top-k's and random-k's ratio in parts per million or PowerSGD's rank: as decoded, as asked (0:
  // the daemon's); planned, as it runs (ResolvedCompressionPpm), 0 for the other methods.
  uint32_t compression_ppm = 0;
};

struct Graph {
  std::vector<GraphOp> ops;
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // producer -> consumer, indices into ops
  std::vector<uint32_t> fetches;
};

struct LogicalOrder {
  std::vector<uint32_t> order;  // op indices by id; only ops the fetches need
  std::vector<int64_t> id;      // op index -> id, -1 when no fetch needs the op
  std::vector<uint32_t> depth;  // op index -> longest path from an op without inputs
};

struct PlannedTensor {
  std::string name;
  syncd_dtype dtype;
  uint64_t count;
  syncd_reduce_op op;
  bool gpu;
  uint8_t compression;       // syncd_compression, resolved as for a submission
  uint32_t compression_ppm;  // GraphOp::compression_ppm, resolved
};

struct TopoPlan {
  std::vector<PlannedTensor> tensors;      // collectives in id order
  std::vector<uint32_t> group_begin;       // group g is tensors[group_begin[g], group_begin[g + 1])
  uint64_t hash = 0;                       // PlanHash
  size_t groups() const { return group_begin.size(); }
  size_t group_end(size_t g) const { return g + 1 < group_begin.size() ? group_begin[g + 1] : tensors.size(); }
};

// Fails, naming the operation, on an edge or fetch out of range or a dependency cycle.
StatusOr<LogicalOrder> ComputeLogicalOrder(const Graph& graph);

// The order, then the groups. Also fails on two collectives of one tensor name, or a collective
// without a name or elements. `fusion_threshold` 0: every tensor alone.
StatusOr<TopoPlan> PlanTopo(const Graph& graph, uint64_t fusion_threshold);

// FNV-1a over the tensors (name, dtype, count, op, memory, compression and its ratio or rank) and
// the group boundaries.
uint64_t PlanHash(const TopoPlan& plan);

// What ranks and nodes compare and show of a plan, carried as a registration request's shape:
// the hash, then the numbers of tensors, groups and tensors in GPU memory.
std::vector<int64_t> PlanShape(const TopoPlan& plan);
// How many of the plan's tensors are in GPU memory.
uint64_t GpuTensors(const TopoPlan& plan);
// "plan 0123456789abcdef (5 tensors, 3 groups, 1 in GPU memory)"; the counts are left out of a
// shape that lacks them.
std::string DescribePlan(const std::vector<int64_t>& plan_shape);

}  // namespace syncd

#endif  // SYNCD_DAEMON_PLAN_TOPO_H_
