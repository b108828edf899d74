// The job start handshake's GPU part on the loopback transport: a node whose GPU path an earlier
// job aborted asks for a rebuild in its HELLO; node 0 makes one fresh NCCL id and every node gets
// it, byte for byte, or every node learns that none could be made.
#include "daemon/coord/job_join.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/transport/loopback/loopback_transport.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

constexpr uint64_t kJob = 0x10b;

// 128 bytes as ncclUniqueId has, with zeros and high bytes in them.
std::string FreshId() {
  std::string id(128, '\0');
  for (size_t i = 0; i < id.size(); ++i) id[i] = char((i * 37) % 256);
  return id;
}

struct Nodes {
  // `asks[n]`: node n's GPU path was aborted; `gpus[n]` false: node n passes no GpuRestart.
  Nodes(std::vector<bool> asks, std::vector<bool> gpus, bool id_fails = false) : hub(uint32_t(asks.size())) {
    const uint32_t n = uint32_t(asks.size());
    restarts.resize(n);
    joined.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      transports.push_back(std::make_unique<LoopbackTransport>(&hub, i));
      restarts[i].rebuild = asks[i];
      if (i == 0)
        restarts[i].make_id = [this, id_fails]() -> StatusOr<std::string> {
          ++ids_made;
          if (id_fails) return Status(SYNCD_ERR_SYSTEM, "ncclGetUniqueId failed (test)");
          return FreshId();
        };
    }
    for (uint32_t i = 0; i < n; ++i)
      tasks.push_back(JoinJob(transports[i].get(), kJob, &joined[i], gpus[i] ? &restarts[i] : nullptr));
  }

  void Run() {
    const uint64_t end = abi::MonotonicNs() + 2'000'000'000ull;
    for (bool all = false; !all && abi::MonotonicNs() < end;) {
      all = true;
      for (CommTask& t : tasks) all &= t.Poll();
    }
    for (CommTask& t : tasks) ASSERT_TRUE(t.done() && t.status().ok()) << t.status().message();
  }

  LoopbackHub hub;
  std::vector<std::unique_ptr<LoopbackTransport>> transports;
  std::vector<GpuRestart> restarts;
  std::vector<std::vector<bool>> joined;
  std::vector<CommTask> tasks;
  int ids_made = 0;
};

TEST(JobJoinGpu, NoNodeAskingMeansNoIdAndNoRebuild) {
  Nodes nodes({false, false, false}, {true, true, true});
  nodes.Run();
  EXPECT_EQ(nodes.ids_made, 0);
  for (const GpuRestart& r : nodes.restarts) {
    EXPECT_TRUE(r.nccl_id.empty());
    EXPECT_TRUE(r.error.ok()) << r.error.message();
  }
}

TEST(JobJoinGpu, OneNodeAskingGivesEveryNodeTheSameFreshId) {
  for (uint32_t asking = 0; asking < 3; ++asking) {
    std::vector<bool> asks(3, false);
    asks[asking] = true;
    Nodes nodes(asks, {true, true, true});
    nodes.Run();
    EXPECT_EQ(nodes.ids_made, 1) << "node " << asking << " asked";
    for (uint32_t n = 0; n < 3; ++n) {
      EXPECT_EQ(nodes.restarts[n].nccl_id, FreshId()) << "node " << n << " (node " << asking << " asked)";
      EXPECT_TRUE(nodes.restarts[n].error.ok()) << nodes.restarts[n].error.message();
    }
  }
}

TEST(JobJoinGpu, WhenNode0CannotMakeAnIdEveryNodeLearnsIt) {
  Nodes nodes({false, true, false}, {true, true, true}, /*id_fails=*/true);
  nodes.Run();
  EXPECT_EQ(nodes.ids_made, 1);
  for (uint32_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(nodes.restarts[n].nccl_id.empty()) << "node " << n;
    EXPECT_FALSE(nodes.restarts[n].error.ok()) << "node " << n << " would rebuild alone";
  }
}

TEST(JobJoinGpu, ANodeWithoutGpusTakesPartAndIsLeftAlone) {
  Nodes nodes({false, false, true}, {true, false, true});
  nodes.Run();
  EXPECT_EQ(nodes.ids_made, 1);
  EXPECT_EQ(nodes.restarts[0].nccl_id, FreshId());
  EXPECT_TRUE(nodes.restarts[1].nccl_id.empty());  // not handed a GpuRestart: untouched
  EXPECT_EQ(nodes.restarts[2].nccl_id, FreshId());
}

}  // namespace
}  // namespace syncd
