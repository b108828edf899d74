// The local launcher behind syncrun: N daemons (one per simulated node, each with its own run
// directory, rendezvous port and cores, talking over loopback, or with --netns over links of
// their own) and K worker processes with the SYNCD_* environment, the first failure propagated,
// and nothing left behind (processes, run directory, namespaces) on exit, failure or Ctrl-C. On a
// cluster, srun or jsrun takes this role.
#ifndef SYNCD_DAEMON_LAUNCH_LAUNCHER_H_
#define SYNCD_DAEMON_LAUNCH_LAUNCHER_H_

#include <string>
#include <vector>

#include "daemon/base/affinity.h"

namespace syncd {

// Several simulated nodes on one machine: node i gets its own group of the allowed cores (a
// real node has its own), its engine on the group's last core and its ranks on the rest (on the
// engine's core too when the group has one core). More nodes than cores: node i gets core i mod C.
struct SimulatedNodeCores {
  CoreSet daemon;
  CoreSet workers;
};
std::vector<SimulatedNodeCores> PlanSimulatedNodes(const CoreSet& allowed, int nodes);

struct LaunchOptions {
  int nodes = 1;                         // daemons to start, standing in for nodes
  int ranks = 1;                         // spread evenly over the nodes, node-major
  std::string run_dir;                   // empty: a fresh directory under $TMPDIR, removed at exit
  std::string syncd_path;                // the daemon binary
  std::vector<std::string> daemon_args;  // extra flags for syncd
  bool bind_workers = true;              // pin workers to the cores the daemon leaves free
  // "continue" or "restore": every daemon gets --on-loss with it, and a rank that dies does not
  // stop the job (the others train on); "" or "fail": the first rank to fail stops every other.
  std::string on_loss;
  int min_np = 1;  // "continue", "restore": the job stops once fewer ranks than this are left running
  // "continue", "restore": a rank that dies while its node's daemon lives is started again (up to
  // three times), as the same rank; it joins the others at their next commit (hvd.elastic).
  bool respawn = false;
  // "continue", "restore": how many times the job may change its ranks (each rank lost and each
  // replacement started counts one: every rank's hvd.elastic.run resets for it) before syncrun
  // stops it, as horovodrun --reset-limit does; -1: no limit.
  int reset_limit = -1;
  // "continue", "restore": a node's daemon that dies while the job runs is started again with the
  // same arguments (up to three times per node; not node 0's, whose daemon serves the rendezvous),
  // as systemd's Restart= would; the node's ranks get SYNCD_REATTACH_S, so hvd.elastic.run attaches
  // them to it again, and the job takes the node back.
  bool restart_daemons = false;
  // "continue", "restore" (horovodrun's --max-np and --host-discovery-script): the job has this many
  // slots (0: -n), -n of them held at launch (launch/discovery.h); every `discovery_interval_s`
  // syncrun runs `discovery_script` and starts a rank in a free slot of each node it offers more
  // slots on than run there; the new rank joins the others at their next commit.
  int max_np = 0;
  std::string discovery_script;
  double discovery_interval_s = 1.0;
  // Each node in a network namespace of its own, behind a link (launch/netns.h), limited to
  // `link_gbit` Gbit/s each way (0: as fast as the kernel moves it).
  bool netns = false;
  double link_gbit = 0;
  // With netns: no daemons and no ranks; `command` runs once, in the caller's namespace, while
  // the network stands, with SYNCRUN_NETNS (the nodes' namespaces, in node order) and
  // SYNCRUN_NODE_ADDRS (their addresses) in its environment: for peers that launch their own
  // ranks (mpirun, a gloo script) into the nodes (`ip netns exec`).
  bool network_only = false;
  int ready_timeout_s = 30;
  std::vector<std::string> command;      // what each rank runs
};

// Returns the process exit code for syncrun: the first non-zero worker exit (128+signal for a
// signal), 1 when the daemon failed, 130/143 when syncrun itself was interrupted, else 0. With
// on_loss "continue" or "restore", ranks that died count only when no rank finished well.
int RunJob(const LaunchOptions& opts);

}  // namespace syncd

#endif  // SYNCD_DAEMON_LAUNCH_LAUNCHER_H_
