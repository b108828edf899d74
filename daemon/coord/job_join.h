// The start of a job's coordination on every node: a two-round handshake that makes sure nothing
// an earlier job left on the wire can reach the new job's receives.
//
//  1. Every node sends HELLO(job) to every other, once it has left its previous job (its earlier
//     messages were all sent before). Messages from one peer arrive in order, so once a peer's
//     HELLO is in, everything it sent for an earlier job is in too.
//  2. With every HELLO in, each node posts its READY receives, drops every other message that
//     arrived (Transport::DiscardArrived) and sends READY. No node sends anything of the new job
//     before it has every READY, so nothing the drop could hit belongs to the new job.
//
// GPUs: a node whose GPU path an earlier job aborted says so in its HELLO; node 0, once every
// HELLO is in, makes a fresh NCCL unique id if any node asked and sends it in its READY, so that
// every node rebuilds the job's communicator with it before the first GPU collective (the
// communicator spans every node: all rebuild, or none).
//
// Engine thread only; the task is polled like any collective.
#ifndef SYNCD_DAEMON_COORD_JOB_JOIN_H_
#define SYNCD_DAEMON_COORD_JOB_JOIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/transport/comm_task.h"

namespace syncd {

// The two rounds' tags: kJoinHelloTag, kJoinReadyTag (transport/tag_space.h).

// The GPU part of the handshake. `rebuild`: this node's GPU path was aborted. `make_id` (node 0):
// a fresh NCCL unique id. Out: `nccl_id`, set on every node when some node asked (empty: no
// rebuild), or `error` when node 0 could not make one.
struct GpuRestart {
  bool rebuild = false;
  std::function<StatusOr<std::string>()> make_id;
  std::string nccl_id;
  Status error;
};

// Runs the handshake for `job`. `joined[p]` becomes true once node p's HELLO is in (for stall
// reports: the nodes whose ranks have not started the job yet); `gpu` (may be null: no GPUs) as
// above. Both must outlive the task.
CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined, GpuRestart* gpu = nullptr);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_JOB_JOIN_H_
