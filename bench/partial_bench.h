// syncd-bench partial: eager-SGD's micro-benchmark (Li et al., PPoPP 2020). Each round every rank
// leaves a barrier, waits rank x skew ms (linear skew), then times one call: a full allreduce, a
// solo or a majority partial allreduce. Reports the mean latency over ranks and rounds and the
// mean NAP (fresh ranks per round). bench/partial.sh runs it with MPI_Allreduce as the peer.
#ifndef SYNCD_BENCH_PARTIAL_BENCH_H_
#define SYNCD_BENCH_PARTIAL_BENCH_H_

#include <syncd/client.h>

#include <string>
#include <vector>

namespace syncd::bench {

struct PartialBenchOptions {
  int rounds = 40, warmup = 3;
  double skew_ms = 1;
  uint64_t bytes = 64 * 1024;
  std::vector<std::string> modes{"full", "solo", "majority"};
  bool json = false;
};

void RunPartialBench(syncd_client* c, const PartialBenchOptions& o);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_PARTIAL_BENCH_H_
