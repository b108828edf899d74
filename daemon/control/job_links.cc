// A job's links to the other nodes' daemons (job_links.h).
#include "daemon/control/job_links.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "daemon/base/version.h"
#include "daemon/engine/engine.h"

namespace syncd {
namespace {

// Node 0 serves the rendezvous. gRPC binds with SO_REUSEPORT by default: two jobs given the same
// port would both listen and split each other's joins, so it fails instead.
Status ServeRendezvous(const LinkSpec& spec, JobLinks* links) {
  links->rendezvous = std::make_unique<RendezvousService>(spec.token, spec.job, spec.nodes, spec.local_size,
                                                          std::chrono::seconds(spec.join_timeout_s));
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(spec.rendezvous, grpc::InsecureServerCredentials());
  builder.RegisterService(links->rendezvous.get());
  links->rendezvous_server = builder.BuildAndStart();
  if (!links->rendezvous_server) return Status(SYNCD_ERR_SYSTEM, "cannot serve the rendezvous on " + spec.rendezvous);
  return Status::Ok();
}

control::JoinRequest JoinRequestOf(const LinkSpec& spec, const JobLinks& links, const std::string& host) {
  control::JoinRequest join;
  join.set_job(spec.job);
  join.set_node_rank(spec.node_rank);
  join.set_nodes(spec.nodes);
  join.set_local_size(spec.local_size);
  join.set_ucx_address(links.transport->address());
  join.set_hostname(host);
  join.set_pid(getpid());
  join.set_gpus(links.gpu ? links.gpu->devices() : 0);
  if (links.gpu)
    for (const std::string& u : links.gpu->uuids()) join.add_gpu_uuids(u);
  join.set_nccl_id(links.nccl_id);
  join.set_wire_version(kWireVersion);
  join.set_daemon_version(kVersionString);
  SignJoinRequest(spec.token, &join);  // the token itself stays here
  return join;
}

}  // namespace

LinkSpec LinkSpecOf(const Config& config) {
  LinkSpec spec;
  spec.nodes = config.nodes;
  spec.node_rank = config.node_rank;
  spec.local_size = config.local_size;
  spec.rendezvous = config.rendezvous;
  spec.token = config.job_token;
  spec.join_timeout_s = config.join_timeout_s;
  spec.ucx.detect_peer_failure = config.ucx_peer_errors != PeerErrors::kOff;
  spec.ucx.peer_errors_everywhere = config.ucx_peer_errors == PeerErrors::kOn;
  spec.ucx.same_host_shared_memory = config.on_loss == OnLoss::kFail;  // see UcxOptions
  return spec;
}

RendezvousService::RejoinFn RejoinHook(Engine* engine, uint64_t job) {
  return [engine, job](const control::JoinRequest& req, control::JoinReply* reply) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const RejoinCommand command{job, req.node_rank(), req.ucx_address(), req.pid(), req.hostname(),
                                req.hostname() == host ? req.pid() : 0};
    const uint64_t deadline_ns = abi::MonotonicNs() + 10'000'000'000ull;
    for (;;) {
      StatusOr<EngineReply> r = engine->Ask(command, 5000);
      if (!r.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, r.status().message());
      const RejoinAnswer& a = std::get<RejoinAnswer>(*r);
      if (a.status.code() == SYNCD_IN_PROGRESS && abi::MonotonicNs() < deadline_ns) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (!a.status.ok()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, a.status.message());
      reply->set_rejoin_job(a.job);
      reply->set_rejoin_membership(a.resume.membership);
      reply->set_rejoin_slot(a.resume.slot);
      reply->set_rejoin_local_size(a.local_size);
      for (uint32_t n : a.resume.lost_nodes) reply->add_rejoin_lost_nodes(n);
      reply->set_rejoined(true);
      return grpc::Status::OK;
    }
  };
}

JobLinks::~JobLinks() {
  if (rendezvous_server) rendezvous_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

Status JoinPeers(const LinkSpec& spec, JobLinks* links) {
  SYNCD_ASSIGN_OR_RETURN(links->transport, UcxTransport::Create(spec.node_rank, spec.nodes, spec.ucx));
  if (spec.node_rank == 0) SYNCD_RETURN_IF_ERROR(ServeRendezvous(spec, links));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  spdlog::info("joining {} nodes at {}", spec.nodes, spec.rendezvous);
  SYNCD_ASSIGN_OR_RETURN(JobTable table, JoinJob(spec.rendezvous, JoinRequestOf(spec, *links, host),
                                                 std::chrono::seconds(spec.join_timeout_s)));
  std::vector<int32_t> same_host_pids(spec.nodes, 0);
  for (uint32_t n = 0; n < spec.nodes; ++n)
    if (n != spec.node_rank && n < table.hostnames.size() && table.hostnames[n] == host && n < table.pids.size())
      same_host_pids[n] = table.pids[n];
  // A restarted daemon's predecessor may have left a peer's shared-memory FIFO unusable.
  if (table.rejoined)
    for (uint32_t n = 0; n < spec.nodes; ++n) links->transport->AvoidSharedMemoryWith(n);
  SYNCD_RETURN_IF_ERROR(links->transport->Connect(table.ucx_addresses, same_host_pids));
  links->gpus_per_node = table.gpus;
  links->nccl_id = table.nccl_id;
  if (table.rejoin_job != 0) {
    links->rejoin.job = table.rejoin_job;
    links->rejoin.local_size = table.rejoin_local_size;
    links->rejoin.resume = JobResume{table.rejoin_membership, table.rejoin_slot, table.rejoin_lost_nodes};
    // The job's NCCL communicator was made at its start, without this process.
    links->no_gpu = "this daemon was restarted under a running job, whose GPU communicator it is not part of";
    links->gpu.reset();
  }
  if (std::string shared = SharedGpus(table); links->gpu && !shared.empty()) {
    links->no_gpu = shared;
    links->gpu.reset();
  }
  std::string how;
  for (uint32_t n = 0; n < spec.nodes; ++n)
    if (n != spec.node_rank) how += " node " + std::to_string(n) + ": " + links->transport->failure_detection(n) + ";";
  spdlog::info("connected to {} peer daemons (failure detection:{})", spec.nodes - 1, how);
  return Status::Ok();
}

}  // namespace syncd
