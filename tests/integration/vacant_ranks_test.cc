// A job that starts with vacant slots (syncd --vacant-ranks, as syncrun --max-np starts it): the
// ranks that start train on without the others from their first collective, under either elastic
// policy, with nothing failed, logged or counted as a loss; ranks that attach in the vacant slots
// later are new ranks of the job (syncd_replaces_lost_rank says so) and from their first
// collective every sum counts every rank once. A node whose every slot is vacant joins the job's
// collectives when its first rank attaches (under --coord topo too).
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

// Which slots of a 2 x 2 job start vacant: ranks 1 and 3 (one on each node), or 2 and 3 (node 1
// wholly vacant: its daemon starts the job without a rank, from --job-id, and the job takes the
// node into its collectives when rank 2 attaches there, a membership change every rank
// acknowledges, as after a lost node's return).
// Under --coord topo the ranks that start register the training graph; a node whose every slot
// is vacant gets the plan from the others when the registration runs, stands in for the plan's
// groups, and once it joins, its ranks' gradients run in the plan's groups too.
struct VacantCase {
  const char* policy;
  int late[2];
  const char* coord = "negotiate";
  bool node_joins() const { return late[0] / 2 == late[1] / 2; }
  bool topo() const { return std::string(coord) == "topo"; }
};

std::string VacantCaseName(const ::testing::TestParamInfo<VacantCase>& info) {
  return std::string(info.param.policy) + (info.param.node_joins() ? "_node1_vacant" : "_rank1_rank3_vacant") +
         (info.param.topo() ? "_topo" : "");
}

// Rank `rank` of the job. The two that start (`late` false) train kStepsEach steps as the only
// ranks, then until four ranks are there (the allgather of the ranks alive, as hvd.elastic's
// commit), then kStepsEach steps with four; the late ones start with that allgather. Every sum
// must count the ranks there exactly once. Where the node joins, what is in flight then fails
// once on every rank (RANK_LOST), which acknowledges the new membership and goes on.
int TrainFromVacantSlots(const std::string& dir, const VacantCase& k, int rank, bool late) {
  syncd_client* c = AttachAs(dir, rank, 4, rank % 2, 2);
  CHILD_CHECK(c != nullptr, "rank %d: attach: %s", rank, syncd_last_error());
  int replaces = -1;
  CHILD_CHECK(syncd_replaces_lost_rank(c, &replaces) == SYNCD_OK && replaces == (late ? 1 : 0),
              "rank %d: replaces a lost rank: %d", rank, replaces);
  const std::vector<int64_t> layers = {1000, 3};
  if (k.topo() && !late) {  // a late rank finds the plan registered (the daemons hold it)
    ModelGraph model(layers);
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: register: %s", rank,
                syncd_last_error());
  }
  std::vector<int32_t*> grads;
  for (int64_t count : layers) grads.push_back(static_cast<int32_t*>(syncd_alloc(c, uint64_t(count) * 4)));
  const int64_t avg_count = 4;
  auto* avg = static_cast<float*>(syncd_alloc(c, avg_count * 4));
  const int32_t full = 15, two = full - (1 << k.late[0]) - (1 << k.late[1]);
  int members = late ? 0 : 2, steps_of_four = 0, membership_changes = 0;
  for (int step = 0; steps_of_four < kStepsEach; ++step) {
    CHILD_CHECK(step < 100'000, "rank %d: the late ranks never joined", rank);
    if (late || step >= kStepsEach) {
      members = k.node_joins() ? MembersOnceAcknowledged(c, rank) : AliveRanks(c, rank);
      CHILD_CHECK(members >= 2 && members <= 4, "rank %d step %d: %d ranks alive: %s", rank, step, members,
                  syncd_last_error());
    }
    std::vector<syncd_handle> hs;
    CHILD_CHECK(SubmitPowerOfTwoStep(c, rank, layers, grads, avg, avg_count, &hs) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
    bool failed = false;
    for (syncd_handle h : hs) {
      const int rc = syncd_wait(c, h, 30'000);
      failed |= rc == SYNCD_ERR_RANK_LOST && k.node_joins();
      CHILD_CHECK(rc == SYNCD_OK || failed, "rank %d step %d: %s", rank, step, syncd_last_error());
    }
    if (failed) {  // the node joined under this step: once, before every rank is there
      CHILD_CHECK(++membership_changes == 1 && steps_of_four == 0, "rank %d step %d: failed again: %s", rank, step,
                  syncd_last_error());
      uint32_t membership = 0;
      CHILD_CHECK(syncd_acknowledge_membership(c, &membership) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
      continue;
    }
    // The first two alone; then one late rank's bit more; all four: 15.
    const int32_t sum = grads[0][0];
    const bool counted = members == 2   ? sum == two
                         : members == 3 ? sum == two + (1 << k.late[0]) || sum == two + (1 << k.late[1])
                                        : sum == full;
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

class VacantRanks : public ::testing::TestWithParam<VacantCase> {};

TEST_P(VacantRanks, TheJobStartsWithoutThemAndTakesRanksThatAttachInThem) {
  const VacantCase k = GetParam();
  NextJob();
  char job[32];
  snprintf(job, sizeof(job), "%#llx", (unsigned long long)CurrentJobId());
  const std::string vacant = std::to_string(k.late[0]) + "," + std::to_string(k.late[1]);
  Cluster cluster(2, 2, {"--on-loss", k.policy, "--vacant-ranks", vacant, "--job-id", job, "--coord", k.coord,
                         "--log-level", "warn"});
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    if (r == k.late[0] || r == k.late[1]) continue;
    const std::string dir = cluster.node(r / 2).run_dir();
    pids.push_back(Spawn([=] { return TrainFromVacantSlots(dir, k, r, false); }));
  }
  const std::string before = SyncctlStatus(cluster.node(1).run_dir());
  EXPECT_TRUE(Contains(before, "vacant")) << before;
  EXPECT_FALSE(Contains(before, "LOST")) << before;
  usleep(300'000);  // the first two train alone a while
  if (k.topo() && k.node_joins()) {  // node 1, with no rank yet, got the plan and stands in for its groups
    std::string table;
    for (int i = 0; i < 50 && PlanGroupsRun(table) < 1; ++i, usleep(100'000))
      table = SyncctlStatus(cluster.node(1).run_dir());
    EXPECT_GE(PlanGroupsRun(table), 1) << "node 1 before a rank attached there\n" << table;
  }
  for (int r : k.late) {
    const std::string dir = cluster.node(r / 2).run_dir();
    pids.push_back(Spawn([=] { return TrainFromVacantSlots(dir, k, r, true); }));
  }
  for (pid_t p : pids) {
    const int s = WaitChild(p, 60'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
  }
  const std::string after = SyncctlStatus(cluster.node(0).run_dir());
  if (k.node_joins()) {
    EXPECT_TRUE(Contains(after, "node 1 joins: a new rank attached in a vacant slot there")) << after;
  } else {
    EXPECT_TRUE(Contains(after, "rank 1 joined: a new rank attached in its vacant slot")) << after;
  }
  EXPECT_FALSE(Contains(after, "went on without")) << after;  // the ranks left at the end, none before
  EXPECT_FALSE(Contains(after, "is back")) << after;
  // Every node ran the plan's groups, at least for each step with every rank.
  for (int node = 0; node < 2 && k.topo(); ++node) {
    const std::string table = SyncctlStatus(cluster.node(node).run_dir());
    EXPECT_GE(PlanGroupsRun(table), kStepsEach) << "node " << node << "\n" << table;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, VacantRanks,
                         ::testing::Values(VacantCase{"continue", {1, 3}}, VacantCase{"restore", {1, 3}},
                                           VacantCase{"continue", {2, 3}}, VacantCase{"restore", {2, 3}},
                                           VacantCase{"continue", {1, 3}, "topo"},
                                           VacantCase{"continue", {2, 3}, "topo"},
                                           VacantCase{"restore", {2, 3}, "topo"}),
                         VacantCaseName);

}  // namespace
}  // namespace syncd::testing
