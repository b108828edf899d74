// The jobs a node's daemon serves (--node-service): an administrator registers each one (syncctl
// job add, run by the Slurm prolog or by hand) with the user it runs as, and removes it when it
// ends (syncctl job remove, the epilog). A client attaches only to a registered job whose uid, and
// gid where one was given, its SO_PEERCRED shows: the registry is what lets one daemon take
// clients of several users without letting any of them name another's job.
//
// Threads: any (one mutex): the control service adds and removes, the attach thread admits.
#ifndef SYNCD_DAEMON_CONTROL_JOB_REGISTRY_H_
#define SYNCD_DAEMON_CONTROL_JOB_REGISTRY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/config.h"
#include "daemon/base/status.h"
#include "proto/mutex.h"

namespace syncd {

struct JobAdmission {
  uint64_t job = 0;             // the id its ranks carry (SYNCD_JOB_ID, Slurm's job id)
  uint32_t uid = 0;             // the user its ranks run as
  std::optional<uint32_t> gid;  // and their group, where the registration names one
  uint32_t weight = 1;          // its share of the daemon's cores and links against other jobs
  int64_t added_unix_s = 0;     // when it was registered (set by Add)
  bool draining = false;        // syncctl job drain: it takes no new ranks
  // Its nodes (syncctl job add --nodes --node-rank --rendezvous, the Slurm prolog): a job of
  // several nodes has links of its own to the other nodes' daemons (control/job_links.h).
  uint32_t nodes = 1, node_rank = 0;
  uint32_t local_size = 0;  // its ranks on this node (0: as its first rank says)
  std::string rendezvous;   // host:port of the rendezvous its first node serves
  std::string token;        // proves the job to the other nodes' daemons (never in a status)
  // Its own settings over the daemon's (syncctl job add --on-loss, --coord, ...; base/config.h's
  // kJobSettings): name -> value.
  std::map<std::string, std::string> settings;
  // A job of several nodes: its links to the others are made (until then its ranks wait).
  bool linked = false;
};

// "job 1234": decimal, as squeue and SYNCD_JOB_ID show it.
std::string JobName(uint64_t job);
// "--coord topo --on-loss continue", or "the daemon's" when there are none.
std::string SettingsText(const std::map<std::string, std::string>& settings);

class JobRegistry {
 public:
  // Registers `job`. Registering it again with the same user, nodes and settings updates its
  // weight (a prolog that runs twice); with another user, other nodes or other settings, or as job
  // 0, it is refused, as are nodes that do not add up (a node rank past the nodes; several nodes
  // without a rendezvous or a token) and settings that are not a job's or not valid.
  Status Add(JobAdmission job) SYNCD_EXCLUDES(mu_);
  // SYNCD_ERR_INVALID naming the job when it is not registered.
  Status Remove(uint64_t job) SYNCD_EXCLUDES(mu_);
  // From now on no new rank of `job` is admitted (syncctl job drain); SYNCD_ERR_INVALID naming
  // the job when it is not registered.
  Status Drain(uint64_t job) SYNCD_EXCLUDES(mu_);
  // Its links to its other nodes are made: its ranks may attach (a job of several nodes).
  void SetLinked(uint64_t job) SYNCD_EXCLUDES(mu_);
  // Whether a process running as uid/gid may attach to `job`: OK, or SYNCD_ERR_REFUSED with the
  // reason as the end of a sentence about the process ("runs as uid 1001, but job 7 is registered
  // for uid 1000"): no job named, not registered, another user's, another group's, draining, not
  // linked to its other nodes yet.
  Status Admit(uint64_t job, uint32_t uid, uint32_t gid) const SYNCD_EXCLUDES(mu_);
  std::optional<JobAdmission> Find(uint64_t job) const SYNCD_EXCLUDES(mu_);
  std::vector<JobAdmission> List() const SYNCD_EXCLUDES(mu_);  // by id

 private:
  mutable Mutex mu_;
  std::map<uint64_t, JobAdmission> jobs_ SYNCD_GUARDED_BY(mu_);
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_JOB_REGISTRY_H_
