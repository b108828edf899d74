// Simulated nodes behind real links, for syncrun --netns: each node in a network namespace of its
// own, joined by a veth pair to a bridge in a "switch" namespace, each link optionally limited to
// a rate with tc's token bucket (tbf, both directions: the node's uplink and the switch's port
// towards it). Nothing is created in the caller's namespace, so no traffic leaves the machine.
// The namespaces are made and removed with iproute2's `ip` and `tc`.
//
// Daemons and ranks run in their node's namespace (Inside: `ip netns exec`). The namespaces
// share one kernel and one boot id, so UCX would see one host and move data through shared
// memory; syncrun gives the daemons UCX_TLS=tcp and UCX_NET_DEVICES=kDevice so it uses the link.
//
// Removal: the destructor; and, should syncrun be killed (SIGKILL included), a reaper process it
// forks first (its own session, deaf to Ctrl-C) removes them when syncrun's end of a pipe closes.
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
#ifndef SYNCD_DAEMON_LAUNCH_NETNS_H_
#define SYNCD_DAEMON_LAUNCH_NETNS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/base/status.h"

namespace syncd {

class EmulatedNetwork {
 public:
  static constexpr const char* kDevice = "link0";  // each node's end of its link

  // `nodes` namespaces named `prefix`-n<i> plus `prefix`-sw; `link_gbit` 0: no rate limit.
  static StatusOr<std::unique_ptr<EmulatedNetwork>> Create(const std::string& prefix, int nodes, double link_gbit);
  ~EmulatedNetwork();
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // Node `node`'s address on the links (10.77.0.<node + 1>).
  std::string Address(int node) const;
  // `argv` run inside node `node`'s namespace: through `ip netns exec`, which also mounts a /sys
  // of that namespace (UCX finds its network devices there) and then execs it in place (same pid).
  std::vector<std::string> Inside(int node, const std::vector<std::string>& argv) const;
  const std::vector<std::string>& namespaces() const { return names_; }

 private:
  EmulatedNetwork() = default;
  Status Build(int nodes, double link_gbit);
  void Remove();

  std::vector<std::string> names_;  // the nodes' namespaces, then the switch's
  pid_t reaper_ = -1;
  int reaper_pipe_ = -1;  // syncrun's end: the reaper removes everything when it closes
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_LAUNCH_NETNS_H_
