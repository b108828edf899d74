#include "bench/memcpy_bench.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "bench/bench_util.h"

namespace syncd::bench {
namespace {

// Copies `bytes` back and forth between two buffers of its own until `stop`; returns the copies.
uint64_t CopyUntil(uint64_t bytes, const std::atomic<bool>& go, const std::atomic<bool>& stop) {
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  memset(a.get(), 1, bytes);  // touch every page before timing
  memset(b.get(), 2, bytes);
  while (!go.load(std::memory_order_acquire)) {}
  uint64_t copies = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    memcpy((copies & 1) ? a.get() : b.get(), (copies & 1) ? b.get() : a.get(), bytes);
    ++copies;
  }
  return copies;
}

}  // namespace

void RunMemcpyBench(const MemcpyBenchOptions& o) {
  cpu_set_t set;
  int threads = o.threads;
  if (threads <= 0) threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  if (!o.json) printf("# memcpy bandwidth: %d threads, each copying its own buffers\n# %12s %12s\n", threads, "size(B)", "GB/s");
  for (uint64_t bytes : o.sizes) {
    std::atomic<bool> go{false}, stop{false};
    std::vector<uint64_t> copies(size_t(threads), 0);
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] { copies[size_t(i)] = CopyUntil(bytes, go, stop); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + bytes / (64 << 20) * 50));  // first touch
    const double t0 = Now();
    go.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds_per_size));
    stop.store(true);
    for (auto& t : pool) t.join();
    const double seconds = Now() - t0;
    uint64_t total = 0;
    for (uint64_t c : copies) total += c;
    const double gbps = double(total) * double(bytes) / seconds / 1e9;
    if (o.json)
      printf("{\"op\":\"memcpy\",\"bytes\":%llu,\"threads\":%d,\"GBps\":%.4f}\n", (unsigned long long)bytes, threads, gbps);
    else
      printf("  %12llu %12.3f\n", (unsigned long long)bytes, gbps);
  }
}

}  // namespace syncd::bench
