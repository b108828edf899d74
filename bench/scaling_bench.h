// syncd-bench scaling: what one job costs as its daemons grow (issue 36), one rank per daemon.
// Job start: from the earliest rank's syncd_init to the last rank's first allreduce done. Then
// back-to-back 8-byte allreduces of one name (a training step's smallest collective) in two
// windows of S and 2S steps; each daemon's status (syncctl) is read around both, and per-step
// counts are the second window's less the first's, over S: what reading the status and the
// barriers around it add cancels out. The step time is the second window's mean. Per step: each daemon's coordination messages and
// bytes (mean over daemons and the busiest, node 0's hot spot), its engine's CPU, the wall time.
// The step's graph is registered first (under --coord topo the step then runs on the plan). With
// --partial-names K a step is K partial allreduces instead (their rounds' coordination). Then
// an idle window (ranks asleep): the health reports each daemon sends per second (mean, busiest).
#ifndef SYNCD_BENCH_SCALING_BENCH_H_
#define SYNCD_BENCH_SCALING_BENCH_H_

#include <syncd/client.h>

#include <cstdint>
#include <string>

namespace syncd::bench {

struct ScalingOptions {
  int steps = 100;      // S
  std::string syncctl;  // its path (the status of this rank's daemon)
  std::string label;    // carried into the output (the coordination mode)
  bool json = false;
  double idle_s = 2;  // the idle window (health reports per daemon per second)
  // > 0: a step is this many partial allreduces of 8 bytes, one per name (solo, with a quorum of
  // every rank: each name's round each step takes every rank), instead of one allreduce. Their
  // rounds' reports and run messages are what a step costs in coordination.
  int partial_names = 0;
};

// `init_start_ns`: CLOCK_MONOTONIC just before this rank's syncd_init.
void RunScaling(syncd_client* c, const ScalingOptions& o, uint64_t init_start_ns);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_SCALING_BENCH_H_
