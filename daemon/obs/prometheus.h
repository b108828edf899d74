// A status snapshot as Prometheus metrics: what `--metrics-port` serves at /metrics. The families
// are prometheus-cpp's data model (its TextSerializer writes the text exposition, its Exposer
// serves them: control/metrics_server.h). Every series carries the node-level labels `job_id`
// and `node`; per-rank series add `rank`. A node service serving jobs side by side labels the
// node's series with `node` alone, and each job's (its ranks', its syncd_job_* series) with its
// `job_id`: a removed job's series go with it. (`job` itself is left to the scraper: Prometheus
// sets it from its scrape configuration and would rename ours to `exported_job`.)
#ifndef SYNCD_DAEMON_OBS_PROMETHEUS_H_
#define SYNCD_DAEMON_OBS_PROMETHEUS_H_

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "daemon/obs/status_snapshot.h"

namespace syncd {

std::vector<prometheus::MetricFamily> MetricFamilies(const StatusSnapshot& s);
// The text exposition (format 0.0.4) of MetricFamilies(s).
std::string RenderPrometheus(const StatusSnapshot& s);

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_PROMETHEUS_H_
