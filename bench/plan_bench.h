// syncd-bench plan: how long TOPO's plan (logical order + fusion plan) takes for a graph the size
// of a real training graph. Runs without a daemon.
#ifndef SYNCD_BENCH_PLAN_BENCH_H_
#define SYNCD_BENCH_PLAN_BENCH_H_

#include <cstdint>
#include <vector>

namespace syncd::bench {

struct PlanBenchOptions {
  // Graph sizes as nodes:edges; default TensorFlow's ResNet-50 and ResNet-152 training graphs.
  std::vector<std::pair<uint32_t, uint32_t>> graphs = {{3988, 6042}, {11128, 16956}};
  uint64_t fusion_threshold = 64ull << 20;
  int repeats = 50;
  bool json = false;
};

int RunPlanBench(const PlanBenchOptions& o);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_PLAN_BENCH_H_
