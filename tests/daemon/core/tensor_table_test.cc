#include "daemon/core/tensor_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

Request Req(uint32_t rank, const std::string& name, std::vector<int64_t> shape = {4}) {
  Request r;
  r.rank = r.local_rank = rank;
  r.client_id = rank + 1;
  r.handle = 100 + rank;
  r.name = name;
  r.shape.assign(shape.begin(), shape.end());
  r.bytes = 16;
  return r;
}

TEST(TensorTable, ReadyOnlyWhenEveryRankSubmittedInCompletionOrder) {
  TensorTable t(3, CheckAgreement);
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  ASSERT_TRUE(t.Add(Req(0, "a")).ok());
  ASSERT_TRUE(t.Add(Req(0, "b")).ok());
  ASSERT_TRUE(t.Add(Req(1, "b")).ok());
  ASSERT_TRUE(t.Add(Req(1, "a")).ok());
  t.TakeCompleted(&ready, &failed);
  EXPECT_TRUE(ready.empty());
  ASSERT_TRUE(t.Add(Req(2, "b")).ok());
  ASSERT_TRUE(t.Add(Req(2, "a")).ok());
  t.TakeCompleted(&ready, &failed);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].first().name, "b");
  EXPECT_EQ(ready[1].first().name, "a");
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(ready[0].requests[r].local_rank, r);
  EXPECT_TRUE(failed.empty());
  EXPECT_EQ(t.pending(), 0u);
}

TEST(TensorTable, DuplicateInFlightNameIsRefusedForThatRankOnly) {
  TensorTable t(2, CheckAgreement);
  ASSERT_TRUE(t.Add(Req(0, "w")).ok());
  Status dup = t.Add(Req(0, "w"));
  EXPECT_EQ(dup.code(), SYNCD_ERR_DUPLICATE);
  EXPECT_NE(dup.message().find("'w'"), std::string::npos);
  ASSERT_TRUE(t.Add(Req(1, "w")).ok());
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  t.TakeCompleted(&ready, &failed);
  EXPECT_EQ(ready.size(), 1u);
}

TEST(TensorTable, ShapeMismatchNamesTensorAndRanks) {
  TensorTable t(3, CheckAgreement);
  ASSERT_TRUE(t.Add(Req(0, "grad", {4, 4})).ok());
  ASSERT_TRUE(t.Add(Req(1, "grad", {4, 5})).ok());
  ASSERT_TRUE(t.Add(Req(2, "grad", {4, 4})).ok());
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  t.TakeCompleted(&ready, &failed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(ready.empty());
  EXPECT_EQ(failed[0].error.code(), SYNCD_ERR_MISMATCH);
  EXPECT_EQ(failed[0].error.message(),
            "tensor 'grad': mismatched shape across ranks: [4,4] on ranks 0,2; [4,5] on rank 1");
  EXPECT_EQ(failed[0].requests.size(), 3u) << "every participating rank gets the error";
}

TEST(TensorTable, DtypeOpAndRootMismatches) {
  struct Case {
    std::function<void(Request&)> tweak;
    std::string what;
  };
  std::vector<Case> cases = {
      {[](Request& r) { r.dtype = SYNCD_INT32; }, "mismatched dtype"},
      {[](Request& r) { r.op = SYNCD_MAX; }, "mismatched reduce op"},
      {[](Request& r) { r.kind = abi::OpKind::kBroadcast; }, "mismatched operation"},
      {[](Request& r) { r.prescale = 2.0; }, "mismatched scale factors"},
  };
  for (const Case& c : cases) {
    TensorTable t(2, CheckAgreement);
    Request odd = Req(1, "x");
    c.tweak(odd);
    ASSERT_TRUE(t.Add(Req(0, "x")).ok());
    ASSERT_TRUE(t.Add(odd).ok());
    std::vector<ReadyTensor> ready;
    std::vector<FailedTensor> failed;
    t.TakeCompleted(&ready, &failed);
    ASSERT_EQ(failed.size(), 1u) << c.what;
    EXPECT_NE(failed[0].error.message().find(c.what), std::string::npos) << failed[0].error.message();
  }
  TensorTable t(2, CheckAgreement);
  Request a = Req(0, "b"), b = Req(1, "b");
  a.kind = b.kind = abi::OpKind::kBroadcast;
  a.root = 0;
  b.root = 1;
  ASSERT_TRUE(t.Add(a).ok());
  ASSERT_TRUE(t.Add(b).ok());
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  t.TakeCompleted(&ready, &failed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].error.message(), "tensor 'b': mismatched root across ranks: root 0 on rank 0; root 1 on rank 1");
}

TEST(TensorTable, StalledNamesTheMissingRanksOldestFirst) {
  TensorTable t(3, CheckAgreement);
  ASSERT_TRUE(t.Add(Req(0, "old")).ok());
  ASSERT_TRUE(t.Add(Req(2, "old")).ok());
  usleep(20'000);
  ASSERT_TRUE(t.Add(Req(1, "new")).ok());
  const uint64_t now = abi::MonotonicNs();
  auto all = t.Stalled(now, 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "old");
  EXPECT_EQ(all[0].missing, (std::vector<uint32_t>{1}));
  EXPECT_EQ(all[1].missing, (std::vector<uint32_t>{0, 2}));
  auto old_only = t.Stalled(now, 10'000'000);
  ASSERT_EQ(old_only.size(), 1u);
  EXPECT_EQ(old_only[0].name, "old");
}

TEST(TensorTable, FailAllReturnsOnlySubmittedRequests) {
  TensorTable t(3, CheckAgreement);
  ASSERT_TRUE(t.Add(Req(0, "a")).ok());
  ASSERT_TRUE(t.Add(Req(2, "a")).ok());
  ASSERT_TRUE(t.Add(Req(1, "b")).ok());
  std::vector<FailedTensor> failed;
  t.FailAll(Status(SYNCD_ERR_RANK_LOST, "rank 1 died"), &failed);
  ASSERT_EQ(failed.size(), 2u);
  size_t total = 0;
  for (auto& f : failed) {
    total += f.requests.size();
    EXPECT_EQ(f.error.code(), SYNCD_ERR_RANK_LOST);
    EXPECT_NE(f.error.message().find("rank 1 died"), std::string::npos);
  }
  EXPECT_EQ(total, 3u);
  EXPECT_EQ(t.pending(), 0u);
}

// --on-loss continue and restore: a lost rank is stood in for (absent) for every name, except
// what it submitted before it died, which runs with its data; once a replacement attached in its
// place (Replaced), the first name taken with a request of the replacement's own ends the stand-in
// and later names wait for it again.
TEST(TensorTable, ALostRankStandsInUntilItsReplacementSubmitsANameItself) {
  TensorTable t(2, CheckAgreement, JoinedRequest);
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  auto take = [&] {
    ready.clear();
    t.TakeCompleted(&ready, &failed);
    return ready.size();
  };
  ASSERT_TRUE(t.Add(Req(1, "a")).ok());  // before it died
  Request join = Req(1, abi::kJoinName);
  join.kind = abi::OpKind::kJoin;
  join.client_id = kNoClient;
  join.absent = true;
  t.MarkLost(1, join);
  EXPECT_EQ(t.lost(), 1u);
  ASSERT_TRUE(t.Add(Req(0, "a")).ok());
  ASSERT_EQ(take(), 1u);
  EXPECT_FALSE(ready[0].requests[1].absent);  // its own data
  EXPECT_EQ(t.lost(), 1u);                    // and still lost
  ASSERT_TRUE(t.Add(Req(0, "b")).ok());
  ASSERT_EQ(take(), 1u);
  EXPECT_TRUE(ready[0].requests[1].absent);  // stood in for
  t.Replaced(1);
  ASSERT_TRUE(t.Add(Req(0, "c")).ok());  // the replacement has submitted nothing yet
  ASSERT_EQ(take(), 1u);
  EXPECT_TRUE(ready[0].requests[1].absent);
  ASSERT_TRUE(t.Add(Req(1, "d")).ok());  // the replacement's first name
  EXPECT_EQ(take(), 0u);
  ASSERT_TRUE(t.Add(Req(0, "d")).ok());
  ASSERT_EQ(take(), 1u);
  EXPECT_FALSE(ready[0].requests[1].absent);
  EXPECT_EQ(t.lost(), 0u);
  ASSERT_TRUE(t.Add(Req(0, "e")).ok());
  EXPECT_EQ(take(), 0u);  // waits for rank 1 again
  EXPECT_TRUE(failed.empty());
}

// A node with no rank left joins for them (MarkLost's stand-in join), and again after each join of
// the job completes: else the next join, and the job's collectives until it, would wait for it.
TEST(TensorTable, ANodeWithNoRankLeftJoinsAgainAfterEachJoin) {
  TensorTable t(2, CheckAgreement, JoinedRequest);
  std::vector<ReadyTensor> ready;
  std::vector<FailedTensor> failed;
  for (uint32_t l = 0; l < 2; ++l) {
    Request join = Req(l, abi::kJoinName, {});
    join.kind = abi::OpKind::kJoin;
    join.client_id = kNoClient;
    join.absent = true;
    t.MarkLost(l, join);
  }
  for (int round = 0; round < 3; ++round) {
    ready.clear();
    t.TakeCompleted(&ready, &failed);
    ASSERT_EQ(ready.size(), 1u) << "round " << round << ": the node's join goes on to the other nodes";
    EXPECT_EQ(ready[0].first().kind, abi::OpKind::kJoin);
    EXPECT_TRUE(ready[0].requests[0].absent && ready[0].requests[1].absent);
    ready.clear();
    t.TakeCompleted(&ready, &failed);
    EXPECT_TRUE(ready.empty()) << "no second join before the job's completed";
    t.JoinCompleted();  // every node joined
  }
  EXPECT_TRUE(failed.empty());
  // A node with a rank left does not join for it.
  TensorTable one_left(2, CheckAgreement, JoinedRequest);
  Request join = Req(1, abi::kJoinName, {});
  join.kind = abi::OpKind::kJoin;
  join.client_id = kNoClient;
  one_left.MarkLost(1, join);
  one_left.JoinCompleted();
  ready.clear();
  one_left.TakeCompleted(&ready, &failed);
  EXPECT_TRUE(ready.empty());
}

// A process set added after a loss: the lost rank stands in with the same ranks (no client to
// answer); a rank that only joined (hvd.join) cannot, and the addition fails on the others,
// naming it (it would miss the change when it comes back).
TEST(TensorTable, ALostRankStandsInForAProcessSetsAdditionAJoinedOneDoesNot) {
  for (const bool lost : {true, false}) {
    TensorTable t(2, CheckAgreement, JoinedRequest);
    std::vector<ReadyTensor> ready;
    std::vector<FailedTensor> failed;
    Request join = Req(1, abi::kJoinName);
    join.kind = abi::OpKind::kJoin;
    if (lost) {
      join.client_id = kNoClient;
      join.absent = true;
      t.MarkLost(1, join);
    } else {
      ASSERT_TRUE(t.Add(join).ok());
    }
    Request add = Req(0, "syncd.process_set.0", {});
    add.kind = abi::OpKind::kAddProcessSet;
    add.bytes = 0;
    add.splits = {0, 2};
    ASSERT_TRUE(t.Add(add).ok());
    t.TakeCompleted(&ready, &failed);
    if (lost) {
      ASSERT_EQ(ready.size(), 1u);
      ASSERT_TRUE(failed.empty()) << failed[0].error.message();
      const Request& stand_in = ready[0].requests[1];
      EXPECT_EQ(stand_in.kind, abi::OpKind::kAddProcessSet);
      EXPECT_EQ(stand_in.splits, add.splits);
      EXPECT_EQ(stand_in.client_id, kNoClient);
      EXPECT_EQ(stand_in.rank, 1u);
      EXPECT_TRUE(stand_in.absent);
    } else {
      ASSERT_EQ(failed.size(), 1u);
      EXPECT_NE(failed[0].error.message().find("rank 1 has joined"), std::string::npos) << failed[0].error.message();
      EXPECT_EQ(failed[0].requests.size(), 1u);  // only rank 0's own request fails
    }
  }
}

}  // namespace
}  // namespace syncd
