// A job the engine serves, with what is its own beside the job itself (engine/job.h): its ranks on
// this node, its local and world size, the membership its ranks were last shown, and the
// residuals its compressed sums left out. A daemon of one job holds one tenant at a time (the
// next job's first rank ends it); a node service on one node holds one per registered job that
// has attached, side by side, and nothing of one is reachable from another.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_TENANT_H_
#define SYNCD_DAEMON_ENGINE_TENANT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "daemon/base/config.h"
#include "daemon/core/residual_store.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_timeline.h"
#include "daemon/transport/transport.h"

namespace syncd {

// Jobs side by side: a one-node host allreduce larger than this runs this much at a time, and
// lets the engine serve another job that has work waiting between two slices (EngineShare). 32
// KiB of two ranks reduce in about 10 us here: what another job's small collective waits behind
// the slice in progress (256 KiB slices: 99 us against 6.6 us alone, bench/tenants.sh). While no
// other job waits the slices run back to back, at the cost of one look at the others' rings each.
inline constexpr uint64_t kSliceBytes = uint64_t{32} << 10;

// A node service's job of several nodes: its links to the other nodes' daemons (control/
// job_links.h), taken over when it was registered on every node and kept from run to run of the
// job until it is removed.
struct OwnLinks {
  std::shared_ptr<Transport> transport;
  uint32_t nodes = 1, node_rank = 0;
};

struct Tenant {
  // `job_config`: the daemon's, with the job's own nodes where it has links of its own.
  Tenant(Config job_config, uint32_t local)
      : config(std::move(job_config)),
        local_size(local),
        world_size(local * config.nodes),
        residuals(config.compression_residual_bytes) {}

  const Config config;  // what its job reads (Job holds a reference: declared before it)
  std::unique_ptr<Job> job;
  std::map<uint32_t, uint32_t> client_by_local_rank;  // its ranks attached here: local rank -> client id
  uint32_t local_size, world_size;
  uint32_t published_membership = 0;  // Job::membership as its ranks' segments show it
  uint16_t slot = 0;  // its tensors' slot in the completion log (obs/completion_log.h)
  // A node service's job of several nodes that ended with a node lost (--on-loss fail) whose
  // daemon came back: its next run here starts afresh, once this run's ranks have left.
  bool fresh_next_run = false;
  // Top-k, 1-bit, PowerSGD: dropped when the job ends and when its membership changes.
  ResidualStore residuals;
  // What the job had of the engine (syncctl status's jobs, the metrics' syncd_job_* series).
  struct Usage {
    uint64_t requests = 0, bytes = 0, errors = 0;  // its ranks' requests completed, their input bytes
    uint64_t engine_ns = 0;  // engine time spent on its rings and its sets
    // Engine time spent on other jobs while this one had work in flight: the wait the others
    // caused it (jobs side by side only).
    uint64_t waited_ns = 0;
    // Its transport's bytes sent when it started here (its link bytes are those sent since).
    uint64_t link_bytes_base = 0;
  };
  Usage usage;
  uint64_t pass_ns = 0;  // engine time on it in the current pass (jobs side by side)
  // Its share against the other jobs: slices while others are served, its weight's worth per poll.
  EngineShare share;
  // Its timeline (node 0 of the job writes it): started and stopped by its ranks, syncctl timeline
  // --job, or the daemon's --timeline for a daemon's first job; over its own links.
  std::unique_ptr<JobTimeline> timeline;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_TENANT_H_
