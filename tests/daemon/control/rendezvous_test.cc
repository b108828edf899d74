#include "daemon/control/rendezvous.h"

#include <gtest/gtest.h>

#include "daemon/base/version.h"

namespace syncd {
namespace {

JobTable Table(std::vector<std::vector<std::string>> gpus, std::vector<std::string> hosts) {
  JobTable t;
  t.gpu_uuids = std::move(gpus);
  t.hostnames = std::move(hosts);
  return t;
}

TEST(SharedGpus, EveryGpuInOneDaemonIsFine) {
  EXPECT_EQ(SharedGpus(Table({{"GPU-a", "GPU-b"}, {"GPU-c", "GPU-d"}}, {"h0", "h1"})), "");
  EXPECT_EQ(SharedGpus(Table({{"GPU-a"}, {}, {"GPU-b"}}, {"h0", "h1", "h2"})), "") << "a node without GPUs";
  EXPECT_EQ(SharedGpus(Table({}, {})), "");
}

TEST(SharedGpus, AGpuInTwoOrMoreDaemonsIsNamedWithItsNodesAndHosts) {
  EXPECT_EQ(SharedGpus(Table({{"GPU-a"}, {"GPU-a"}}, {"box", "box"})),
            "GPU GPU-a is driven by the daemons of node 0 (box) and node 1 (box): NCCL takes each GPU once per job, "
            "so give each daemon GPUs of its own (CUDA_VISIBLE_DEVICES) or start them with --gpus none");
  const std::string three = SharedGpus(Table({{"GPU-x", "GPU-b"}, {"GPU-c"}, {"GPU-b"}, {"GPU-b"}}, {"a", "b", "c", "d"}));
  const std::string want = "GPU GPU-b is driven by the daemons of node 0 (a), node 2 (c) and node 3 (d):";
  EXPECT_EQ(three.substr(0, want.size()), want) << three;
}

}  // namespace
}  // namespace syncd

namespace syncd {
namespace {

control::JoinRequest Join(uint32_t wire_version, const std::string& daemon_version, uint64_t job = 7,
                          const std::string& token = "t") {
  control::JoinRequest req;
  req.set_job(job);
  req.set_node_rank(1);
  req.set_nodes(2);
  req.set_local_size(1);
  req.set_ucx_address("addr-of-node-1");
  req.set_wire_version(wire_version);
  req.set_daemon_version(daemon_version);
  SignJoinRequest(token, &req);
  return req;
}

uint64_t Now(const control::JoinRequest& req) { return req.issued_unix_ms(); }

TEST(Rendezvous, ADaemonOfTheSameProtocolJoins) {
  const control::JoinRequest req = Join(kWireVersion, kVersionString);
  EXPECT_TRUE(CheckJoinRequest(req, "t", 7, 2, 1, "node 1", Now(req)).ok());
}

TEST(Rendezvous, TheTokenNeverCrossesTheWireAndAProofIsGoodForItsOwnJoinOnly) {
  const std::string token = "secret-token-of-job-7";
  const control::JoinRequest req = Join(kWireVersion, kVersionString, 7, token);
  std::string wire;
  ASSERT_TRUE(req.SerializeToString(&wire));
  EXPECT_EQ(wire.find(token), std::string::npos);
  EXPECT_EQ(req.token_proof().size(), 32u) << "HMAC-SHA256";
  EXPECT_TRUE(CheckJoinRequest(req, token, 7, 2, 1, "node 1", Now(req)).ok());
  // Another token.
  grpc::Status st = CheckJoinRequest(req, "u", 7, 2, 1, "node 1", Now(req));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(st.error_message(), "node 1: wrong job token (its proof does not match)");
  // Another job's rendezvous, even one whose token is the same.
  st = CheckJoinRequest(req, token, 8, 2, 1, "node 1", Now(req));
  EXPECT_EQ(st.error_message(), "node 1 joins job 7, but this rendezvous is job 8's");
  // The proof replayed for job 8: the job is part of what it proves.
  control::JoinRequest replayed = req;
  replayed.set_job(8);
  st = CheckJoinRequest(replayed, token, 8, 2, 1, "node 1", Now(req));
  EXPECT_EQ(st.error_message(), "node 1: wrong job token (its proof does not match)");
  // ... or for another address, or as another node.
  replayed = req;
  replayed.set_ucx_address("the attacker's");
  EXPECT_FALSE(CheckJoinRequest(replayed, token, 7, 2, 1, "node 1", Now(req)).ok());
  replayed = req;
  replayed.set_node_rank(0);
  EXPECT_FALSE(CheckJoinRequest(replayed, token, 7, 2, 1, "node 0", Now(req)).ok());
  // Replayed later than 5 minutes.
  st = CheckJoinRequest(req, token, 7, 2, 1, "node 1", Now(req) + kJoinProofWindowMs + 1000);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("node 1: its join was made 301 s behind node 0's clock"), std::string::npos)
      << st.error_message();
  EXPECT_TRUE(CheckJoinRequest(req, token, 7, 2, 1, "node 1", Now(req) + kJoinProofWindowMs - 1000).ok());
}

TEST(Rendezvous, ADaemonOfAnotherProtocolIsRefusedNamingBothVersions) {
  const control::JoinRequest newer = Join(kWireVersion + 1, "9.9.9");
  grpc::Status st = CheckJoinRequest(newer, "t", 7, 2, 1, "node 1 (h1, pid 7)", Now(newer));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(), "node 1 (h1, pid 7) runs syncd 9.9.9 (daemon protocol " + std::to_string(kWireVersion + 1) +
                                    "); node 0 runs syncd " + kVersionString + " (daemon protocol " +
                                    std::to_string(kWireVersion) +
                                    "): every daemon of a job must speak the same protocol (upgrade them together)");
  // A daemon from before the version was sent.
  const control::JoinRequest older = Join(0, "");
  st = CheckJoinRequest(older, "t", 7, 2, 1, "node 1", Now(older));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("node 1 runs an older syncd (daemon protocol 1 or older)"), std::string::npos)
      << st.error_message();
}

}  // namespace
}  // namespace syncd
