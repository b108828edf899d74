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
// Engine thread only; the task is polled like any collective.
#ifndef SYNCD_DAEMON_COORD_JOB_JOIN_H_
#define SYNCD_DAEMON_COORD_JOB_JOIN_H_

#include <cstdint>
#include <vector>

#include "daemon/transport/comm_task.h"

namespace syncd {

// The two rounds' tags: kJoinHelloTag, kJoinReadyTag (transport/tag_space.h).

// Runs the handshake for `job`. `joined[p]` becomes true once node p's HELLO is in (for stall
// reports: the nodes whose ranks have not started the job yet); it must outlive the task.
CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_JOB_JOIN_H_
