#include "daemon/control/rendezvous.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <spdlog/spdlog.h>

#include <map>

#include "daemon/base/version.h"

namespace syncd {
namespace {

std::string MissingNodes(const std::vector<bool>& joined) {
  std::string out;
  for (size_t i = 0; i < joined.size(); ++i)
    if (!joined[i]) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

}  // namespace

RendezvousService::RendezvousService(std::string job_token, uint64_t job, uint32_t nodes, uint32_t local_size,
                                     std::chrono::milliseconds timeout)
    : token_(std::move(job_token)),
      job_(job),
      nodes_(nodes),
      local_size_(local_size),
      deadline_(std::chrono::steady_clock::now() + timeout),
      joined_(nodes, false),
      addresses_(nodes),
      hostnames_(nodes),
      pids_(nodes, 0),
      gpus_(nodes, 0),
      gpu_uuids_(nodes) {}

grpc::Status RendezvousService::Join(grpc::ServerContext* ctx, const control::JoinRequest* req,
                                     control::JoinReply* reply) {
  const std::string who = "node " + std::to_string(req->node_rank()) + " (" + req->hostname() + ", pid " +
                          std::to_string(req->pid()) + ", from " + ctx->peer() + ")";
  const uint64_t now_ms = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  if (grpc::Status st = CheckJoinRequest(*req, token_, job_, nodes_, local_size_, who, now_ms); !st.ok()) {
    spdlog::warn("rendezvous: refused {}", st.error_message());
    return st;
  }
  MutexLock lock(&mu_);
  if (joined_[req->node_rank()] && count_ == nodes_ && rejoin_) {
    // A daemon restarted under the job: node 0's engine takes the node back, or says why not.
    if (grpc::Status st = rejoin_(*req, reply); !st.ok()) {
      spdlog::warn("rendezvous: refused {} joining again: {}", who, st.error_message());
      return st;
    }
    Record(*req);
    spdlog::info("rendezvous: {} joined again (its node's daemon was restarted)", who);
    FillTable(reply);
    return grpc::Status::OK;
  }
  if (joined_[req->node_rank()]) {
    spdlog::warn("rendezvous: refused {}: node rank already joined by {}", who, hostnames_[req->node_rank()]);
    return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                        who + ": node rank " + std::to_string(req->node_rank()) + " already joined from " +
                            hostnames_[req->node_rank()]);
  }
  joined_[req->node_rank()] = true;
  Record(*req);
  if (req->node_rank() == 0) nccl_id_ = req->nccl_id();
  if (++count_ == nodes_) all_joined_.notify_all();
  spdlog::info("rendezvous: {} joined ({} of {})", who, count_, nodes_);
  while (count_ != nodes_ && !ctx->IsCancelled())
    if (all_joined_.wait_until(mu_, deadline_) == std::cv_status::timeout) break;
  if (count_ != nodes_)
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "rendezvous incomplete: nodes " + MissingNodes(joined_) + " of " + std::to_string(nodes_) +
                            " did not join in time");
  FillTable(reply);
  return grpc::Status::OK;
}

void RendezvousService::Record(const control::JoinRequest& req) {
  const uint32_t n = req.node_rank();
  addresses_[n] = req.ucx_address();
  hostnames_[n] = req.hostname();
  pids_[n] = req.pid();
  gpus_[n] = req.gpus();
  gpu_uuids_[n].assign(req.gpu_uuids().begin(), req.gpu_uuids().end());
}

void RendezvousService::FillTable(control::JoinReply* reply) {
  for (uint32_t i = 0; i < nodes_; ++i) {
    reply->add_ucx_addresses(addresses_[i]);
    reply->add_hostnames(hostnames_[i]);
    reply->add_pids(pids_[i]);
    reply->add_gpus(gpus_[i]);
    control::NodeGpus* gpus = reply->add_gpu_uuids();
    for (const std::string& u : gpu_uuids_[i]) gpus->add_uuids(u);
  }
  reply->set_nccl_id(nccl_id_);
}

std::string JoinProof(const std::string& token, const control::JoinRequest& req) {
  // What is signed: the request without its proof, serialized deterministically (both ends run
  // the same protocol, checked before the proof).
  control::JoinRequest signed_part = req;
  signed_part.clear_token_proof();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    signed_part.SerializeToCodedStream(&coded);
  }
  bytes.insert(0, "syncd join\n");
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), token.data(), int(token.size()), reinterpret_cast<const unsigned char*>(bytes.data()),
           bytes.size(), mac, &len) == nullptr)
    return "";
  return std::string(reinterpret_cast<const char*>(mac), len);
}

void SignJoinRequest(const std::string& token, control::JoinRequest* req) {
  req->set_issued_unix_ms(uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count()));
  req->set_token_proof(JoinProof(token, *req));
}

grpc::Status CheckJoinRequest(const control::JoinRequest& req, const std::string& token, uint64_t job, uint32_t nodes,
                              uint32_t local_size, const std::string& who, uint64_t now_unix_ms) {
  if (req.wire_version() != kWireVersion) {
    const std::string theirs = req.wire_version() == 0 ? "1 or older" : std::to_string(req.wire_version());
    const std::string version = req.daemon_version().empty() ? "an older syncd" : "syncd " + req.daemon_version();
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        who + " runs " + version + " (daemon protocol " + theirs + "); node 0 runs syncd " +
                            kVersionString + " (daemon protocol " + std::to_string(kWireVersion) +
                            "): every daemon of a job must speak the same protocol (upgrade them together)");
  }
  if (req.job() != job)
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        who + " joins job " + std::to_string(req.job()) + ", but this rendezvous is job " +
                            std::to_string(job) + "'s");
  const std::string proof = JoinProof(token, req);
  if (proof.empty() || req.token_proof().size() != proof.size() ||
      CRYPTO_memcmp(req.token_proof().data(), proof.data(), proof.size()) != 0)
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, who + ": wrong job token (its proof does not match)");
  const uint64_t issued = req.issued_unix_ms();
  const uint64_t apart = issued > now_unix_ms ? issued - now_unix_ms : now_unix_ms - issued;
  if (apart > kJoinProofWindowMs)
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        who + ": its join was made " + std::to_string(apart / 1000) + " s " +
                            (issued > now_unix_ms ? "ahead of" : "behind") +
                            " node 0's clock (at most 300 s apart: a replayed join, or clocks out of step)");
  if (req.nodes() != nodes || req.node_rank() >= nodes)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, who + " says the job has " + std::to_string(req.nodes()) +
                                                                " nodes; node 0 says " + std::to_string(nodes));
  if (req.local_size() != local_size)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        who + " runs " + std::to_string(req.local_size()) + " local ranks; node 0 runs " +
                            std::to_string(local_size) + " (every node must run the same number)");
  return grpc::Status::OK;
}

StatusOr<JobTable> JoinJob(const std::string& rendezvous, const control::JoinRequest& request,
                           std::chrono::milliseconds timeout) {
  auto channel = grpc::CreateChannel(rendezvous, grpc::InsecureChannelCredentials());
  auto stub = control::Rendezvous::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(2));
  ctx.set_wait_for_ready(true);  // node 0 may not be listening yet
  control::JoinReply reply;
  grpc::Status st = stub->Join(&ctx, request, &reply);
  if (!st.ok()) {
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && st.error_message().find("rendezvous") == std::string::npos)
      return Status(SYNCD_ERR_REFUSED, "node " + std::to_string(request.node_rank()) + ": no rendezvous at " +
                                           rendezvous + " within " + std::to_string(timeout.count() / 1000) + " s");
    return Status(SYNCD_ERR_REFUSED, "node " + std::to_string(request.node_rank()) + ": rendezvous at " + rendezvous +
                                         " failed: " + st.error_message());
  }
  if (uint32_t(reply.ucx_addresses_size()) != request.nodes())
    return ProtocolError("rendezvous returned " + std::to_string(reply.ucx_addresses_size()) + " addresses for " +
                         std::to_string(request.nodes()) + " nodes");
  JobTable table;
  table.ucx_addresses.assign(reply.ucx_addresses().begin(), reply.ucx_addresses().end());
  table.hostnames.assign(reply.hostnames().begin(), reply.hostnames().end());
  table.pids.assign(reply.pids().begin(), reply.pids().end());
  table.gpus.assign(reply.gpus().begin(), reply.gpus().end());
  for (const control::NodeGpus& g : reply.gpu_uuids()) table.gpu_uuids.emplace_back(g.uuids().begin(), g.uuids().end());
  table.nccl_id = reply.nccl_id();
  table.rejoin_job = reply.rejoin_job();
  table.rejoin_membership = reply.rejoin_membership();
  table.rejoin_slot = reply.rejoin_slot();
  table.rejoin_local_size = reply.rejoin_local_size();
  table.rejoin_lost_nodes.assign(reply.rejoin_lost_nodes().begin(), reply.rejoin_lost_nodes().end());
  table.rejoined = reply.rejoined();
  return table;
}

std::string SharedGpus(const JobTable& table) {
  std::map<std::string, std::vector<uint32_t>> nodes_of;  // GPU -> the nodes whose daemon drives it
  std::vector<std::string> order;
  for (uint32_t n = 0; n < table.gpu_uuids.size(); ++n)
    for (const std::string& u : table.gpu_uuids[n]) {
      std::vector<uint32_t>& nodes = nodes_of[u];
      if (nodes.empty()) order.push_back(u);
      if (nodes.empty() || nodes.back() != n) nodes.push_back(n);
    }
  for (const std::string& u : order) {
    const std::vector<uint32_t>& nodes = nodes_of[u];
    if (nodes.size() < 2) continue;
    std::string who;
    for (size_t i = 0; i < nodes.size(); ++i) {
      who += (i == 0 ? "" : i + 1 == nodes.size() ? " and " : ", ") + std::string("node ") + std::to_string(nodes[i]);
      if (nodes[i] < table.hostnames.size()) who += " (" + table.hostnames[nodes[i]] + ")";
    }
    return "GPU " + u + " is driven by the daemons of " + who +
           ": NCCL takes each GPU once per job, so give each daemon GPUs of its own (CUDA_VISIBLE_DEVICES) or "
           "start them with --gpus none";
  }
  return "";
}

}  // namespace syncd
