// Partial allreduce (eager-SGD) through a real daemon and real clients: solo rounds run while the
// other ranks are stopped (SIGSTOP), a stopped rank's next call returns at once with the result
// of the round it was late for, and nothing anybody contributed is lost. Across nodes: partial_nodes_test.cc.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

constexpr int kRanks = 4;
constexpr int kMaxRounds = 256;

// Shared by the forked ranks (an anonymous shared mapping made before they fork).
struct Board {
  std::atomic<int> pids[kRanks];
  std::atomic<int> resumed;  // stopped ranks that made their first call since
  std::atomic<int> seen[kMaxRounds];  // 1 once some rank got the round's result
  float result[kMaxRounds][kRanks];
};

bool Stopped(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == nullptr) return false;
  int p = 0;
  char comm[256], state = 0;
  const bool ok = fscanf(f, "%d %255s %c", &p, comm, &state) == 3;
  fclose(f);
  return ok && state == 'T';
}

// One call: rank `rank`'s one-hot contribution (1 at its index), Sum, solo.
int Call(syncd_client* c, int rank, Board* b, syncd_partial_info* info) {
  float v[kRanks] = {};
  v[rank] = 1;
  int64_t n = kRanks;
  syncd_tensor t{"grad", v, SYNCD_FLOAT32, 1, &n, 0};
  syncd_handle h;
  int rc = syncd_partial_allreduce_async(c, &t, SYNCD_SUM, SYNCD_PARTIAL_SOLO, 0, &h);
  if (rc == SYNCD_OK) rc = syncd_partial_wait(c, h, 30'000, info);
  if (rc != SYNCD_OK) return rc;
  if (info->round >= kMaxRounds) return -1;
  for (int i = 0; i < kRanks; ++i) b->result[info->round][i] = v[i];
  b->seen[info->round] = 1;
  return SYNCD_OK;
}

int Barrier(syncd_client* c) {
  syncd_handle h;
  int rc = syncd_barrier_async(c, &h);
  return rc == SYNCD_OK ? syncd_wait(c, h, 30'000) : rc;
}

TEST(Partial, SoloRunsWhileOthersAreStoppedTheirNextCallReturnsAtOnceAndNothingIsLost) {
  Daemon d(kRanks, {"--cores", "none", "--log-level", "warn"});
  auto* b = static_cast<Board*>(mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(b, MAP_FAILED);
  constexpr int kSteps = 20, kAlone = 5;
  auto st = RunRanks(d.run_dir(), kRanks, [b](syncd_client* c, int rank, int) {
    syncd_partial_info info{};
    int calls = 0;
    if (rank != 0) {
      b->pids[rank] = getpid();
      raise(SIGSTOP);  // rank 0 runs its rounds meanwhile, then continues us
      const double t0 = NowS();
      CHILD_CHECK(Call(c, rank, b, &info) == SYNCD_OK, "first call after SIGCONT: %s", syncd_last_error());
      ++calls;
      CHILD_CHECK(NowS() - t0 < 1.0, "a late call waited %.3f s", NowS() - t0);
      // Its first call is for round 1 (a rank's k-th call is for round k), which ran without it:
      // it gets round 1's result, as rank 0 did, so the models stay the same.
      CHILD_CHECK(info.fresh == 0 && info.round == 1, "late call: round %llu fresh %d", (unsigned long long)info.round,
                  info.fresh);
      for (int i = 0; i < kRanks; ++i)
        CHILD_CHECK(b->result[1][i] == (i == 0 ? 1.f : 0.f), "round 1's result [%d]", i);
      ++b->resumed;
      while (b->resumed < kRanks - 1) usleep(1000);  // no round runs before every stopped rank made its first call
    } else {
      for (int r = 1; r < kRanks; ++r)
        while (b->pids[r] == 0 || !Stopped(b->pids[r])) usleep(1000);
      for (int k = 1; k <= kAlone; ++k) {
        const double t0 = NowS();
        CHILD_CHECK(Call(c, rank, b, &info) == SYNCD_OK, "solo round %d: %s", k, syncd_last_error());
        ++calls;
        CHILD_CHECK(NowS() - t0 < 1.0, "solo round %d waited %.3f s for stopped ranks", k, NowS() - t0);
        CHILD_CHECK(info.round == uint64_t(k) && info.nap == 1 && info.fresh == 1 && info.initiator == 0,
                    "round %llu nap %d fresh %d initiator %d", (unsigned long long)info.round, info.nap, info.fresh,
                    info.initiator);
      }
      for (int r = 1; r < kRanks; ++r) kill(b->pids[r], SIGCONT);
      while (b->resumed < kRanks - 1) usleep(1000);  // their first calls are late for round 1
    }
    for (int k = 0; k < kSteps; ++k) {
      if ((k + rank) % 3 == 0) usleep(2000);  // uneven arrivals
      CHILD_CHECK(Call(c, rank, b, &info) == SYNCD_OK, "step %d: %s", k, syncd_last_error());
      ++calls;
    }
    CHILD_CHECK(Barrier(c) == SYNCD_OK, "barrier: %s", syncd_last_error());
    // Every rank has made all its calls. Rank 0's next call is late if rounds ran since its last
    // result; the one after is fresh (nobody else calls) and takes what is left.
    if (rank == 0) {
      for (int k = 0; k == 0 || (k < 2 && info.fresh == 0); ++k) {
        CHILD_CHECK(Call(c, rank, b, &info) == SYNCD_OK, "last round: %s", syncd_last_error());
        ++calls;
      }
      CHILD_CHECK(info.fresh == 1, "two calls alone and still not fresh (round %llu)", (unsigned long long)info.round);
    }
    CHILD_CHECK(Barrier(c) == SYNCD_OK, "barrier: %s", syncd_last_error());
    // The rounds add up to every contribution: rank r's column is its number of calls.
    float sum = 0;
    int rounds = 0;
    for (int r = 1; r < kMaxRounds && b->seen[r]; ++r, ++rounds) sum += b->result[r][rank];
    for (int r = rounds + 1; r < kMaxRounds; ++r) CHILD_CHECK(!b->seen[r], "round %d seen after a gap at %d", r, rounds + 1);
    CHILD_CHECK(sum == float(calls), "rank %d: rounds sum to %g of its %d contributions (%d rounds)", rank, sum, calls,
                rounds);
    return 0;
  });
  ExpectAllSucceeded(st);
  munmap(b, sizeof(Board));
}

// Majority rounds whose initiator never calls: the waiting rank is not left waiting for ever, the
// stall inspector reports it and --stall-shutdown-s ends the job naming the tensor and the rank.
TEST(Partial, AMajorityRoundWhoseInitiatorNeverComesEndsAsAStallNamingIt) {
  Daemon d(2, {"--cores", "none", "--log-level", "error", "--stall-warning-s", "1", "--stall-shutdown-s", "2"});
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    if (rank == 1) {  // never calls the partial allreduce; stays attached
      sleep(6);
      return 0;
    }
    float v = 1;
    int64_t one = 1;
    syncd_tensor t{"grad", &v, SYNCD_FLOAT32, 1, &one, 0};
    const double t0 = NowS();
    for (int k = 0; k < 1000; ++k) {  // rounds initiated by rank 0 run; the first by rank 1 stalls
      syncd_handle h;
      syncd_partial_info info{};
      CHILD_CHECK(syncd_partial_allreduce_async(c, &t, SYNCD_SUM, SYNCD_PARTIAL_MAJORITY, 0, &h) == SYNCD_OK, "%s",
                  syncd_last_error());
      const int rc = syncd_partial_wait(c, h, 30'000, &info);
      if (rc == SYNCD_OK) continue;
      CHILD_CHECK(rc == SYNCD_ERR_STALLED && strstr(syncd_last_error(), "tensor 'grad (partial round") != nullptr &&
                      strstr(syncd_last_error(), "for rank 1") != nullptr,
                  "%s: %s", syncd_status_name(rc), syncd_last_error());
      CHILD_CHECK(NowS() - t0 < 10, "the stall took %.1f s to end the job", NowS() - t0);
      return 0;
    }
    CHILD_CHECK(false, "1000 majority rounds of 2 ranks ran without rank 1 as an initiator");
    return 1;
  });
  ExpectAllSucceeded(st);
}

}  // namespace
}  // namespace syncd::testing
