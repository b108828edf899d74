#include "daemon/plan/topo.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "daemon/base/hash.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Adjacency lists in one array each, in edge insertion order.
struct Csr {
  std::vector<uint32_t> begin;  // n + 1
  std::vector<uint32_t> to;
  size_t size(uint32_t v) const { return begin[v + 1] - begin[v]; }
  uint32_t at(uint32_t v, size_t i) const { return to[begin[v] + i]; }
};

Csr BuildCsr(size_t n, const std::vector<std::pair<uint32_t, uint32_t>>& edges, bool reverse) {
  Csr c;
  c.begin.assign(n + 1, 0);
  for (const auto& [u, v] : edges) ++c.begin[(reverse ? v : u) + 1];
  for (size_t i = 0; i < n; ++i) c.begin[i + 1] += c.begin[i];
  c.to.resize(edges.size());
  std::vector<uint32_t> fill(c.begin.begin(), c.begin.end() - 1);
  for (const auto& [u, v] : edges) c.to[fill[reverse ? v : u]++] = reverse ? u : v;
  return c;
}

std::string OpName(const Graph& g, uint32_t v) {
  return "operation " + std::to_string(v) + (g.ops[v].name.empty() ? "" : " ('" + g.ops[v].name + "')");
}

}  // namespace

StatusOr<LogicalOrder> ComputeLogicalOrder(const Graph& graph) {
  const size_t n = graph.ops.size();
  for (const auto& [u, v] : graph.edges) {
    if (u >= n || v >= n)
      return Status(SYNCD_ERR_INVALID, "graph: edge " + std::to_string(u) + " -> " + std::to_string(v) +
                                           " names an operation that does not exist (" + std::to_string(n) +
                                           " operations)");
    if (u == v) return Status(SYNCD_ERR_INVALID, "graph: " + OpName(graph, u) + " depends on itself");
  }
  for (uint32_t f : graph.fetches)
    if (f >= n)
      return Status(SYNCD_ERR_INVALID, "graph: fetch " + std::to_string(f) + " is not an operation (" +
                                           std::to_string(n) + " operations)");
  const Csr inputs = BuildCsr(n, graph.edges, /*reverse=*/true);

  // Reverse depth-first search from the fetches, iterative; inputs in insertion order.
  enum : uint8_t { kNew, kOpen, kDone };
  std::vector<uint8_t> state(n, kNew);
  std::vector<uint32_t> finished;  // post-order: every op after its inputs
  finished.reserve(n);
  std::vector<std::pair<uint32_t, uint32_t>> stack;  // op, next input to visit
  for (uint32_t f : graph.fetches) {
    if (state[f] != kNew) continue;
    state[f] = kOpen;
    stack.emplace_back(f, 0);
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      if (next < inputs.size(v)) {
        const uint32_t u = inputs.at(v, next++);
        if (state[u] == kOpen)
          return Status(SYNCD_ERR_INVALID, "graph: dependency cycle through " + OpName(graph, u) + " and " +
                                               OpName(graph, v));
        if (state[u] == kNew) {
          state[u] = kOpen;
          stack.emplace_back(u, 0);  // invalidates v and next: the loop reloads them
        }
        continue;
      }
      state[v] = kDone;
      finished.push_back(v);
      stack.pop_back();
    }
  }

  LogicalOrder out;
  out.depth.assign(n, 0);
  uint32_t max_depth = 0;
  for (uint32_t v : finished) {
    uint32_t d = 0;
    for (size_t i = 0; i < inputs.size(v); ++i) d = std::max(d, out.depth[inputs.at(v, i)] + 1);
    out.depth[v] = d;
    max_depth = std::max(max_depth, d);
  }
  // Counting sort by depth, stable in finishing order.
  std::vector<uint32_t> at_depth(size_t(max_depth) + 2, 0);
  for (uint32_t v : finished) ++at_depth[out.depth[v] + 1];
  for (size_t d = 0; d + 1 < at_depth.size(); ++d) at_depth[d + 1] += at_depth[d];
  out.order.resize(finished.size());
  for (uint32_t v : finished) out.order[at_depth[out.depth[v]]++] = v;
  out.id.assign(n, -1);
  for (size_t i = 0; i < out.order.size(); ++i) out.id[out.order[i]] = int64_t(i);
  return out;
}

StatusOr<TopoPlan> PlanTopo(const Graph& graph, uint64_t fusion_threshold) {
  SYNCD_ASSIGN_OR_RETURN(LogicalOrder order, ComputeLogicalOrder(graph));
  const size_t n = graph.ops.size();
  std::vector<uint32_t> collectives;  // op indices in id order
  std::unordered_map<std::string, uint32_t> by_name;
  for (uint32_t v : order.order) {
    const GraphOp& op = graph.ops[v];
    if (!op.collective) continue;
    if (op.tensor.empty()) return Status(SYNCD_ERR_INVALID, "graph: collective " + OpName(graph, v) + " names no tensor");
    if (op.count == 0) return Status(SYNCD_ERR_INVALID, "graph: collective " + OpName(graph, v) + " (tensor '" +
                                                            op.tensor + "') has no elements");
    if (op.dtype >= SYNCD_DTYPE_COUNT || op.op >= SYNCD_REDUCE_OP_COUNT)
      return Status(SYNCD_ERR_INVALID, "graph: collective " + OpName(graph, v) + " (tensor '" + op.tensor +
                                           "') has an unknown dtype or reduce op");
    if (const char* why = abi::CompressionWithdrawn(op.compression))
      return Status(SYNCD_ERR_INVALID, "graph: collective " + OpName(graph, v) + " (tensor '" + op.tensor + "'): " + why);
    if (!abi::CompressionReduces(op.compression, op.op))
      return Status(SYNCD_ERR_INVALID, "graph: collective " + OpName(graph, v) + " (tensor '" + op.tensor + "'): " +
                                           abi::CompressionName(op.compression) + " compression sums, so it cannot "
                                           "reduce with " + abi::ReduceOpName(op.op));
    if (auto [it, fresh] = by_name.emplace(op.tensor, v); !fresh)
      return Status(SYNCD_ERR_INVALID, "graph: tensor '" + op.tensor + "' is reduced by both " +
                                           OpName(graph, it->second) + " and " + OpName(graph, v));
    collectives.push_back(v);
  }
  // A plan with no collective would have every step run nothing: a graph of the wrong model, or
  // one that never named its gradients.
  if (collectives.empty())
    return Status(SYNCD_ERR_INVALID, "graph: no operation is a collective (none names a tensor to allreduce), so a "
                                     "TOPO plan would run nothing; register the training graph with its allreduces");

  TopoPlan plan;
  const Csr outputs = BuildCsr(n, graph.edges, /*reverse=*/false);
  // reached[v] == g: v depends on a member of group g. Ids only grow along edges, so scanning the
  // ops between one candidate and the next, and spreading marks from marked ops, finds every
  // dependency on the group in a single forward pass over the whole order.
  std::vector<uint32_t> reached(n, UINT32_MAX);
  uint32_t group = 0;
  size_t scan = 0;
  uint64_t group_bytes = 0;
  for (size_t i = 0; i < collectives.size(); ++i) {
    const uint32_t v = collectives[i];
    const GraphOp& op = graph.ops[v];
    const uint64_t bytes = op.count * abi::DtypeSize(op.dtype);
    bool joins = false;
    if (i > 0) {
      const GraphOp& head = graph.ops[collectives[plan.group_begin.back()]];
      joins = op.dtype == head.dtype && op.op == head.op && op.gpu == head.gpu && op.compression == head.compression &&
              op.compression_ppm == head.compression_ppm &&
              group_bytes + bytes <= fusion_threshold;
      if (joins) {
        const size_t until = size_t(order.id[v]);
        for (; scan < until; ++scan) {
          const uint32_t u = order.order[scan];
          if (reached[u] != group) continue;
          for (size_t k = 0; k < outputs.size(u); ++k) reached[outputs.at(u, k)] = group;
        }
        joins = reached[v] != group;
      }
    }
    if (!joins) {
      if (i > 0) ++group;
      plan.group_begin.push_back(uint32_t(i));
      group_bytes = 0;
      scan = size_t(order.id[v]);
    }
    reached[v] = group;
    group_bytes += bytes;
    plan.tensors.push_back(
        PlannedTensor{op.tensor, op.dtype, op.count, op.op, op.gpu, op.compression, op.compression_ppm});
  }
  plan.hash = PlanHash(plan);
  return plan;
}

uint64_t PlanHash(const TopoPlan& plan) {
  Hasher h;
  for (const PlannedTensor& t : plan.tensors) {
    h.Add(t.name.data(), t.name.size() + 1);  // with the terminator: "ab","c" != "a","bc"
    h.Add(uint32_t(t.dtype)).Add(t.count).Add(uint32_t(t.op)).Add(uint8_t(t.gpu)).Add(t.compression);
    h.Add(t.compression_ppm);
  }
  for (uint32_t b : plan.group_begin) h.Add(b);
  return h.Digest();
}

uint64_t GpuTensors(const TopoPlan& plan) {
  return uint64_t(std::count_if(plan.tensors.begin(), plan.tensors.end(), [](const PlannedTensor& t) { return t.gpu; }));
}

std::vector<int64_t> PlanShape(const TopoPlan& plan) {
  return {int64_t(plan.hash), int64_t(plan.tensors.size()), int64_t(plan.groups()), int64_t(GpuTensors(plan))};
}

std::string DescribePlan(const std::vector<int64_t>& plan_shape) {
  char hex[32];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)(plan_shape.empty() ? 0 : plan_shape[0]));
  std::string d = std::string("plan ") + hex;
  if (plan_shape.size() < 4) return d;
  auto counted = [](int64_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
  d += " (" + counted(plan_shape[1], "tensor") + ", " + counted(plan_shape[2], "group");
  if (plan_shape[3] > 0) d += ", " + std::to_string(plan_shape[3]) + " in GPU memory";
  return d + ")";
}

}  // namespace syncd
