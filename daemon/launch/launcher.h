// The local launcher behind syncrun: one daemon in a fresh run directory, K worker processes with
// the SYNCD_* environment, the first failure propagated, and nothing left behind (processes, run
// directory) on exit, failure or Ctrl-C. On a cluster, srun or jsrun takes this role.
#ifndef SYNCD_DAEMON_LAUNCH_LAUNCHER_H_
#define SYNCD_DAEMON_LAUNCH_LAUNCHER_H_

#include <string>
#include <vector>

namespace syncd {

struct LaunchOptions {
  int ranks = 1;
  std::string run_dir;                   // empty: a fresh directory under $TMPDIR, removed at exit
  std::string syncd_path;                // the daemon binary
  std::vector<std::string> daemon_args;  // extra flags for syncd
  bool bind_workers = true;              // pin workers to the cores the daemon leaves free
  int ready_timeout_s = 30;
  std::vector<std::string> command;      // what each rank runs
};

// Returns the process exit code for syncrun: the first non-zero worker exit (128+signal for a
// signal), 1 when the daemon failed, 130/143 when syncrun itself was interrupted, else 0.
int RunJob(const LaunchOptions& opts);

}  // namespace syncd

#endif  // SYNCD_DAEMON_LAUNCH_LAUNCHER_H_
