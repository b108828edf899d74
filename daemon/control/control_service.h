// The gRPC control service on <run-dir>/control.sock (see proto/syncd.proto): whoever can open
// the socket may use every call (the file's mode and group are the access control; a node
// service's is root's and --admin-group's). It reads only the
// engine's published snapshot, never engine state, so a slow client cannot stall the engine;
// timeline commands go to the engine through its one-command slot (Engine::CommandTimeline).
#ifndef SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_
#define SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/base/affinity.h"
#include "daemon/base/config.h"
#include "daemon/control/job_links.h"
#include "daemon/control/job_registry.h"
#include "daemon/control/job_store.h"
#include "daemon/engine/engine.h"
#include "syncd.grpc.pb.h"

namespace syncd {

class ControlService final : public control::Control::Service {
 public:
  // `begin_drain(timeout_s, why)` starts the daemon's graceful drain (see main.cc).
  using BeginDrain = std::function<void(double timeout_s, const std::string& why)>;
  // `jobs`: a node service's registered jobs (null: --node-service off; AddJob and RemoveJob refuse).
  ControlService(const Config& config, const CorePartition& cores, Engine* engine, BeginDrain begin_drain,
                 JobRegistry* jobs = nullptr)
      : config_(config),
        cores_(cores),
        engine_(engine),
        begin_drain_(std::move(begin_drain)),
        jobs_(jobs),
        store_(jobs != nullptr ? config.run_dir : "") {}
  ~ControlService() override;

  // A node service restarted under its jobs (JobStore): each registered again as it was; one of
  // several nodes linked to its other nodes again, in the background, its first node taking this
  // one back into the job where it goes on (RejoinHook). A job whose rendezvous this node served
  // cannot be: it is dropped, saying so. Call once the engine runs.
  void RestoreJobs();

  grpc::Status Status(grpc::ServerContext*, const control::StatusRequest*, control::StatusReply* reply) override;
  grpc::Status Drain(grpc::ServerContext*, const control::DrainRequest* request, control::DrainReply* reply) override;
  grpc::Status Timeline(grpc::ServerContext*, const control::TimelineRequest* request, control::TimelineReply*) override;
  grpc::Status AddJob(grpc::ServerContext*, const control::AddJobRequest* request, control::AddJobReply*) override;
  grpc::Status RemoveJob(grpc::ServerContext*, const control::RemoveJobRequest* request,
                         control::RemoveJobReply* reply) override;
  grpc::Status DrainJob(grpc::ServerContext* ctx, const control::DrainJobRequest* request,
                        control::DrainJobReply* reply) override;
  // Where the metrics endpoint serves (shown by status); set before the service starts.
  void set_metrics_url(std::string url) { metrics_url_ = std::move(url); }

 private:
  // A registered job of several nodes: its links to the other nodes' daemons (job_links.h),
  // made now (every node's AddJob waits in the rendezvous until all have joined) and handed to
  // the engine; what it refused, naming the job and the node.
  syncd::Status Link(const JobAdmission& a);
  // A registered job's settings (and links) handed to the engine.
  syncd::Status Adopt(AdoptJobCommand adopt);
  void ForgetLinks(uint64_t job);

  const Config config_;
  const CorePartition cores_;
  Engine* engine_;  // Snapshot, drain results, timeline commands: thread-safe calls only
  const BeginDrain begin_drain_;
  JobRegistry* jobs_;
  std::string metrics_url_;
  Mutex links_mu_;
  std::map<uint64_t, std::unique_ptr<JobLinks>> links_ SYNCD_GUARDED_BY(links_mu_);  // by job
  std::set<uint64_t> linking_ SYNCD_GUARDED_BY(links_mu_);  // jobs a call links now
  const JobStore store_;             // a node service's registrations, for its restart
  std::vector<std::thread> restoring_;  // RestoreJobs's links, joined at the end
};

// The drain timeout a request asks for: its own (clamped to a day), or `default_s` when it asks
// for none (< 0) or for something that is not a number.
double DrainTimeoutS(const control::DrainRequest& request, double default_s);
// The registration an AddJob request asks for (gid -1: any group; weight 0: 1); a gid that is no
// group id is refused.
StatusOr<JobAdmission> AdmissionOf(const control::RegisteredJob& job);
// When a drain of `timeout_s` started at `now_ns` ends (any timeout_s: negative counts as 0).
uint64_t DrainDeadlineNs(uint64_t now_ns, double timeout_s);

// Starts a gRPC server for `service` on unix:<run-dir>/control.sock: mode 0600 (the daemon's
// user), or 0660 with group `admin_group` when one is named (a node service's administrators).
StatusOr<std::unique_ptr<grpc::Server>> StartControlServer(const std::string& run_dir, ControlService* service,
                                                           const std::string& admin_group = "");

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_
