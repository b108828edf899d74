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

control::JoinRequest Join(uint32_t wire_version, const std::string& daemon_version) {
  control::JoinRequest req;
  req.set_job_token("t");
  req.set_node_rank(1);
  req.set_nodes(2);
  req.set_local_size(1);
  req.set_wire_version(wire_version);
  req.set_daemon_version(daemon_version);
  return req;
}

TEST(Rendezvous, ADaemonOfTheSameProtocolJoins) {
  EXPECT_TRUE(CheckJoinRequest(Join(kWireVersion, kVersionString), "t", 2, 1, "node 1").ok());
}

TEST(Rendezvous, ADaemonOfAnotherProtocolIsRefusedNamingBothVersions) {
  grpc::Status st = CheckJoinRequest(Join(kWireVersion + 1, "9.9.9"), "t", 2, 1, "node 1 (h1, pid 7)");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(), "node 1 (h1, pid 7) runs syncd 9.9.9 (daemon protocol " + std::to_string(kWireVersion + 1) +
                                    "); node 0 runs syncd " + kVersionString + " (daemon protocol " +
                                    std::to_string(kWireVersion) +
                                    "): every daemon of a job must speak the same protocol (upgrade them together)");
  // A daemon from before the version was sent.
  st = CheckJoinRequest(Join(0, ""), "t", 2, 1, "node 1");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("node 1 runs an older syncd (daemon protocol 1 or older)"), std::string::npos)
      << st.error_message();
}

}  // namespace
}  // namespace syncd
