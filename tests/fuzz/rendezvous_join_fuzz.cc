// The rendezvous join message (proto JoinRequest) as node 0's service receives it from anyone who
// can reach its port: parsed, checked against the job, and (once accepted) put in the job table
// every node computes its GPU sharing from.
#include "daemon/control/rendezvous.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncd::control::JoinRequest req;
  if (!req.ParseFromArray(data, int(size))) return 0;
  // Inputs of even length signed with the job's token (the fuzzer cannot forge a proof), so that
  // what follows the proof is reached too; the others checked as they come.
  if (size % 2 == 0) syncd::SignJoinRequest("fuzz-token", &req);
  const grpc::Status st = syncd::CheckJoinRequest(req, "fuzz-token", 7, 4, 2, "node " + std::to_string(req.node_rank()),
                                                  req.issued_unix_ms());
  if (!st.ok()) return 0;
  if (req.token_proof() != syncd::JoinProof("fuzz-token", req) || req.job() != 7 || req.node_rank() >= 4 ||
      req.nodes() != 4)
    __builtin_trap();
  syncd::JobTable table;
  table.hostnames.assign(4, "host");
  table.gpu_uuids.assign(4, {});
  table.hostnames[req.node_rank()] = req.hostname();
  table.gpu_uuids[req.node_rank()].assign(req.gpu_uuids().begin(), req.gpu_uuids().end());
  table.gpu_uuids[(req.node_rank() + 1) % 4].assign(req.gpu_uuids().begin(), req.gpu_uuids().end());
  (void)syncd::SharedGpus(table);
  return 0;
}
