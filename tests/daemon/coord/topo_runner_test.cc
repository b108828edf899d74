#include "daemon/coord/topo_runner.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "proto/doorbell.h"

namespace syncd {
namespace {

// A plan of 4 int32 tensors in groups {a, b}, {c}, {d}.
std::shared_ptr<const TopoPlan> Plan() {
  auto p = std::make_shared<TopoPlan>();
  for (const char* n : {"a", "b", "c", "d"}) p->tensors.push_back({n, SYNCD_INT32, 4, SYNCD_SUM, false, 0, 0});
  p->group_begin = {0, 2, 3};
  return p;
}

ReadyTensor Tensor(const std::string& name, uint64_t count = 4, syncd_dtype dtype = SYNCD_INT32) {
  Request r;
  r.name = name;
  r.kind = abi::OpKind::kAllreduce;
  r.dtype = dtype;
  r.op = SYNCD_SUM;
  r.shape = {int64_t(count)};
  return ReadyTensor{{r, r}};
}

// Runs each group the runner releases, as a process set does, recording its names.
struct Fixture {
  std::vector<std::string> log;
  std::vector<std::string> failed;
  TopoRunner runner{Plan()};
  bool Poll() {
    bool did = false;
    while (std::optional<AgreedWork> g = runner.Next()) {
      EXPECT_FALSE(runner.Next().has_value()) << "one group at a time";
      std::string names;
      for (const ReadyTensor& t : g->tensors) names += t.first().name;
      log.push_back(names);
      runner.Done(true);
      did = true;
    }
    return did;
  }
  void Add(ReadyTensor t) {
    Status st = runner.Add(&t);
    EXPECT_TRUE(st.ok()) << st.message();
  }
};

TEST(TopoRunner, GroupsRunInPlanOrderWhateverOrderTensorsArriveIn) {
  Fixture f;
  f.Add(Tensor("d"));
  f.Add(Tensor("c"));
  EXPECT_FALSE(f.Poll()) << "group 0 is not complete: nothing may run";
  f.Add(Tensor("b"));
  EXPECT_FALSE(f.Poll());
  EXPECT_TRUE(f.log.empty());
  f.Add(Tensor("a"));
  EXPECT_TRUE(f.Poll());
  EXPECT_EQ(f.log, (std::vector<std::string>{"ab", "c", "d"}));
  EXPECT_EQ(f.runner.stats().steps, 1u);
  EXPECT_EQ(f.runner.stats().groups_executed, 3u);
  EXPECT_EQ(f.runner.next_group(), 0u);
  // The next step: a later group's tensor waits for the earlier ones again.
  f.Add(Tensor("c"));
  f.Add(Tensor("a"));
  EXPECT_FALSE(f.Poll());
  f.Add(Tensor("b"));
  f.Poll();
  EXPECT_EQ(f.log, (std::vector<std::string>{"ab", "c", "d", "ab", "c"}));
  EXPECT_EQ(f.runner.next_group(), 2u);
}

TEST(TopoRunner, TensorsThatDifferFromThePlanAreRefusedByName) {
  Fixture f;
  ReadyTensor wrong_count = Tensor("b", 5);
  EXPECT_EQ(f.runner.Add(&wrong_count).message(),
            "tensor 'b' does not match the registered TOPO plan (rank 0): 5 elements, the plan says 4");
  ReadyTensor wrong_dtype = Tensor("c", 4, SYNCD_FLOAT32);
  EXPECT_EQ(f.runner.Add(&wrong_dtype).message(),
            "tensor 'c' does not match the registered TOPO plan (rank 0): dtype float32, the plan says int32");
  ReadyTensor on_gpu = Tensor("a");
  for (Request& r : on_gpu.requests) r.gpu = true;
  EXPECT_EQ(f.runner.Add(&on_gpu).message(),
            "tensor 'a' does not match the registered TOPO plan (rank 0): GPU memory, the plan says host memory");
  ReadyTensor compressed = Tensor("a");
  for (Request& r : compressed.requests) r.compression = SYNCD_COMPRESSION_FP16;
  EXPECT_EQ(f.runner.Add(&compressed).message(),
            "tensor 'a' does not match the registered TOPO plan (rank 0): compression fp16, the plan says default");
  ReadyTensor other_ratio = Tensor("a");
  for (Request& r : other_ratio.requests) r.compression_ppm = 20'000;  // the plan's compression, another ratio
  EXPECT_EQ(f.runner.Add(&other_ratio).message(),
            "tensor 'a' does not match the registered TOPO plan (rank 0): compression default (ratio 0.02), the plan "
            "says default");
  f.Add(Tensor("d"));
  ReadyTensor again = Tensor("d");
  EXPECT_NE(f.runner.Add(&again).message().find("submitted again before its group ran"), std::string::npos);
}

TEST(TopoRunner, FailAllFailsWhatIsHeld) {
  Fixture f;
  f.Add(Tensor("c"));
  f.Add(Tensor("a"));
  std::vector<FailedTensor> ended;
  f.runner.FailAll(Status(SYNCD_ERR_RANK_LOST, "node 2 lost"), &ended);
  for (const FailedTensor& t : ended) f.failed.push_back(t.requests.front().name + ": " + t.error.message());
  EXPECT_EQ(f.runner.in_flight(), 0u);
  EXPECT_EQ(f.failed, (std::vector<std::string>{"a: tensor 'a': node 2 lost", "c: tensor 'c': node 2 lost"}));
}

TEST(TopoRunner, AGroupThatFailedIsNotRunAgainAndTagsNeverRepeat) {
  Fixture f;
  f.Add(Tensor("a"));
  f.Add(Tensor("b"));
  std::optional<AgreedWork> first = f.runner.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->tensors.size(), 2u);
  EXPECT_FALSE(first->gpu_position.has_value()) << "a plan group, not a negotiated cycle";
  EXPECT_TRUE(f.runner.running());
  f.runner.Done(false);
  EXPECT_FALSE(f.runner.running());
  EXPECT_EQ(f.runner.next_group(), 0u) << "a failed group does not count as run";
  EXPECT_EQ(f.runner.stats().groups_executed, 0u);
  f.Add(Tensor("a"));
  f.Add(Tensor("b"));
  std::optional<AgreedWork> again = f.runner.Next();
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->tag, first->tag);
}

TEST(TopoRunner, WaitingNamesTheMissingTensorsOfTheNextGroup) {
  Fixture f;
  f.Add(Tensor("b"));
  auto w = f.runner.Waiting(abi::MonotonicNs() + 5'000'000'000ull, 1'000'000'000ull);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->group, 0u);
  EXPECT_EQ(w->missing, std::vector<std::string>{"a"});
  EXPECT_FALSE(f.runner.Waiting(abi::MonotonicNs(), 1'000'000'000ull).has_value()) << "not old enough yet";
}

}  // namespace
}  // namespace syncd
