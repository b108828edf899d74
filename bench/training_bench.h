// syncd-bench's training-shaped workloads: a ResNet's gradient set allreduced once per step, and
// the imbalance scenario (CPU work, an input-pipeline thread, jitter between ranks).
#ifndef SYNCD_BENCH_TRAINING_BENCH_H_
#define SYNCD_BENCH_TRAINING_BENCH_H_

#include <syncd/client.h>

#include <string>

namespace syncd::bench {

struct ImbalanceOptions {
  int steps = 20, warmup = 3;
  double compute_ms = 40;   // backward-pass work per step, spread over the gradients
  double jitter_ms = 2;     // extra work per rank and step, uniform in [0, jitter)
  double input_busy_pct = 50;  // the input-pipeline thread's duty cycle (0: no such thread)
  bool ideal = false;       // no communication at all: the step time to compare with
  bool register_graph = false;  // register the step's graph (TOPO) before the warm-up
  int size_divisor = 1;     // gradients of ResNet-50's shapes, each this many times smaller
  bool json = false;
  std::string label;
};

// One data-parallel step's gradient synchronisation of ResNet-`depth` (50, 101, 152), timed.
// With one_buffer, all the gradient bytes as a single tensor instead (fusion's limit).
void RunResNet(syncd_client* c, int depth, int steps, int warmup, bool json, const std::string& label,
               bool one_buffer = false);
// Training steps of the imbalance scenario, with node 0's engine time per step (from syncctl).
void RunImbalance(syncd_client* c, const ImbalanceOptions& o, const char* argv0);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_TRAINING_BENCH_H_
