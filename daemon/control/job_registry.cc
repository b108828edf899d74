// The node daemon's registered jobs (job_registry.h).
#include "daemon/control/job_registry.h"

#include <ctime>

namespace syncd {

std::string JobName(uint64_t job) {
  return "job " + std::to_string(job);
}

std::string SettingsText(const std::map<std::string, std::string>& settings) {
  std::string out;
  for (const auto& [name, value] : settings) out += (out.empty() ? "--" : " --") + name + " " + value;
  return out.empty() ? "the daemon's" : out;
}

Status JobRegistry::Add(JobAdmission job) {
  if (job.job == 0) return InvalidArgument("job 0 cannot be registered: give the id its ranks carry (SYNCD_JOB_ID or Slurm's job id)");
  if (job.weight == 0) return InvalidArgument(JobName(job.job) + ": weight 0 would never let it run; give 1 or more");
  if (job.nodes == 0) job.nodes = 1;
  if (job.node_rank >= job.nodes)
    return InvalidArgument(JobName(job.job) + ": node rank " + std::to_string(job.node_rank) + " is not one of its " +
                           std::to_string(job.nodes) + " nodes (0 to " + std::to_string(job.nodes - 1) + ")");
  if (job.nodes > 1 && job.rendezvous.empty())
    return InvalidArgument(JobName(job.job) + " runs on " + std::to_string(job.nodes) +
                           " nodes: give the rendezvous its first node serves (--rendezvous host:port)");
  if (job.nodes > 1 && job.token.empty())
    return InvalidArgument(JobName(job.job) + " runs on " + std::to_string(job.nodes) +
                           " nodes: give its token (SYNCD_JOB_TOKEN or --token-file), the same on every node");
  if (StatusOr<Config> c = JobConfig(Config{}, job.settings); !c.ok())
    return InvalidArgument(JobName(job.job) + ": " + c.status().message());
  MutexLock lock(&mu_);
  auto [it, added] = jobs_.try_emplace(job.job, job);
  if (!added) {
    JobAdmission& had = it->second;
    if (had.uid != job.uid || had.gid != job.gid)
      return Status(SYNCD_ERR_REFUSED, JobName(job.job) + " is registered already, for uid " + std::to_string(had.uid) +
                                           (had.gid ? " gid " + std::to_string(*had.gid) : std::string()) +
                                           "; remove it first to register it for another user");
    if (had.nodes != job.nodes || had.node_rank != job.node_rank || had.rendezvous != job.rendezvous ||
        had.local_size != job.local_size || had.token != job.token)
      return Status(SYNCD_ERR_REFUSED, JobName(job.job) + " is registered already as node " +
                                           std::to_string(had.node_rank) + " of " + std::to_string(had.nodes) +
                                           (had.rendezvous.empty() ? std::string() : " at " + had.rendezvous) +
                                           "; remove it first to register it with other nodes");
    if (had.settings != job.settings)
      return Status(SYNCD_ERR_REFUSED, JobName(job.job) + " is registered already with other settings (" +
                                           SettingsText(had.settings) + "); remove it first to change them");
    had.weight = job.weight;
    return Status::Ok();
  }
  it->second.added_unix_s = int64_t(time(nullptr));
  return Status::Ok();
}

Status JobRegistry::Remove(uint64_t job) {
  MutexLock lock(&mu_);
  if (jobs_.erase(job) == 0) return InvalidArgument(JobName(job) + " is not registered with this daemon");
  return Status::Ok();
}

Status JobRegistry::Drain(uint64_t job) {
  MutexLock lock(&mu_);
  const auto it = jobs_.find(job);
  if (it == jobs_.end()) return InvalidArgument(JobName(job) + " is not registered with this daemon");
  it->second.draining = true;
  return Status::Ok();
}

Status JobRegistry::Admit(uint64_t job, uint32_t uid, uint32_t gid) const {
  if (job == 0)
    return Status(SYNCD_ERR_REFUSED, "names no job, and this node's daemon serves registered jobs only: its ranks "
                                     "must carry the job's id (SYNCD_JOB_ID, or run under Slurm)");
  MutexLock lock(&mu_);
  const auto it = jobs_.find(job);
  if (it == jobs_.end())
    return Status(SYNCD_ERR_REFUSED, "belongs to " + JobName(job) + ", which is not registered with this node's daemon "
                                     "(the Slurm prolog or `syncctl job add` registers a job)");
  const JobAdmission& j = it->second;
  if (j.uid != uid)
    return Status(SYNCD_ERR_REFUSED, "runs as uid " + std::to_string(uid) + ", but " + JobName(job) +
                                     " is registered for uid " + std::to_string(j.uid));
  if (j.gid && *j.gid != gid)
    return Status(SYNCD_ERR_REFUSED, "runs as gid " + std::to_string(gid) + ", but " + JobName(job) +
                                     " is registered for gid " + std::to_string(*j.gid));
  // Its own user learns that it drains; nobody else learns anything of it.
  if (j.draining)
    return Status(SYNCD_ERR_REFUSED, "belongs to " + JobName(job) + ", which is draining from this node's daemon "
                                     "(syncctl job drain): it takes no new ranks");
  if (j.nodes > 1 && !j.linked)
    return Status(SYNCD_ERR_REFUSED, "belongs to " + JobName(job) + ", which this node's daemon is still linking to "
                                     "its other nodes: attach again once it is");
  return Status::Ok();
}

void JobRegistry::SetLinked(uint64_t job) {
  MutexLock lock(&mu_);
  if (const auto it = jobs_.find(job); it != jobs_.end()) it->second.linked = true;
}

std::optional<JobAdmission> JobRegistry::Find(uint64_t job) const {
  MutexLock lock(&mu_);
  const auto it = jobs_.find(job);
  if (it == jobs_.end()) return std::nullopt;
  return it->second;
}

std::vector<JobAdmission> JobRegistry::List() const {
  MutexLock lock(&mu_);
  std::vector<JobAdmission> out;
  out.reserve(jobs_.size());
  for (const auto& [id, j] : jobs_) out.push_back(j);
  return out;
}

}  // namespace syncd
