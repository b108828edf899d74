// The training graph of a small L-layer network, as a framework binding registers it for TOPO
// (syncd_register_graph): shared by the tests that run plan-driven steps; and the elastic tests'
// training step and moment of loss.
#ifndef SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_
#define SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
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
      syncd_graph_op op{names[v].c_str(), nullptr, dtype, 0, SYNCD_SUM, SYNCD_MEMORY_HOST, SYNCD_COMPRESSION_DEFAULT, 0};
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

// One training step of the elastic tests: each gradient (int32, every element 1 << rank, so that a
// sum shows who was counted) allreduced in backward order, then `avg` (float, 1 << rank) averaged;
// the handles, in that order, into *hs. Returns SYNCD_OK or the first submission's error.
inline int SubmitPowerOfTwoStep(syncd_client* c, int rank, const std::vector<int64_t>& layers,
                                const std::vector<int32_t*>& grads, float* avg, const int64_t& avg_count,
                                std::vector<syncd_handle>* hs) {
  hs->clear();
  for (size_t l = layers.size(); l-- > 0;) {
    for (int64_t i = 0; i < layers[l]; ++i) grads[l][i] = 1 << rank;
    const std::string name = "grad." + std::to_string(l);
    syncd_tensor t{name.c_str(), grads[l], SYNCD_INT32, 1, &layers[l], 0};
    syncd_handle h;
    if (int rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h); rc != SYNCD_OK) return rc;
    hs->push_back(h);
  }
  for (int64_t i = 0; i < avg_count; ++i) avg[i] = float(1 << rank);
  syncd_tensor t{"loss.average", avg, SYNCD_FLOAT32, 1, &avg_count, 0};
  syncd_handle h;
  if (int rc = syncd_allreduce_async(c, &t, SYNCD_AVERAGE, 1, 1, &h); rc != SYNCD_OK) return rc;
  hs->push_back(h);
  return SYNCD_OK;
}

// The ranks alive, as every rank of a job sees them: an allgather of each one's own rank (a lost
// rank's stand-in adds no row). -1 on failure (the child prints why).
inline int AliveRanks(syncd_client* c, int rank) {
  int32_t mine = rank;
  int64_t one = 1;
  syncd_tensor t{"members", &mine, SYNCD_INT32, 1, &one, 0};
  syncd_result result{};
  syncd_handle h;
  if (syncd_allgather_async(c, &t, &result, &h) != SYNCD_OK || syncd_wait(c, h, 30'000) != SYNCD_OK) return -1;
  const int n = int(result.bytes / 4);
  syncd_release_result(c, &result);
  return n;
}

// AliveRanks() again after the job's membership changed under this rank: acknowledges it and calls
// again (as hvd.elastic.run's reset), for up to 20 s.
inline int MembersOnceAcknowledged(syncd_client* c, int rank) {
  for (int tries = 0; tries < 20'000; ++tries) {
    const int n = AliveRanks(c, rank);
    if (n != -1) return n;
    uint32_t membership = 0;
    if (syncd_acknowledge_membership(c, &membership) != SYNCD_OK) return -1;
    usleep(1000);
  }
  return -1;
}

// The elastic tests' moment of a loss: once every one of the `n` ranks has begun its third step
// (`steps`: each rank's current step), a random pause of up to 50 ms: between steps, between
// gradients or inside an allreduce.
inline void PauseAtARandomMoment(const std::atomic<int>* steps, int n, std::mt19937& rng) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (bool ready = false; !ready && std::chrono::steady_clock::now() < deadline; usleep(1000)) {
    ready = true;
    for (int r = 0; r < n; ++r) ready &= steps[r].load() >= 3;
  }
  usleep(rng() % 50'000);
}

}  // namespace syncd::testing

#endif  // SYNCD_TESTS_INTEGRATION_MODEL_GRAPH_H_
