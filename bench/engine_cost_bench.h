// syncd-bench cost: what a collective costs each daemon's engine (issue 64). Per kind and size,
// back-to-back collectives between two reads of every daemon's status (one rank per daemon reads its
// own): per collective the daemon completed, its engine thread's CPU, the part of it in turns that
// did work (its busy time: what the work costs, without the spinning), its wake-ups (sleeps
// that ended), its loop's turns that did work, its messages to other daemons and its futex wakes of
// clients; beside them the ranks' own CPU (getrusage of every rank, summed) per collective and
// the wall time per collective, the figures `syncd-mpi-allreduce` gives for MPI.
#ifndef SYNCD_BENCH_ENGINE_COST_BENCH_H_
#define SYNCD_BENCH_ENGINE_COST_BENCH_H_

#include <syncd/client.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace syncd::bench {

struct EngineCostOptions {
  std::vector<std::string> ops = {"allreduce"};  // the kinds, each in turn
  std::vector<uint64_t> sizes;  // bytes of each collective (float32; nccl-tests' sizes per kind)
  int iters = 2000;             // timed allreduces per size
  int warmup = 100;
  std::string syncctl;  // its path (the status of this rank's daemon)
  std::string label;    // carried into the output
  bool json = false;
};

// One collective of kind `op` named `name` on `count` float32 elements at `data` (an arena
// buffer), waited for: syncd-bench's own (every kind as `syncd-bench <kind>` runs it).
using RunCollective = std::function<void(const std::string& op, const char* name, void* data, int64_t count)>;

void RunEngineCost(syncd_client* c, const EngineCostOptions& o, const RunCollective& run);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_ENGINE_COST_BENCH_H_
