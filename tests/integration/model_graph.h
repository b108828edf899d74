// The training graph of a small L-layer network, as a framework binding registers it for TOPO
// (syncd_register_graph): shared by the tests that run plan-driven steps.
#ifndef SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_
#define SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "syncd/client.h"

namespace syncd::testing {

// The graph of one training step of an L-layer network: forward f0..fL-1, loss, backward
// bL-1..b0 (b_i needs b_i+1 and f_i), an allreduce of grad.i after b_i, and the optimizer's
// apply_i after it; the fetches are the applies. The allreduces are logically concurrent.
struct ModelGraph {
  std::vector<std::string> names, tensors;
  std::vector<syncd_graph_op> ops;
  std::vector<uint32_t> edges, fetches;
  syncd_graph graph{};

  // gpu_tensor >= 0: that gradient is declared in GPU memory.
  explicit ModelGraph(const std::vector<int64_t>& counts, syncd_dtype dtype = SYNCD_INT32, int gpu_tensor = -1) {
    const uint32_t L = uint32_t(counts.size());
    // op indices: f_i = i, loss = L, b_i = L + 1 + i, ar_i = 2L + 1 + i, apply_i = 3L + 1 + i.
    for (uint32_t i = 0; i < L; ++i) names.push_back("forward" + std::to_string(i));
    names.push_back("loss");
    for (uint32_t i = 0; i < L; ++i) names.push_back("backward" + std::to_string(i));
    for (uint32_t i = 0; i < L; ++i) names.push_back("allreduce" + std::to_string(i));
    for (uint32_t i = 0; i < L; ++i) names.push_back("apply" + std::to_string(i));
    for (uint32_t i = 0; i < L; ++i) tensors.push_back("grad." + std::to_string(i));
    for (uint32_t v = 0; v < names.size(); ++v) {
      syncd_graph_op op{names[v].c_str(), nullptr, dtype, 0, SYNCD_SUM, SYNCD_MEMORY_HOST};
      if (v >= 2 * L + 1 && v < 3 * L + 1) {
        op.tensor = tensors[v - 2 * L - 1].c_str();
        op.count = uint64_t(counts[v - 2 * L - 1]);
        if (int(v - 2 * L - 1) == gpu_tensor) op.memory = SYNCD_MEMORY_GPU;
      }
      ops.push_back(op);
    }
    auto edge = [&](uint32_t a, uint32_t b) { edges.insert(edges.end(), {a, b}); };
    for (uint32_t i = 1; i < L; ++i) edge(i - 1, i);
    edge(L - 1, L);
    edge(L, L + 1 + (L - 1));
    for (uint32_t i = 0; i + 1 < L; ++i) edge(L + 1 + i + 1, L + 1 + i);
    for (uint32_t i = 0; i < L; ++i) {
      edge(i, L + 1 + i);
      edge(L + 1 + i, 2 * L + 1 + i);
      edge(2 * L + 1 + i, 3 * L + 1 + i);
      fetches.push_back(3 * L + 1 + i);
    }
    graph = syncd_graph{ops.data(), ops.size(), edges.data(), edges.size() / 2, fetches.data(), fetches.size()};
  }
};

}  // namespace syncd::testing

#endif  // SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_
