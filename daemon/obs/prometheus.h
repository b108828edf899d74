// A status snapshot in Prometheus' text exposition format (version 0.0.4): what `--metrics-port`
// serves at /metrics. Every series carries the node-level labels `job_id` and `node`; per-rank
// series add `rank`. (`job` itself is left to the scraper: Prometheus sets it from its scrape
// configuration and would rename ours to `exported_job`.)
#ifndef SYNCD_DAEMON_OBS_PROMETHEUS_H_
#define SYNCD_DAEMON_OBS_PROMETHEUS_H_

#include <string>

#include "daemon/obs/status_snapshot.h"

namespace syncd {

std::string RenderPrometheus(const StatusSnapshot& s);

// A label value with backslash, double quote and newline escaped, as the format requires.
std::string EscapeLabelValue(const std::string& v);

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_PROMETHEUS_H_
