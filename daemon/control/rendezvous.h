// Rendezvous of one job's daemons (see proto/syncd.proto, service Rendezvous).
//
// RendezvousService runs on node 0 inside its gRPC server; each Join blocks (in a gRPC thread,
// never the engine) until all nodes have joined or the deadline passes. JoinJob() is what every
// daemon, node 0 included, calls at startup before its engine starts.
#ifndef SYNCD_DAEMON_CONTROL_RENDEZVOUS_H_
#define SYNCD_DAEMON_CONTROL_RENDEZVOUS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <string>
#include <vector>

#include "proto/mutex.h"
#include "daemon/base/status.h"
#include "syncd.grpc.pb.h"

namespace syncd {

class RendezvousService final : public control::Rendezvous::Service {
 public:
  // Of job `job` (0: the daemon's own), whose daemons prove `job_token`.
  RendezvousService(std::string job_token, uint64_t job, uint32_t nodes, uint32_t local_size,
                    std::chrono::milliseconds timeout);

  grpc::Status Join(grpc::ServerContext* ctx, const control::JoinRequest* req, control::JoinReply* reply) override;

  // A daemon joining again after the rendezvous ended (its node's old daemon was lost, and it was
  // restarted): `rejoin` is asked (node, its request) whether it may, and fills the reply's rejoin_
  // fields; the reply then carries the table with the node's new address. Without it (or when it
  // refuses), the join is refused as a node rank joined twice is.
  using RejoinFn = std::function<grpc::Status(const control::JoinRequest& req, control::JoinReply* reply)>;
  void set_rejoin(RejoinFn rejoin) {
    MutexLock lock(&mu_);
    rejoin_ = std::move(rejoin);
  }

 private:
  const std::string token_;
  const uint64_t job_;
  const uint32_t nodes_;
  const uint32_t local_size_;
  const std::chrono::steady_clock::time_point deadline_;
  Mutex mu_;
  std::condition_variable_any all_joined_;
  std::vector<bool> joined_ SYNCD_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ SYNCD_GUARDED_BY(mu_);
  std::vector<std::string> hostnames_ SYNCD_GUARDED_BY(mu_);
  std::vector<int32_t> pids_ SYNCD_GUARDED_BY(mu_);
  std::vector<uint32_t> gpus_ SYNCD_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> gpu_uuids_ SYNCD_GUARDED_BY(mu_);
  std::string nccl_id_ SYNCD_GUARDED_BY(mu_);
  uint32_t count_ SYNCD_GUARDED_BY(mu_) = 0;
  RejoinFn rejoin_ SYNCD_GUARDED_BY(mu_);

  void Record(const control::JoinRequest& req) SYNCD_REQUIRES(mu_);
  void FillTable(control::JoinReply* reply) SYNCD_REQUIRES(mu_);
};

// What a joining daemon sends instead of its job's token: HMAC-SHA256 keyed by the token over
// everything else it asks (the job, its place, its address, when; JoinRequest.token_proof
// cleared). Node 0 computes it again with its own token: the token never crosses the wire, and
// a proof seen on it is good for that daemon's join of that job only.
std::string JoinProof(const std::string& token, const control::JoinRequest& req);
// `req` with its job's proof in it, made now (issued_unix_ms).
void SignJoinRequest(const std::string& token, control::JoinRequest* req);
// How far from node 0's clock a join may have been made.
inline constexpr uint64_t kJoinProofWindowMs = 5 * 60 * 1000;

// Whether `req` may join job `job` of `nodes` nodes with `local_size` ranks each: the same daemon
// protocol, the same job, a proof of this token made within kJoinProofWindowMs of `now_unix_ms`.
// `who` names the caller in the error.
grpc::Status CheckJoinRequest(const control::JoinRequest& req, const std::string& token, uint64_t job, uint32_t nodes,
                              uint32_t local_size, const std::string& who, uint64_t now_unix_ms);

struct JobTable {
  std::vector<std::string> ucx_addresses;  // by node rank
  std::vector<std::string> hostnames;
  std::vector<int32_t> pids;
  std::vector<uint32_t> gpus;  // by node rank
  std::vector<std::vector<std::string>> gpu_uuids;  // by node rank
  std::string nccl_id;         // node 0's
  // JoinReply's rejoin_ fields (rejoin_job 0: a first rendezvous).
  uint64_t rejoin_job = 0;
  uint32_t rejoin_membership = 0, rejoin_slot = 0, rejoin_local_size = 0;
  std::vector<uint32_t> rejoin_lost_nodes;
  bool rejoined = false;  // node 0 took this node back (JoinReply.rejoined)
};

// NCCL takes each GPU once per communicator, so a job whose daemons share a GPU (several
// simulated nodes on one GPU machine, or overlapping CUDA_VISIBLE_DEVICES) cannot run GPU
// collectives. Returns why, naming the GPU and the nodes (and hosts), or "" when every GPU is
// driven by one daemon only. Every node computes the same answer from the same table.
std::string SharedGpus(const JobTable& table);

// Joins the job at `rendezvous` (HOST:PORT), retrying while node 0 is not up yet, until `timeout`.
StatusOr<JobTable> JoinJob(const std::string& rendezvous, const control::JoinRequest& request,
                           std::chrono::milliseconds timeout);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_RENDEZVOUS_H_
