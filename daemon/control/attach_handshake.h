// The attach handshake's rules: what a connecting client may claim about itself, checked before
// it changes anything in the daemon. Pure: no I/O and no state of its own; the attach server
// passes what it knows (configuration, the local size in force, whether it is draining, a node
// service's registered jobs and the client's credentials).
#ifndef SYNCD_DAEMON_CONTROL_ATTACH_HANDSHAKE_H_
#define SYNCD_DAEMON_CONTROL_ATTACH_HANDSHAKE_H_

#include <cstdint>
#include <string>

#include "daemon/base/status.h"
#include "daemon/control/job_registry.h"
#include "proto/shm_abi.h"

namespace syncd {

// The most ranks one daemon serves. Per-name bookkeeping is sized by the local size, so a
// claim far beyond any real node must not reach it.
inline constexpr uint32_t kMaxLocalSize = 1024;

struct AttachRules {
  uint32_t node_rank = 0;
  uint32_t nodes = 1;
  // The node's local size: from --local-size, or fixed by the clients attached now; 0 when no
  // client is attached and the configuration leaves it open (the first client then fixes it).
  uint32_t local_size = 0;
  bool accepting = true;  // false while the daemon drains
  std::string run_dir;    // for messages
  // A node service's registered jobs (null: the attach server admitted the daemon's own uid
  // already), and the connecting process's uid and gid as SO_PEERCRED reports them.
  const JobRegistry* jobs = nullptr;
  uint32_t uid = 0, gid = 0;
};

// Checks `req` from process `pid`. An error carries the status and the message the client is
// refused with; OK means the identity fits this node of the job.
Status CheckAttachRequest(const abi::AttachRequest& req, int32_t pid, const AttachRules& rules);

// "rank 3 (pid 1234)", as every message about an attaching client names it.
std::string AttachingRank(const abi::AttachRequest& req, int32_t pid);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_ATTACH_HANDSHAKE_H_
