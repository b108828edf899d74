#include "bench/scaling_bench.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/daemon_status.h"

namespace syncd::bench {
namespace {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void Barrier(syncd_client* c) {
  syncd_handle h;
  Check(syncd_barrier_async(c, &h), "barrier");
  Check(syncd_wait(c, h, -1), "barrier");
}

struct Counters {
  double messages = 0, bytes = 0, cpu_s = 0, cycles = 0, health_messages = 0, health_bytes = 0;
  double at_s = 0;  // when it was read
};

// This rank's daemon's counters (one rank per daemon reads them: local rank 0), between barriers.
Counters Snapshot(syncd_client* c, const ScalingOptions& o) {
  Barrier(c);
  Counters k;
  if (syncd_local_rank(c) == 0) {
    const std::string json = ReadDaemonStatus(o.syncctl);
    // The coordination counters once per process set: in "process_sets" (the top level's
    // "coordination" repeats the global set's and is not summed).
    const size_t sets = json.find("\"process_sets\":");
    if (sets == std::string::npos) Die("no process sets in the status: " + json.substr(0, 200));
    k.messages = SumField(json, "coordination_messages", sets);
    k.bytes = SumField(json, "coordination_bytes", sets);
    k.cycles = SumField(json, "cycles", sets);
    k.cpu_s = SumField(json, "engine_cpu_s");
    k.health_messages = SumField(json, "health_messages_sent");
    k.health_bytes = SumField(json, "health_bytes_sent");
    k.at_s = Now();
  }
  Barrier(c);
  return k;
}

// K partial allreduces of 8 bytes, one per name, all in flight at once; each round takes every
// rank (quorum: the job's size), so each sums to the job's size.
void PartialStep(syncd_client* c, int names) {
  static std::vector<std::array<float, 2>> data;
  static std::vector<std::string> keys;
  static std::vector<syncd_handle> handles;
  const int n = syncd_size(c);
  if (int(keys.size()) != names) {
    data.assign(size_t(names), {1, 1});
    keys.clear();
    for (int i = 0; i < names; ++i) keys.push_back("scaling.partial." + std::to_string(i));
    handles.assign(size_t(names), 0);
  }
  const int64_t count = 2;
  for (int i = 0; i < names; ++i) {
    data[size_t(i)] = {1, 1};
    syncd_tensor t{keys[size_t(i)].c_str(), data[size_t(i)].data(), SYNCD_FLOAT32, 1, &count, 0};
    Check(syncd_partial_allreduce_async(c, &t, SYNCD_SUM, SYNCD_PARTIAL_SOLO, n, &handles[size_t(i)]), keys[size_t(i)]);
  }
  for (int i = 0; i < names; ++i) {
    syncd_partial_info info;
    Check(syncd_partial_wait(c, handles[size_t(i)], -1, &info), keys[size_t(i)]);
    if (data[size_t(i)][0] != float(n) || info.nap != n)
      Die(keys[size_t(i)] + ": a round of every rank summed to " + std::to_string(data[size_t(i)][0]) + " with " +
          std::to_string(info.nap) + " fresh ranks");
  }
}

double Steps(syncd_client* c, int steps, int partial_names) {
  float v[2] = {1, 1};
  const double t0 = Now();
  for (int i = 0; i < steps; ++i) {
    if (partial_names > 0) PartialStep(c, partial_names);
    else Allreduce(c, "scaling.step", v, 2, SYNCD_FLOAT32, SYNCD_SUM);
  }
  return Now() - t0;
}

}  // namespace

void RunScaling(syncd_client* c, const ScalingOptions& o, uint64_t init_start_ns) {
  const int n = syncd_size(c);
  float first[2] = {1, 1};
  Allreduce(c, "scaling.first", first, 2, SYNCD_FLOAT32, SYNCD_SUM);
  const uint64_t first_done_ns = MonotonicNs();  // one clock for every rank of this machine
  double span[2] = {-double(init_start_ns), double(first_done_ns)};
  Allreduce(c, "scaling.start", span, 2, SYNCD_FLOAT64, SYNCD_MAX);
  const double start_ms = (span[0] + span[1]) / 1e6;
  if (first[0] != float(n)) Die("the first allreduce summed to " + std::to_string(first[0]));

  // The step's graph, as a framework binding registers it: under topo the step runs on the plan
  // (no negotiation); the other modes check and agree the plan but negotiate.
  const syncd_graph_op op{"step",    "scaling.step",    SYNCD_FLOAT32,
                          2,         SYNCD_SUM,         SYNCD_MEMORY_HOST,
                          SYNCD_COMPRESSION_DEFAULT, 0};
  const uint32_t fetch = 0;
  const syncd_graph g{&op, 1, nullptr, 0, &fetch, 1};
  Check(syncd_register_graph(c, &g, -1, nullptr), "registering the step's graph");
  Steps(c, o.steps, o.partial_names);  // warm: the name is cached (or planned) from here on
  // Per step: a window of 2s steps less a window of s steps, each between two status reads, so
  // what the reads cost (the cycles that run meanwhile) cancels. On a loaded machine one read may
  // take far longer than another and leave its idle cycles in the difference, so three such pairs
  // are taken and each figure is their median.
  constexpr int kPairs = 3;
  double pairs[4][kPairs], t2s[kPairs];
  for (int k = 0; k < kPairs; ++k) {
    const Counters a = Snapshot(c, o);
    (void)Steps(c, o.steps, o.partial_names);
    const Counters b = Snapshot(c, o), cc = Snapshot(c, o);
    t2s[k] = Steps(c, 2 * o.steps, o.partial_names);
    const Counters d = Snapshot(c, o);
    const double s = o.steps;
    pairs[0][k] = ((d.messages - cc.messages) - (b.messages - a.messages)) / s;
    pairs[1][k] = ((d.bytes - cc.bytes) - (b.bytes - a.bytes)) / s;
    pairs[2][k] = ((d.cpu_s - cc.cpu_s) - (b.cpu_s - a.cpu_s)) / s * 1e6;
    pairs[3][k] = ((d.cycles - cc.cycles) - (b.cycles - a.cycles)) / s;
  }
  auto median = [](double* v) {
    std::sort(v, v + kPairs);
    return v[kPairs / 2];
  };
  // An idle window: what the daemons send while the ranks compute (health reports).
  const Counters e = Snapshot(c, o);
  usleep(useconds_t(o.idle_s * 1e6));
  const Counters f = Snapshot(c, o);
  const double s = o.steps, idle = f.at_s - e.at_s;
  const double t2 = median(t2s);
  // Per daemon and step (health: per second idle); the sum over daemons (for the mean) and the busiest daemon.
  double per[6] = {median(pairs[0]), median(pairs[1]), median(pairs[2]), median(pairs[3]),
                   idle > 0 ? (f.health_messages - e.health_messages) / idle : 0,
                   idle > 0 ? (f.health_bytes - e.health_bytes) / idle : 0};
  const bool reads = syncd_local_rank(c) == 0;
  double sums[6], maxes[6];
  for (int i = 0; i < 6; ++i) sums[i] = reads ? per[i] : 0;
  Allreduce(c, "scaling.sum", sums, 6, SYNCD_FLOAT64, SYNCD_SUM);
  for (int i = 0; i < 6; ++i) maxes[i] = reads ? per[i] : -1e300;
  Allreduce(c, "scaling.max", maxes, 6, SYNCD_FLOAT64, SYNCD_MAX);
  double step_us = t2 / (2 * s) * 1e6;  // the loop alone: no snapshot in it
  Allreduce(c, "scaling.time", &step_us, 1, SYNCD_FLOAT64, SYNCD_AVERAGE);
  const int daemons = syncd_cross_size(c);
  if (syncd_rank(c) != 0) return;
  const double msgs = sums[0] / daemons, bytes = sums[1] / daemons, cpu = sums[2] / daemons, cycles = sums[3] / daemons;
  if (o.json) {
    printf("{\"op\":\"scaling\",\"label\":\"%s\",\"daemons\":%d,\"ranks\":%d,\"start_ms\":%.1f,\"step_us\":%.1f,"
           "\"msgs_per_daemon_step\":%.2f,\"msgs_max_daemon_step\":%.2f,\"bytes_per_daemon_step\":%.0f,"
           "\"bytes_max_daemon_step\":%.0f,\"engine_cpu_us_per_daemon_step\":%.1f,\"cycles_per_step\":%.2f,"
           "\"health_msgs_per_daemon_s\":%.1f,\"health_msgs_max_daemon_s\":%.1f,\"health_bytes_per_daemon_s\":%.0f,"
           "\"health_bytes_max_daemon_s\":%.0f,\"steps\":%d}\n",
           o.label.c_str(), daemons, n, start_ms, step_us, msgs, maxes[0], bytes, maxes[1], cpu, cycles,
           sums[4] / daemons, maxes[4], sums[5] / daemons, maxes[5], o.steps);
  } else {
    printf("# %-10s %7s %9s %10s %10s %10s %12s %10s %8s\n", "mode", "daemons", "start ms", "step us", "msgs/step",
           "max msgs", "bytes/step", "cpu us", "cycles");
    printf("  %-10s %7d %9.1f %10.1f %10.2f %10.2f %12.0f %10.1f %8.2f\n", o.label.c_str(), daemons, start_ms,
           step_us, msgs, maxes[0], bytes, cpu, cycles);
  }
}

}  // namespace syncd::bench
