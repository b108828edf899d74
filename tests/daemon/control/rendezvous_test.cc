#include "daemon/control/rendezvous.h"

#include <gtest/gtest.h>

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
