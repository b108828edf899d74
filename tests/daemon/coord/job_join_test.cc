// The job start handshake on the loopback transport. Its GPU part: a node whose GPU path an
// earlier job aborted asks for a rebuild in its HELLO; node 0 makes one fresh NCCL id and every
// node gets it, byte for byte, or every node learns that none could be made. Its TOPO part (a
// global set made afresh): the plan the nodes holding one agree on reaches every node without it,
// whole; nodes holding different plans all go on without one.
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
  // `held[n]`: the plan node n holds (every node takes part in the TOPO part when given).
  Nodes(std::vector<bool> asks, std::vector<bool> gpus, bool id_fails = false,
        std::vector<std::shared_ptr<const TopoPlan>> held = {})
      : hub(uint32_t(asks.size())) {
    const uint32_t n = uint32_t(asks.size());
    restarts.resize(n);
    joined.resize(n);
    plans.resize(n);
    for (uint32_t i = 0; i < held.size(); ++i) plans[i].plan = held[i];
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
      tasks.push_back(JoinJob(transports[i].get(), kJob, &joined[i], gpus[i] ? &restarts[i] : nullptr,
                              held.empty() ? nullptr : &plans[i]));
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
  std::vector<PlanCarry> plans;
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

// A plan of `tensors` float32 sums of `count` elements each, two to a group.
std::shared_ptr<const TopoPlan> Plan(int tensors, uint64_t count) {
  TopoPlan p;
  for (int i = 0; i < tensors; ++i) {
    p.tensors.push_back(PlannedTensor{"layer" + std::to_string(i) + ".grad", SYNCD_FLOAT32, count, SYNCD_SUM, false,
                                      SYNCD_COMPRESSION_NONE, 0});
    if (i % 2 == 0) p.group_begin.push_back(uint32_t(i));
  }
  p.hash = PlanHash(p);
  return std::make_shared<const TopoPlan>(std::move(p));
}

void ExpectSamePlan(const PlanCarry& got, const TopoPlan& want, uint32_t node) {
  ASSERT_TRUE(got.plan != nullptr) << "node " << node << " has no plan";
  EXPECT_TRUE(got.error.ok()) << got.error.message();
  EXPECT_EQ(got.plan->hash, want.hash) << "node " << node;
  ASSERT_EQ(got.plan->tensors.size(), want.tensors.size()) << "node " << node;
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(got.plan->tensors[i].name, want.tensors[i].name) << "node " << node;
    EXPECT_EQ(got.plan->tensors[i].count, want.tensors[i].count) << "node " << node;
  }
  EXPECT_EQ(got.plan->group_begin, want.group_begin) << "node " << node;
}

TEST(JobJoinPlan, NodesWithoutThePlanGetItFromAHolder) {
  // A restarted daemon (node 0, the lowest, has none) and a node taken back (node 3): nodes 1 and
  // 2 hold the plan; 300 tensors (about 8 KB) go in one piece each.
  const std::shared_ptr<const TopoPlan> plan = Plan(300, 1000);
  Nodes nodes({false, false, false, false}, {false, false, false, false}, false, {nullptr, plan, plan, nullptr});
  nodes.Run();
  for (uint32_t n = 0; n < 4; ++n) ExpectSamePlan(nodes.plans[n], *plan, n);
  EXPECT_NE(nodes.plans[0].plan, plan) << "node 0 decoded its own copy";
  EXPECT_EQ(nodes.plans[1].plan, plan) << "a holder keeps its own";
}

TEST(JobJoinPlan, EveryNodeHoldingItOrNoneHoldingItMovesNothing) {
  const std::shared_ptr<const TopoPlan> plan = Plan(5, 10);
  Nodes all({false, false, false}, {false, false, false}, false, {plan, plan, plan});
  all.Run();
  for (uint32_t n = 0; n < 3; ++n) EXPECT_EQ(all.plans[n].plan, plan) << "node " << n;
  Nodes none({false, false}, {false, false}, false, {nullptr, nullptr});
  none.Run();
  for (const PlanCarry& c : none.plans) EXPECT_TRUE(c.plan == nullptr && c.error.ok()) << c.error.message();
}

TEST(JobJoinPlan, DifferentPlansMeanNoPlanOnAnyNode) {
  const std::shared_ptr<const TopoPlan> a = Plan(4, 10), b = Plan(4, 11);
  Nodes nodes({false, false, false}, {false, false, false}, false, {a, nullptr, b});
  nodes.Run();
  for (uint32_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(nodes.plans[n].plan == nullptr) << "node " << n << " kept a plan the others do not run";
    EXPECT_NE(nodes.plans[n].error.message().find("node 0 of the set holds TOPO plan"), std::string::npos)
        << nodes.plans[n].error.message();
  }
}

TEST(JobJoinPlan, ThePlanAndAGpuRebuildInOneHandshake) {
  const std::shared_ptr<const TopoPlan> plan = Plan(3, 7);
  Nodes nodes({false, true}, {true, true}, false, {plan, nullptr});
  nodes.Run();
  ExpectSamePlan(nodes.plans[1], *plan, 1);
  EXPECT_EQ(nodes.restarts[1].nccl_id, FreshId());
}

TEST(SharePlan, ANodeWithNoRankToRegisterWithGetsThePlanTheOthersRegistered) {
  // Node 1's ranks are all vacant when the registration runs: it holds no plan, the others do.
  const std::shared_ptr<const TopoPlan> plan = Plan(40, 3);
  LoopbackHub hub(3);
  std::vector<std::unique_ptr<LoopbackTransport>> transports;
  std::vector<PlanCarry> carries(3);
  std::vector<CommTask> tasks;
  carries[0].plan = carries[2].plan = plan;
  for (uint32_t i = 0; i < 3; ++i) transports.push_back(std::make_unique<LoopbackTransport>(&hub, i));
  for (uint32_t i = 0; i < 3; ++i) tasks.push_back(SharePlan(transports[i].get(), 0x500, &carries[i]));
  const uint64_t end = abi::MonotonicNs() + 2'000'000'000ull;
  for (bool all = false; !all && abi::MonotonicNs() < end;) {
    all = true;
    for (CommTask& t : tasks) all &= t.Poll();
  }
  for (CommTask& t : tasks) ASSERT_TRUE(t.done() && t.status().ok()) << t.status().message();
  for (uint32_t n = 0; n < 3; ++n) ExpectSamePlan(carries[n], *plan, n);
}

}  // namespace
}  // namespace syncd
