// Partial allreduce across nodes, through real daemons (2 nodes x 2 ranks) in every coordination
// mode: solo rounds run on whichever node a rank arrives first and lose nothing; majority's
// initiator is the same rank on every rank and was fresh in its round; a process set spanning
// nodes runs its own rounds; a rank that dies mid-training ends the job with an error naming it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

constexpr int kNodes = 2, kLocal = 2, kRanks = kNodes * kLocal;
constexpr int kMaxRounds = 512;

// Shared by the forked ranks (an anonymous shared mapping made before they fork).
struct Board {
  std::atomic<int> seen[kMaxRounds];       // 1 once some rank got the round's result
  // The round's initiator (+1) and NAP as the first rank to see it read them, in one word: every
  // later completion compares both at once (two words would race with the first one's stores).
  std::atomic<int64_t> identity[kMaxRounds];
  std::atomic<int> initiator[kMaxRounds];  // as the first rank to see the round read it (+1)
  std::atomic<int> nap[kMaxRounds];
  std::atomic<int> initiator_fresh[kMaxRounds];  // the initiator itself got the round fresh
  std::atomic<int> disagreements;
  std::atomic<int> exited;  // the rank that dies is about to
  float result[kMaxRounds][kRanks];
};

Board* MapBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Board*>(p);
}

// One call: a one-hot contribution at `slot` (or zeros), Sum. Records what the round was.
int Call(syncd_client* c, int rank, int slot, int mode, int set, Board* b, syncd_partial_info* info, bool zero = false) {
  float v[kRanks] = {};
  if (!zero) v[slot] = 1;
  int64_t n = kRanks;
  syncd_tensor t{"grad", v, SYNCD_FLOAT32, 1, &n, set};
  syncd_handle h;
  int rc = syncd_partial_allreduce_async(c, &t, SYNCD_SUM, mode, 0, &h);
  if (rc == SYNCD_OK) rc = syncd_partial_wait(c, h, 30'000, info);
  if (rc != SYNCD_OK) return rc;
  const uint64_t r = info->round;
  if (r >= kMaxRounds) return -1;
  const int64_t identity = (int64_t(info->nap) << 32) | uint32_t(info->initiator + 1);
  int64_t expected = 0;
  if (!b->identity[r].compare_exchange_strong(expected, identity)) {
    if (expected != identity) ++b->disagreements;
  } else {
    b->initiator[r] = info->initiator + 1;
    b->nap[r] = info->nap;
  }
  if (info->fresh && info->initiator == rank) b->initiator_fresh[r] = 1;
  for (int i = 0; i < kRanks; ++i) b->result[r][i] = v[i];
  b->seen[r] = 1;
  return SYNCD_OK;
}

int Barrier(syncd_client* c, int set) {
  syncd_handle h;
  int rc = syncd_barrier_set_async(c, set, &h);
  return rc == SYNCD_OK ? syncd_wait(c, h, 30'000) : rc;
}

// Solo over the ranks `members` (global ranks; set 0: all of them). Uneven arrivals, then the
// drain: after a barrier, the first member calls alone until it is fresh, so its last round takes
// everything left. Then each member's column summed over all rounds is its number of calls.
int SoloBody(syncd_client* c, int rank, int set, const std::vector<int>& members, Board* b) {
  const int slot = rank;
  syncd_partial_info info{};
  int calls = 0;
  for (int k = 0; k < 24; ++k) {
    // The lead changes nodes: node 1's ranks are ahead for 8 calls, then slow; node 0's take over
    // (a rank's k-th call is for round k: the rank ahead starts the rounds).
    const bool node1 = rank >= kLocal;
    usleep(useconds_t(k < 8 ? (node1 ? 0 : 3000 + 500 * rank) : (node1 ? 20000 : 300 * rank)));
    CHILD_CHECK(Call(c, rank, slot, SYNCD_PARTIAL_SOLO, set, b, &info) == SYNCD_OK, "step %d: %s", k, syncd_last_error());
    CHILD_CHECK(info.nap >= 1, "solo round %llu with nap %d", (unsigned long long)info.round, info.nap);
    ++calls;
  }
  CHILD_CHECK(Barrier(c, set) == SYNCD_OK, "barrier: %s", syncd_last_error());
  if (rank == members.front()) {
    for (int k = 0; k == 0 || (k < 2 && info.fresh == 0); ++k) {
      CHILD_CHECK(Call(c, rank, slot, SYNCD_PARTIAL_SOLO, set, b, &info) == SYNCD_OK, "drain: %s", syncd_last_error());
      ++calls;
    }
    CHILD_CHECK(info.fresh == 1, "two calls alone and still not fresh (round %llu)", (unsigned long long)info.round);
  }
  CHILD_CHECK(Barrier(c, set) == SYNCD_OK, "barrier: %s", syncd_last_error());
  float sum = 0;
  int rounds = 0;
  for (int r = 1; r < kMaxRounds && b->seen[r]; ++r, ++rounds) sum += b->result[r][slot];
  for (int r = rounds + 1; r < kMaxRounds; ++r) CHILD_CHECK(!b->seen[r], "round %d seen after a gap at %d", r, rounds + 1);
  CHILD_CHECK(sum == float(calls), "rank %d: rounds sum to %g of its %d contributions (%d rounds)", rank, sum, calls, rounds);
  CHILD_CHECK(b->disagreements == 0, "%d completions disagreed on a round's initiator or NAP", b->disagreements.load());
  for (int r = 1; r <= rounds; ++r)
    for (int i = 0; i < kRanks; ++i)
      CHILD_CHECK(std::find(members.begin(), members.end(), i) != members.end() || b->result[r][i] == 0,
                  "round %d holds rank %d, which is not in the set", r, i);
  return 0;
}

class PartialModes : public ::testing::TestWithParam<std::string> {};

TEST_P(PartialModes, SoloAcrossNodesRunsOnEitherNodeAndLosesNothing) {
  Cluster cluster(kNodes, kLocal, {"--cores", "none", "--log-level", "warn", "--coord", GetParam()});
  Board* b = MapBoard();
  ASSERT_NE(b, nullptr);
  const std::string run_dir = cluster.node(1).run_dir();
  auto st = RunClusterRanks(cluster, [b, run_dir](syncd_client* c, int rank, int) {
    if (int rc = SoloBody(c, rank, 0, {0, 1, 2, 3}, b); rc != 0) return rc;
    if (rank == 2) {  // syncctl shows the operation while the job runs
      const std::string table = SyncctlStatus(run_dir);
      CHILD_CHECK(Contains(table, "partial    grad   solo   rounds ") && Contains(table, "most absent here: "), "%s",
                  table.c_str());
    }
    CHILD_CHECK(Barrier(c, 0) == SYNCD_OK, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
  // Rounds started on both nodes: initiators on node 0 (ranks 0, 1) and node 1 (ranks 2, 3).
  bool node0 = false, node1 = false;
  for (int r = 1; r < kMaxRounds && b->seen[r]; ++r) (b->initiator[r] - 1 < kLocal ? node0 : node1) = true;
  EXPECT_TRUE(node0 && node1) << "every round started on one node";
  munmap(b, sizeof(Board));
}

// Majority: every rank calls until it holds a result of round kTarget or later (a rank fresh for
// a round after kTarget must have got kTarget, so nobody is left waiting). Every completion of a
// round names the same initiator and NAP, and the initiator was fresh in its own round.
TEST_P(PartialModes, MajorityInitiatorIsTheSameOnEveryRankAndFreshInItsRound) {
  constexpr uint64_t kTarget = 16;
  Cluster cluster(kNodes, kLocal, {"--cores", "none", "--log-level", "warn", "--coord", GetParam()});
  Board* b = MapBoard();
  ASSERT_NE(b, nullptr);
  auto st = RunClusterRanks(cluster, [b](syncd_client* c, int rank, int) {
    syncd_partial_info info{};
    for (int k = 0; info.round < kTarget; ++k) {
      if ((k + rank) % 2 == 0) usleep(1000 * (rank + 1));
      CHILD_CHECK(Call(c, rank, rank, SYNCD_PARTIAL_MAJORITY, 0, b, &info) == SYNCD_OK, "call %d: %s", k, syncd_last_error());
      CHILD_CHECK(k < 2000, "still before round %llu after 2000 calls", (unsigned long long)kTarget);
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  EXPECT_EQ(b->disagreements, 0);
  std::vector<int> initiators(kRanks, 0);
  for (uint64_t r = 1; r <= kTarget; ++r) {
    ASSERT_TRUE(b->seen[r]) << "round " << r;
    EXPECT_EQ(b->initiator_fresh[r], 1) << "round " << r << "'s initiator " << b->initiator[r] - 1 << " was not fresh";
    EXPECT_GE(b->nap[r], 1);
    ++initiators[size_t(b->initiator[r] - 1)];
  }
  EXPECT_GE(std::count_if(initiators.begin(), initiators.end(), [](int n) { return n > 0; }), 3)
      << "the draw picked the same few ranks";
  munmap(b, sizeof(Board));
}

INSTANTIATE_TEST_SUITE_P(PartialNodes, PartialModes, ::testing::Values("negotiate", "gs", "nbcs", "topo"));

TEST(PartialNodes, AProcessSetSpanningNodesRunsItsOwnRounds) {
  Cluster cluster(kNodes, kLocal, {"--cores", "none", "--log-level", "warn"});
  Board* b = MapBoard();
  ASSERT_NE(b, nullptr);
  auto st = RunClusterRanks(cluster, [b](syncd_client* c, int rank, int) {
    const int members[] = {1, 2};  // one rank on each node
    int set = 0;
    CHILD_CHECK(syncd_add_process_set(c, members, 2, 30'000, &set) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 1 || rank == 2) {
      if (int rc = SoloBody(c, rank, set, {1, 2}, b); rc != 0) return rc;
    }
    CHILD_CHECK(Barrier(c, 0) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 0) {  // not a member: refused, naming the set
      float v[kRanks] = {};
      int64_t n = kRanks;
      syncd_tensor t{"grad", v, SYNCD_FLOAT32, 1, &n, set};
      syncd_handle h;
      int rc = syncd_partial_allreduce_async(c, &t, SYNCD_SUM, SYNCD_PARTIAL_SOLO, 0, &h);
      if (rc == SYNCD_OK) rc = syncd_wait(c, h, 30'000);
      CHILD_CHECK(rc != SYNCD_OK && strstr(syncd_last_error(), "process set") != nullptr, "%s: %s", syncd_status_name(rc),
                  syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  munmap(b, sizeof(Board));
}

// Bad arguments are refused by the client before anything is sent.
TEST(PartialNodes, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  Cluster cluster(kNodes, 1, {"--cores", "none", "--log-level", "warn"});
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int, int) {
    float v = 1;
    int64_t one = 1;
    syncd_tensor t{"grad", &v, SYNCD_FLOAT32, 1, &one, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_partial_allreduce_async(c, &t, SYNCD_MAX, SYNCD_PARTIAL_SOLO, 0, &h) == SYNCD_ERR_INVALID, "max");
    CHILD_CHECK(syncd_partial_allreduce_async(c, &t, SYNCD_SUM, 7, 0, &h) == SYNCD_ERR_INVALID &&
                    strstr(syncd_last_error(), "tensor 'grad'") != nullptr,
                "mode: %s", syncd_last_error());
    CHILD_CHECK(syncd_partial_allreduce_async(c, &t, SYNCD_SUM, SYNCD_PARTIAL_SOLO, 3, &h) == SYNCD_ERR_INVALID &&
                    strstr(syncd_last_error(), "quorum 3") != nullptr,
                "quorum: %s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

// A rank killed while the others train with majority rounds: every survivor's next call (or the
// one it waits in) fails within a few seconds with an error naming the rank; nobody hangs.
TEST(PartialNodes, ARankThatDiesDuringPartialTrainingEndsTheJobWithAnErrorNamingIt) {
  Cluster cluster(kNodes, kLocal, {"--cores", "none", "--log-level", "error"});
  Board* b = MapBoard();
  ASSERT_NE(b, nullptr);
  auto st = RunClusterRanks(cluster, [b](syncd_client* c, int rank, int) {
    syncd_partial_info info{};
    for (int k = 0;; ++k) {
      if (rank == 3 && k == 6) {
        b->exited = 1;
        _exit(9);  // dies, no shutdown
      }
      if (k % 2 == 0) usleep(500 * (rank + 1));
      const double t0 = NowS();
      const int rc = Call(c, rank, rank, SYNCD_PARTIAL_MAJORITY, 0, b, &info);
      if (rc == SYNCD_OK) {
        CHILD_CHECK(k < 5000, "5000 calls and no error");
        continue;
      }
      CHILD_CHECK(b->exited == 1, "failed at call %d before rank 3 died: %s", k, syncd_last_error());
      CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST && strstr(syncd_last_error(), "rank 3") != nullptr, "%s: %s",
                  syncd_status_name(rc), syncd_last_error());
      CHILD_CHECK(NowS() - t0 < 10, "the error took %.1f s", NowS() - t0);
      return 0;
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r == 3) {
      EXPECT_TRUE(WIFEXITED(st[3]) && WEXITSTATUS(st[3]) == 9) << st[3];
    } else {
      EXPECT_TRUE(WIFEXITED(st[size_t(r)]) && WEXITSTATUS(st[size_t(r)]) == 0) << "rank " << r << ": " << st[size_t(r)];
    }
  }
  munmap(b, sizeof(Board));
}

}  // namespace
}  // namespace syncd::testing
