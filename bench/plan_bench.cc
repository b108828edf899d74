#include "bench/plan_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "daemon/plan/topo.h"

namespace syncd::bench {
namespace {

// A synthetic training graph: layers 8 operations wide; every operation after the first layer
// takes an input from the layer before, and the remaining edges are skip connections reaching
// up to three layers back. Every 24th operation is a gradient allreduce (ResNet-152's graph has
// about 470 of its 11,128), from 64 elements to 2 M. Fetches: the last layer and every allreduce.
Graph LayeredGraph(uint32_t nodes, uint32_t edges, uint32_t seed) {
  constexpr uint32_t kWidth = 8;
  std::mt19937 rng(seed);
  Graph g;
  g.ops.reserve(nodes);
  for (uint32_t i = 0; i < nodes; ++i) {
    if (i % 24 == 23) {
      g.ops.push_back(GraphOp{"op" + std::to_string(i), true, "grad" + std::to_string(i), SYNCD_FLOAT32,
                              uint64_t(64) << (rng() % 16), SYNCD_SUM});
    } else {
      GraphOp op;
      op.name = "op" + std::to_string(i);
      g.ops.push_back(std::move(op));
    }
  }
  auto layer_start = [&](uint32_t layer) { return layer * kWidth; };
  for (uint32_t v = kWidth; v < nodes && g.edges.size() < edges; ++v) {
    const uint32_t prev = v / kWidth - 1;
    g.edges.emplace_back(layer_start(prev) + rng() % kWidth, v);
  }
  while (g.edges.size() < edges && nodes > kWidth) {
    const uint32_t v = kWidth + rng() % (nodes - kWidth);
    const uint32_t layer = v / kWidth;
    const uint32_t back = 1 + rng() % std::min<uint32_t>(3, layer);
    g.edges.emplace_back(layer_start(layer - back) + rng() % kWidth, v);
  }
  for (uint32_t v = (nodes - 1) / kWidth * kWidth; v < nodes; ++v) g.fetches.push_back(v);
  // Each allreduce feeds its parameter's update, which the step runs.
  for (uint32_t v = 0; v < nodes; ++v)
    if (g.ops[v].collective) g.fetches.push_back(v);
  return g;
}

}  // namespace

int RunPlanBench(const PlanBenchOptions& o) {
  if (!o.json) {
    printf("# TOPO plan: logical order + fusion plan (threshold %llu B), median of %d runs\n",
           (unsigned long long)o.fusion_threshold, o.repeats);
    printf("# %8s %8s %12s %8s %10s %10s\n", "nodes", "edges", "collectives", "groups", "plan_ms", "max_ms");
  }
  for (const auto& [nodes, edges] : o.graphs) {
    const Graph g = LayeredGraph(nodes, edges, 1);
    std::vector<double> ms;
    size_t tensors = 0, groups = 0;
    for (int r = 0; r < std::max(1, o.repeats); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      StatusOr<TopoPlan> plan = PlanTopo(g, o.fusion_threshold);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (!plan.ok()) {
        fprintf(stderr, "syncd-bench plan: %s\n", plan.status().message().c_str());
        return 1;
      }
      tensors = plan->tensors.size();
      groups = plan->groups();
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    if (o.json) {
      printf("{\"bench\":\"plan\",\"nodes\":%u,\"edges\":%zu,\"collectives\":%zu,\"groups\":%zu,\"plan_ms\":%.4f,"
             "\"max_ms\":%.4f,\"repeats\":%zu}\n",
             nodes, g.edges.size(), tensors, groups, median, ms.back(), ms.size());
    } else {
      printf("  %8u %8zu %12zu %8zu %10.3f %10.3f\n", nodes, g.edges.size(), tensors, groups, median, ms.back());
    }
  }
  return 0;
}

}  // namespace syncd::bench
