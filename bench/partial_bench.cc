#include "bench/partial_bench.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace syncd::bench {
namespace {

struct ModeResult {
  double mean_us = 0, max_us = 0, mean_nap = 0, fresh_pct = 0;
};

void Barrier(syncd_client* c) {
  syncd_handle h;
  Check(syncd_barrier_async(c, &h), "barrier");
  Check(syncd_wait(c, h, -1), "barrier");
}

// Sums `v` over every rank (in place).
void SumOverRanks(syncd_client* c, const std::string& name, std::vector<double>& v) {
  int64_t n = int64_t(v.size());
  syncd_tensor t{name.c_str(), v.data(), SYNCD_FLOAT64, 1, &n, 0};
  syncd_handle h;
  Check(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h), "allreduce of " + name);
  Check(syncd_wait(c, h, -1), "allreduce of " + name);
}

ModeResult RunMode(syncd_client* c, const PartialBenchOptions& o, const std::string& mode, float* data) {
  const int rank = syncd_rank(c), size = syncd_size(c);
  const std::string name = "bench.partial." + mode;
  int64_t n = int64_t(o.bytes / sizeof(float));
  syncd_tensor t{name.c_str(), data, SYNCD_FLOAT32, 1, &n, 0};
  const int partial = mode == "solo" ? SYNCD_PARTIAL_SOLO : mode == "majority" ? SYNCD_PARTIAL_MAJORITY : 0;
  // Sums over this rank's timed calls: latency, its own rounds' NAP (as their initiator), fresh.
  double lat = 0, max_lat = 0, nap = 0, rounds = 0, fresh = 0;
  for (int r = 0; r < o.warmup + o.rounds; ++r) {
    for (int64_t i = 0; i < n; ++i) data[i] = 1;
    Barrier(c);
    usleep(useconds_t(o.skew_ms * 1000 * rank));
    syncd_handle h;
    syncd_partial_info info{};
    const double t0 = Now();
    if (partial == 0) {
      Check(syncd_allreduce_async(c, &t, SYNCD_AVERAGE, 1.0, 1.0, &h), name);
      Check(syncd_wait(c, h, -1), name);
      info = syncd_partial_info{uint64_t(r + 1), size, 0, 1};
    } else {
      Check(syncd_partial_allreduce_async(c, &t, SYNCD_AVERAGE, partial, 0, &h), name);
      Check(syncd_partial_wait(c, h, -1, &info), name);
    }
    const double dt = Now() - t0;
    if (r < o.warmup) continue;
    lat += dt;
    max_lat = std::max(max_lat, dt);
    fresh += info.fresh;
    if (partial == 0 ? rank == 0 : info.fresh && info.initiator == rank) {
      nap += info.nap;
      ++rounds;
    }
  }
  std::vector<double> sums{lat, nap, rounds, fresh, double(o.rounds)};
  SumOverRanks(c, name + ".sums", sums);
  std::vector<double> maxes(size_t(size), 0);
  maxes[size_t(rank)] = max_lat;
  SumOverRanks(c, name + ".max", maxes);
  ModeResult m;
  m.mean_us = 1e6 * sums[0] / sums[4];
  m.mean_nap = sums[2] > 0 ? sums[1] / sums[2] : 0;
  m.fresh_pct = 100.0 * sums[3] / sums[4];
  for (double x : maxes) m.max_us = std::max(m.max_us, 1e6 * x);
  return m;
}

}  // namespace

void RunPartialBench(syncd_client* c, const PartialBenchOptions& o) {
  auto* data = static_cast<float*>(syncd_alloc(c, o.bytes));
  if (data == nullptr) Die("arena block of " + std::to_string(o.bytes) + " bytes");
  std::vector<ModeResult> results;
  for (const std::string& mode : o.modes) {
    if (mode != "full" && mode != "solo" && mode != "majority") {
      fprintf(stderr, "syncd-bench partial: unknown mode '%s' (full, solo, majority)\n", mode.c_str());
      exit(2);
    }
    results.push_back(RunMode(c, o, mode, data));
  }
  syncd_free(c, data);
  if (syncd_rank(c) != 0) return;
  const int size = syncd_size(c), nodes = syncd_cross_size(c);
  printf("# partial: %d ranks on %d nodes, rank r waits r x %.1f ms before each call, %llu bytes, %d rounds\n", size,
         nodes, o.skew_ms, (unsigned long long)o.bytes, o.rounds);
  printf("# %-10s %12s %12s %9s %8s\n", "mode", "mean us", "max us", "mean NAP", "fresh %");
  for (size_t i = 0; i < o.modes.size(); ++i)
    printf("  %-10s %12.1f %12.1f %9.2f %8.1f\n", o.modes[i].c_str(), results[i].mean_us, results[i].max_us,
           results[i].mean_nap, results[i].fresh_pct);
  if (!o.json) return;
  std::string j = "{\"bench\":\"partial\",\"ranks\":" + std::to_string(size) + ",\"nodes\":" + std::to_string(nodes) +
                  ",\"skew_ms\":" + std::to_string(o.skew_ms) + ",\"bytes\":" + std::to_string(o.bytes) +
                  ",\"rounds\":" + std::to_string(o.rounds) + ",\"modes\":{";
  for (size_t i = 0; i < o.modes.size(); ++i) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s\"%s\":{\"mean_us\":%.1f,\"max_us\":%.1f,\"mean_nap\":%.2f,\"fresh_pct\":%.1f}",
             i ? "," : "", o.modes[i].c_str(), results[i].mean_us, results[i].max_us, results[i].mean_nap,
             results[i].fresh_pct);
    j += buf;
  }
  printf("%s}}\n", j.c_str());
}

}  // namespace syncd::bench
