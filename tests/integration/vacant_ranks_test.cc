// A job that starts with vacant slots (syncd --vacant-ranks, as syncrun --max-np starts it): the
// ranks that start train on without the others from their first collective, under either elastic
// policy, with nothing failed, logged or counted as a loss; ranks that attach in the vacant slots
// later are new ranks of the job (syncd_replaces_lost_rank says so) and from their first
// collective every sum counts every rank once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

constexpr int kStepsEach = 8;  // steps with two ranks, then with four

// Rank `rank` of a 2 x 2 job whose ranks 1 and 3 start vacant. The first two (`late` false) train
// kStepsEach steps as the only ranks, then until four ranks are there (the allgather of the ranks
// alive, as hvd.elastic's commit), then kStepsEach steps with four; the late ones start with that
// allgather. Every sum must count the ranks there exactly once.
int TrainFromVacantSlots(const std::string& dir, int rank, bool late) {
  syncd_client* c = AttachAs(dir, rank, 4, rank % 2, 2);
  CHILD_CHECK(c != nullptr, "rank %d: attach: %s", rank, syncd_last_error());
  int replaces = -1;
  CHILD_CHECK(syncd_replaces_lost_rank(c, &replaces) == SYNCD_OK && replaces == (late ? 1 : 0),
              "rank %d: replaces a lost rank: %d", rank, replaces);
  const std::vector<int64_t> layers = {1000, 3};
  std::vector<int32_t*> grads;
  for (int64_t count : layers) grads.push_back(static_cast<int32_t*>(syncd_alloc(c, uint64_t(count) * 4)));
  const int64_t avg_count = 4;
  auto* avg = static_cast<float*>(syncd_alloc(c, avg_count * 4));
  int members = late ? 0 : 2, steps_of_four = 0;
  for (int step = 0; steps_of_four < kStepsEach; ++step) {
    CHILD_CHECK(step < 100'000, "rank %d: the late ranks never joined", rank);
    if (late || step >= kStepsEach) {
      members = AliveRanks(c, rank);
      CHILD_CHECK(members >= 2 && members <= 4, "rank %d step %d: %d ranks alive: %s", rank, step, members,
                  syncd_last_error());
    }
    std::vector<syncd_handle> hs;
    CHILD_CHECK(SubmitPowerOfTwoStep(c, rank, layers, grads, avg, avg_count, &hs) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
    for (syncd_handle h : hs)
      CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK, "rank %d step %d: %s", rank, step, syncd_last_error());
    // Ranks 0 and 2 alone: 1 + 4; then 2 or 8 more as rank 1 or 3 joins; all four: 15.
    const int32_t sum = grads[0][0];
    const bool counted = members == 2 ? sum == 5 : members == 3 ? sum == 7 || sum == 13 : sum == 15;
    for (size_t l = 0; l < layers.size(); ++l)
      CHILD_CHECK(counted && grads[l][0] == sum && grads[l][layers[l] - 1] == sum,
                  "rank %d step %d grad.%zu: %d with %d ranks alive", rank, step, l, grads[l][0], members);
    // AVERAGE divides by the tensors summed: vacant slots are not ranks.
    CHILD_CHECK(std::fabs(avg[0] - float(sum) / float(members)) < 1e-5f, "rank %d step %d: average %g, not %g", rank,
                step, double(avg[0]), double(sum) / members);
    steps_of_four += members == 4;
  }
  syncd_shutdown(c);
  return 0;
}

class VacantRanks : public ::testing::TestWithParam<const char*> {};

TEST_P(VacantRanks, TheJobStartsWithoutThemAndTakesRanksThatAttachInThem) {
  Cluster cluster(2, 2, {"--on-loss", GetParam(), "--vacant-ranks", "1,3", "--log-level", "warn"});
  NextJob();
  std::vector<pid_t> pids;
  for (int r : {0, 2}) {
    const std::string dir = cluster.node(r / 2).run_dir();
    pids.push_back(Spawn([=] { return TrainFromVacantSlots(dir, r, false); }));
  }
  const std::string before = SyncctlStatus(cluster.node(1).run_dir());
  EXPECT_TRUE(Contains(before, "vacant")) << before;
  EXPECT_FALSE(Contains(before, "LOST")) << before;
  usleep(300'000);  // the first two train alone a while
  for (int r : {1, 3}) {
    const std::string dir = cluster.node(r / 2).run_dir();
    pids.push_back(Spawn([=] { return TrainFromVacantSlots(dir, r, true); }));
  }
  for (pid_t p : pids) {
    const int s = WaitChild(p, 60'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  const std::string after = SyncctlStatus(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(after, "rank 1 joined: a new rank attached in its vacant slot")) << after;
  EXPECT_FALSE(Contains(after, "went on without")) << after;  // the ranks left at the end, none before
}

INSTANTIATE_TEST_SUITE_P(Policies, VacantRanks, ::testing::Values("continue", "restore"));

}  // namespace
}  // namespace syncd::testing
