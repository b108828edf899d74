// What the engine counts for the metrics endpoint: per process set and kind, the collectives it
// completed, their bytes, a latency histogram and the errors by code; fusion group sizes. Plain
// data folded off the engine thread from its completion events (obs/completion_log.h; fusion
// sizes the engine counts itself) and copied into each status snapshot; rendering happens
// elsewhere (obs/prometheus.h).
#ifndef SYNCD_DAEMON_OBS_METRICS_H_
#define SYNCD_DAEMON_OBS_METRICS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace syncd {

// Cumulative-style histogram with fixed upper bounds (Prometheus' `le`), plus +Inf.
template <size_t N>
struct Histogram {
  std::array<uint64_t, N + 1> counts{};  // counts[i]: observations in (bound[i-1], bound[i]]; [N]: above all
  double sum = 0;
  uint64_t count = 0;

  void Observe(const std::array<double, N>& bounds, double v) {
    size_t i = 0;
    while (i < N && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

// Collective latency, first local submission to completion, in seconds: 10 µs to 100 s.
inline constexpr std::array<double, 16> kLatencyBounds = {1e-5, 2.5e-5, 5e-5, 1e-4,   2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                                          5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,    1.0,  10.0, 100.0};
using LatencyHistogram = Histogram<kLatencyBounds.size()>;

// Tensors per executed group of a kind that fuses (1: ran alone).
inline constexpr std::array<double, 10> kFusionBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024};
using FusionHistogram = Histogram<kFusionBounds.size()>;

struct CollectiveMetrics {
  uint64_t ops = 0;    // tensors completed (once per tensor, however many local ranks took part)
  uint64_t bytes = 0;  // the local ranks' input bytes
  LatencyHistogram latency;
  std::map<std::string, uint64_t> errors;  // by status code name ("UNAVAILABLE", ...)
};

// Per (process set, abi::OpKind value) as folded; per (process set, kind name) in a
// snapshot. Ordered for stable output.
using CollectiveMetricsByKind = std::map<std::pair<int32_t, uint32_t>, CollectiveMetrics>;
using CollectiveMetricsMap = std::map<std::pair<int32_t, std::string>, CollectiveMetrics>;

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_METRICS_H_
