// The one-node limit of bench/compare.sh: the machine's memory-copy bandwidth, per size, with a
// thread per core (each copying its own pair of buffers), no daemon needed.
#ifndef SYNCD_BENCH_MEMCPY_BENCH_H_
#define SYNCD_BENCH_MEMCPY_BENCH_H_

#include <cstdint>
#include <vector>

namespace syncd::bench {

struct MemcpyBenchOptions {
  std::vector<uint64_t> sizes;  // bytes each thread copies per call
  int threads = 0;              // 0: one per core this process may run on
  double seconds_per_size = 0.3;
  bool json = false;
};

void RunMemcpyBench(const MemcpyBenchOptions& o);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_MEMCPY_BENCH_H_
