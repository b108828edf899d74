// The gRPC control service on <run-dir>/control.sock (see proto/syncd.proto). It reads only the
// engine's published snapshot, never engine state, so a slow client cannot stall the engine;
// timeline commands go to the engine through its one-command slot (Engine::CommandTimeline).
#ifndef SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_
#define SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "daemon/base/affinity.h"
#include "daemon/base/config.h"
#include "daemon/engine/engine.h"
#include "syncd.grpc.pb.h"

namespace syncd {

class ControlService final : public control::Control::Service {
 public:
  // `begin_drain(timeout_s, why)` starts the daemon's graceful drain (see main.cc).
  using BeginDrain = std::function<void(double timeout_s, const std::string& why)>;
  ControlService(const Config& config, const CorePartition& cores, Engine* engine, BeginDrain begin_drain)
      : config_(config), cores_(cores), engine_(engine), begin_drain_(std::move(begin_drain)) {}

  grpc::Status Status(grpc::ServerContext*, const control::StatusRequest*, control::StatusReply* reply) override;
  grpc::Status Drain(grpc::ServerContext*, const control::DrainRequest* request, control::DrainReply* reply) override;
  grpc::Status Timeline(grpc::ServerContext*, const control::TimelineRequest* request, control::TimelineReply*) override;
  // Where the metrics endpoint serves (shown by status); set before the service starts.
  void set_metrics_url(std::string url) { metrics_url_ = std::move(url); }

 private:
  const Config config_;
  const CorePartition cores_;
  Engine* engine_;  // Snapshot, drain results, timeline commands: thread-safe calls only
  const BeginDrain begin_drain_;
  std::string metrics_url_;
};

// The drain timeout a request asks for: its own (clamped to a day), or `default_s` when it asks
// for none (< 0) or for something that is not a number.
double DrainTimeoutS(const control::DrainRequest& request, double default_s);
// When a drain of `timeout_s` started at `now_ns` ends (any timeout_s: negative counts as 0).
uint64_t DrainDeadlineNs(uint64_t now_ns, double timeout_s);

// Starts a gRPC server for `service` on unix:<run-dir>/control.sock.
StatusOr<std::unique_ptr<grpc::Server>> StartControlServer(const std::string& run_dir, ControlService* service);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_CONTROL_SERVICE_H_
