#include "bench/engine_cost_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/daemon_status.h"

namespace syncd::bench {
namespace {

// The daemon's counters this benchmark divides, in the order of kFields.
// engine_busy_s is not a status field: the busy share times the uptime (Read).
constexpr std::array<const char*, 7> kFields = {"engine_cpu_s",    "engine_wakeups", "engine_work_turns",
                                                "engine_messages", "client_wakes",   "collectives_completed",
                                                "engine_busy_s"};
constexpr size_t kCpu = 0, kCollectives = 5, kBusy = 6;
using Counters = std::array<double, kFields.size()>;

double ProcessCpuS() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// This rank's daemon's counters (local rank 0 reads them; the others give zeros).
Counters Read(syncd_client* c, const EngineCostOptions& o) {
  Counters k{};
  if (syncd_local_rank(c) != 0) return k;
  const std::string json = ReadDaemonStatus(o.syncctl);
  for (size_t i = 0; i < kBusy; ++i) k[i] = SumField(json, kFields[i]);
  k[kBusy] = SumField(json, "engine_busy_pct") / 100 * SumField(json, "uptime_s");
  return k;
}

}  // namespace

void RunEngineCost(syncd_client* c, const EngineCostOptions& o, const RunCollective& run) {
  const int n = syncd_size(c), daemons = syncd_cross_size(c), node = syncd_cross_rank(c);
  if (syncd_rank(c) == 0 && !o.json)
    printf("# %-13s %10s %7s %5s %10s %11s %11s %9s %9s %9s %9s %12s\n", "kind", "size(B)", "daemons", "ranks", "time(us)",
           "engine us", "max eng us", "wake-ups", "turns", "messages", "cl.wakes", "ranks cpu us");
  for (const std::string& op : o.ops)
  for (uint64_t bytes : o.sizes) {
    // nccl-tests' sizes (as `syncd-bench <kind>`): the gathers' output, the others' input.
    const bool gathers = op == "allgather" || op == "gather";
    const int64_t unit = op == "allreduce" || op == "reduce" || op == "broadcast" ? 1 : n;
    int64_t count = std::max<int64_t>(unit, int64_t(bytes / sizeof(float)) / unit * unit);
    if (gathers) count = std::max<int64_t>(1, count / n);
    float* buf = static_cast<float*>(syncd_alloc(c, size_t(count) * sizeof(float)));
    if (buf == nullptr) Die("allocating " + std::to_string(bytes) + " bytes in the arena");
    std::fill(buf, buf + count, 1.0f);
    const std::string name = "cost." + op;
    for (int i = 0; i < o.warmup; ++i) run(op, name.c_str(), buf, count);
    float check[1] = {1};
    Allreduce(c, "cost.before", check, 1, SYNCD_FLOAT32, SYNCD_SUM);  // every rank is here
    const Counters a = Read(c, o);
    const double cpu0 = ProcessCpuS(), t0 = Now();
    for (int i = 0; i < o.iters; ++i) run(op, name.c_str(), buf, count);
    const double wall = Now() - t0, cpu = ProcessCpuS() - cpu0;
    const Counters b = Read(c, o);
    // One value per daemon (its slot: its node), summed into every rank; the ranks' CPU summed.
    std::vector<double> per(kFields.size() * size_t(daemons) + 2, 0.0);
    if (syncd_local_rank(c) == 0)
      for (size_t i = 0; i < kFields.size(); ++i) per[size_t(node) * kFields.size() + i] = b[i] - a[i];
    per[per.size() - 2] = cpu;
    per[per.size() - 1] = wall;
    Allreduce(c, "cost.sum", per.data(), int64_t(per.size()), SYNCD_FLOAT64, SYNCD_SUM);
    syncd_free(c, buf);
    if (syncd_rank(c) != 0) continue;
    const double ranks_cpu_us = per[per.size() - 2] / o.iters * 1e6, time_us = per[per.size() - 1] / n / o.iters * 1e6;
    // Per daemon: each counter over the collectives it completed in the window (the loop and the
    // collective around the first read).
    std::vector<Counters> each(static_cast<size_t>(daemons));
    Counters mean{}, max{};
    for (int d = 0; d < daemons; ++d) {
      const double* k = &per[size_t(d) * kFields.size()];
      const double done = std::max(1.0, k[kCollectives]);
      for (size_t i = 0; i < kFields.size(); ++i) {
        each[size_t(d)][i] = i == kCollectives ? k[i] : k[i] / done * (i == kCpu || i == kBusy ? 1e6 : 1.0);
        mean[i] += each[size_t(d)][i] / daemons;
        max[i] = std::max(max[i], each[size_t(d)][i]);
      }
    }
    if (o.json) {
      std::string rows;
      for (int d = 0; d < daemons; ++d) {
        const Counters& k = each[size_t(d)];
        char row[320];
        snprintf(row, sizeof(row),
                 "%s{\"node\":%d,\"engine_cpu_us\":%.2f,\"wakeups\":%.3f,\"work_turns\":%.3f,\"messages\":%.3f,"
                 "\"client_wakes\":%.3f,\"collectives\":%.0f,\"engine_busy_us\":%.2f}",
                 d ? "," : "", d, k[0], k[1], k[2], k[3], k[4], k[5], k[6]);
        rows += row;
      }
      printf("{\"op\":\"engine_cost\",\"kind\":\"%s\",\"label\":\"%s\",\"bytes\":%llu,\"daemons\":%d,\"ranks\":%d,\"iters\":%d,"
             "\"time_us\":%.3f,\"engine_cpu_us\":%.2f,\"engine_cpu_us_max\":%.2f,\"wakeups\":%.3f,\"wakeups_max\":%.3f,"
             "\"work_turns\":%.3f,\"messages\":%.3f,\"client_wakes\":%.3f,\"engine_busy_us\":%.2f,\"ranks_cpu_us\":%.2f,"
             "\"nodes\":[%s]}\n",
             op.c_str(), o.label.c_str(), (unsigned long long)bytes, daemons, n, o.iters, time_us, mean[0], max[0], mean[1], max[1],
             mean[2], mean[3], mean[4], mean[kBusy], ranks_cpu_us, rows.c_str());
    } else {
      printf("  %-13s %10llu %7d %5d %10.2f %11.2f %11.2f %9.3f %9.3f %9.3f %9.3f %12.2f\n", op.c_str(),
             (unsigned long long)bytes, daemons, n, time_us, mean[0], max[0], mean[1], mean[2], mean[3], mean[4], ranks_cpu_us);
    }
    fflush(stdout);
  }
  if (syncd_rank(c) == 0 && !o.json)
    printf("# per daemon and collective it completed (mean over daemons; max: the costliest daemon); ranks cpu: every "
           "rank's CPU summed, per collective\n");
}

}  // namespace syncd::bench
