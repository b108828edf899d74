// The node service's job calls of the control service (control_service.h): registering a job
// (AddJob, with its links to its other nodes and its settings handed to the engine), taking the
// registrations back after a restart (RestoreJobs), removing and draining a job.
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "daemon/control/control_service.h"

namespace syncd {

namespace {

grpc::Status ToGrpc(const syncd::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  const grpc::StatusCode code = st.code() == SYNCD_ERR_INVALID   ? grpc::StatusCode::INVALID_ARGUMENT
                                : st.code() == SYNCD_ERR_REFUSED ? grpc::StatusCode::FAILED_PRECONDITION
                                                                 : grpc::StatusCode::UNAVAILABLE;
  return grpc::Status(code, st.message());
}

grpc::Status NotANodeService() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon serves its own user's job only; jobs are registered with a daemon started with "
                      "--node-service on (syncd.service)");
}

// What the engine takes of a registered job: its settings, its user, its links (nullptr: one node).
AdoptJobCommand AdoptionOf(const JobAdmission& a, std::shared_ptr<Transport> links) {
  AdoptJobCommand c;
  c.job = a.job;
  c.transport = std::move(links);
  c.nodes = a.nodes;
  c.node_rank = a.node_rank;
  c.settings = a.settings;
  c.owner = FileOwner{a.uid, a.gid};
  return c;
}

}  // namespace

StatusOr<JobAdmission> AdmissionOf(const control::RegisteredJob& j) {
  if (j.gid() < -1 || j.gid() > int64_t(UINT32_MAX))
    return InvalidArgument(JobName(j.job()) + ": gid " + std::to_string(j.gid()) + " is not a group id");
  JobAdmission a;
  a.job = j.job();
  a.uid = j.uid();
  if (j.gid() >= 0) a.gid = uint32_t(j.gid());
  a.weight = j.weight() == 0 ? 1 : j.weight();
  a.nodes = j.nodes() == 0 ? 1 : j.nodes();
  a.node_rank = j.node_rank();
  a.local_size = j.local_size();
  a.rendezvous = j.rendezvous();
  a.token = j.token();
  a.settings.insert(j.settings().begin(), j.settings().end());
  return a;
}

grpc::Status ControlService::AddJob(grpc::ServerContext*, const control::AddJobRequest* request, control::AddJobReply*) {
  if (jobs_ == nullptr) return NotANodeService();
  StatusOr<JobAdmission> admission = AdmissionOf(request->job());
  if (!admission.ok()) return ToGrpc(admission.status());
  const JobAdmission& a = *admission;
  const syncd::Status st = jobs_->Add(a);
  if (!st.ok()) return ToGrpc(st);
  spdlog::info("{} registered: uid {}{}, weight {}{}, settings {}", JobName(a.job), a.uid,
               a.gid ? " gid " + std::to_string(*a.gid) : std::string(), a.weight,
               a.nodes > 1 ? ", node " + std::to_string(a.node_rank) + " of " + std::to_string(a.nodes) : std::string(),
               SettingsText(a.settings));
  // The engine takes the job's settings, and its links to its other nodes where it has several.
  syncd::Status adopted = a.nodes > 1 ? Link(a) : Adopt(AdoptionOf(a, nullptr));
  if (!adopted.ok()) {
    (void)jobs_->Remove(a.job);
    return ToGrpc(adopted);
  }
  // Kept for a restart of this daemon under the job.
  if (syncd::Status kept = store_.Save(request->job()); !kept.ok())
    spdlog::warn("{}: a restart of this daemon would not take it back: {}", JobName(a.job), kept.message());
  return grpc::Status::OK;
}

syncd::Status ControlService::Link(const JobAdmission& a) {
  // One call links a job (a prolog that runs twice finds it linked, or being linked). Jobs link
  // at once: the nodes' prologs may register two jobs in either order.
  {
    MutexLock lock(&links_mu_);
    if (links_.count(a.job) != 0) return syncd::Status::Ok();
    if (!linking_.insert(a.job).second)
      return syncd::Status(SYNCD_ERR_REFUSED, JobName(a.job) + " is being linked to its other nodes by another call");
  }
  struct Done {
    ControlService* self;
    uint64_t job;
    ~Done() {
      MutexLock lock(&self->links_mu_);
      self->linking_.erase(job);
    }
  } done{this, a.job};
  LinkSpec spec = LinkSpecOf(config_);
  spec.job = a.job;
  spec.nodes = a.nodes;
  spec.node_rank = a.node_rank;
  spec.local_size = a.local_size != 0 ? a.local_size : config_.local_size;
  spec.rendezvous = a.rendezvous;
  spec.token = a.token;
  auto links = std::make_unique<JobLinks>();
  links->no_gpu = "jobs side by side run host collectives only";
  if (syncd::Status st = JoinPeers(spec, links.get()); !st.ok())
    return syncd::Status(st.code(), JobName(a.job) + ": cannot link node " + std::to_string(a.node_rank) + " of its " +
                                        std::to_string(a.nodes) + " nodes: " + st.message());
  SYNCD_RETURN_IF_ERROR(Adopt(AdoptionOf(a, std::shared_ptr<Transport>(std::move(links->transport)))));
  // Node 0 takes back a node whose daemon was restarted under the job; a restarted daemon starts
  // the job where node 0 has it, when it goes on (--on-loss continue, restore).
  if (links->rendezvous) links->rendezvous->set_rejoin(RejoinHook(engine_, a.job));
  if (links->rejoin.job != 0) {
    StatusOr<EngineReply> r = engine_->Ask(ResumeJobCommand{links->rejoin}, 10'000);
    const syncd::Status st = r.ok() ? std::get<syncd::Status>(*r) : r.status();
    if (!st.ok()) return syncd::Status(st.code(), JobName(a.job) + ": cannot start it where its node 0 has it: " + st.message());
    spdlog::info("{}: taken back into it where its node 0 has it (membership {})", JobName(a.job),
                 links->rejoin.resume.membership);
  }
  jobs_->SetLinked(a.job);
  MutexLock lock(&links_mu_);
  links_[a.job] = std::move(links);  // node 0's rendezvous goes on serving (a daemon restarted under it)
  return syncd::Status::Ok();
}

syncd::Status ControlService::Adopt(AdoptJobCommand adopt) {
  StatusOr<EngineReply> r = engine_->Ask(std::move(adopt), 10'000);
  if (!r.ok()) return r.status();
  return std::get<syncd::Status>(*r);
}

ControlService::~ControlService() {
  for (std::thread& t : restoring_) t.join();
}

void ControlService::RestoreJobs() {
  if (jobs_ == nullptr) return;
  std::vector<std::string> unreadable;
  const std::vector<control::RegisteredJob> kept = store_.Load(&unreadable);
  for (const std::string& path : unreadable) spdlog::error("{}: not a registered job; removed", path);
  for (const control::RegisteredJob& j : kept) {
    StatusOr<JobAdmission> admission = AdmissionOf(j);
    syncd::Status st = admission.ok() ? syncd::Status::Ok() : admission.status();
    if (st.ok() && admission->nodes > 1 && admission->node_rank == 0)
      st = syncd::Status(SYNCD_ERR_INVALID, "this node served its rendezvous, which its other nodes no longer reach; "
                                            "register it again on every node");
    if (st.ok()) st = jobs_->Add(*admission);
    if (st.ok() && admission->nodes == 1) st = Adopt(AdoptionOf(*admission, nullptr));
    if (!st.ok()) {
      spdlog::error("{}: not taken back after this daemon's restart: {}", JobName(j.job()), st.message());
      (void)jobs_->Remove(j.job());
      store_.Forget(j.job());
      continue;
    }
    if (admission->nodes == 1) {
      spdlog::info("{}: registered again after this daemon's restart", JobName(j.job()));
      continue;
    }
    // Its first node takes this one back; that may wait for it to see the old daemon lost.
    restoring_.emplace_back([this, a = *admission] {
      if (syncd::Status linked = Link(a); !linked.ok()) {
        spdlog::error("{}: not taken back after this daemon's restart: {}", JobName(a.job), linked.message());
        (void)jobs_->Remove(a.job);
        store_.Forget(a.job);
        return;
      }
      spdlog::info("{}: registered again after this daemon's restart, linked to its {} nodes", JobName(a.job), a.nodes);
    });
  }
}

void ControlService::ForgetLinks(uint64_t job) {
  std::unique_ptr<JobLinks> gone;
  MutexLock lock(&links_mu_);
  const auto it = links_.find(job);
  if (it == links_.end()) return;
  gone = std::move(it->second);
  links_.erase(it);
}

grpc::Status ControlService::RemoveJob(grpc::ServerContext*, const control::RemoveJobRequest* request,
                                       control::RemoveJobReply* reply) {
  if (jobs_ == nullptr) return NotANodeService();
  const uint64_t job = request->job();
  if (syncd::Status st = jobs_->Remove(job); !st.ok()) return ToGrpc(st);
  store_.Forget(job);
  spdlog::info("{} removed from this node's daemon", JobName(job));
  // From here no rank of it attaches; those attached now are told and disconnected.
  StatusOr<EngineReply> r =
      engine_->Ask(RemoveJobCommand{job, JobName(job) + " was removed from this node's daemon (syncctl job remove)"}, 5000);
  ForgetLinks(job);
  if (!r.ok()) return ToGrpc(r.status());
  const syncd::Status& st = std::get<syncd::Status>(*r);
  reply->set_ranks_disconnected(uint32_t(strtoul(st.message().c_str(), nullptr, 10)));
  return grpc::Status::OK;
}

grpc::Status ControlService::DrainJob(grpc::ServerContext* ctx, const control::DrainJobRequest* request,
                                      control::DrainJobReply* reply) {
  if (jobs_ == nullptr) return NotANodeService();
  const uint64_t job = request->job();
  control::DrainRequest timeout;
  timeout.set_timeout_s(request->timeout_s());
  const double timeout_s = DrainTimeoutS(timeout, double(config_.drain_timeout_s));
  if (syncd::Status st = jobs_->Drain(job); !st.ok()) return ToGrpc(st);
  spdlog::info("{} drains from this node's daemon (timeout {} s)", JobName(job), timeout_s);
  // No rank of it attaches from here; it is removed at its first moment with nothing in flight.
  const uint64_t t0 = abi::MonotonicNs(), deadline = DrainDeadlineNs(t0, timeout_s);
  DrainJobCommand c{job, false, JobName(job) + " was drained from this node's daemon (syncctl job drain)"};
  for (;;) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away; the job drains on");
    c.force = abi::MonotonicNs() >= deadline;
    if (c.force) {
      char late[96];
      snprintf(late, sizeof(late), ": it still had work in flight after %g s", timeout_s);
      c.why += late;
    }
    StatusOr<EngineReply> r = engine_->Ask(c, 5000);
    if (!r.ok()) return ToGrpc(r.status());
    const syncd::Status& st = std::get<syncd::Status>(*r);
    if (st.code() != SYNCD_IN_PROGRESS) {
      (void)jobs_->Remove(job);
      store_.Forget(job);
      ForgetLinks(job);
      reply->set_ranks_disconnected(uint32_t(strtoul(st.message().c_str(), nullptr, 10)));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reply->set_deadline_passed(c.force);
  reply->set_seconds(double(abi::MonotonicNs() - t0) / 1e9);
  return grpc::Status::OK;
}

}  // namespace syncd
