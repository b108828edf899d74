#include "daemon/control/job_registry.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

JobAdmission Job(uint64_t id, uint32_t uid, std::optional<uint32_t> gid = std::nullopt, uint32_t weight = 1) {
  JobAdmission j;
  j.job = id;
  j.uid = uid;
  j.gid = gid;
  j.weight = weight;
  return j;
}

TEST(JobRegistry, AdmitsARegisteredJobsOwnUserAndGroupOnly) {
  JobRegistry r;
  ASSERT_TRUE(r.Add(Job(12, 1000)).ok());
  ASSERT_TRUE(r.Add(Job(13, 1001, 50)).ok());
  EXPECT_TRUE(r.Admit(12, 1000, 7).ok()) << "any group of the user when none was registered";
  EXPECT_TRUE(r.Admit(13, 1001, 50).ok());
  const Status other_user = r.Admit(12, 1001, 7);
  EXPECT_EQ(other_user.code(), SYNCD_ERR_REFUSED);
  EXPECT_EQ(other_user.message(), "runs as uid 1001, but job 12 is registered for uid 1000");
  EXPECT_EQ(r.Admit(13, 1001, 51).message(), "runs as gid 51, but job 13 is registered for gid 50");
  EXPECT_EQ(r.Admit(14, 1000, 7).code(), SYNCD_ERR_REFUSED);
  EXPECT_NE(r.Admit(14, 1000, 7).message().find("job 14, which is not registered"), std::string::npos);
  EXPECT_NE(r.Admit(0, 1000, 7).message().find("names no job"), std::string::npos);
}

TEST(JobRegistry, RegisteringAgainUpdatesTheWeightButNeverTheUser) {
  JobRegistry r;
  ASSERT_TRUE(r.Add(Job(12, 1000, std::nullopt, 1)).ok());
  ASSERT_TRUE(r.Add(Job(12, 1000, std::nullopt, 3)).ok()) << "a prolog that runs twice";
  EXPECT_EQ(r.Find(12)->weight, 3u);
  const Status taken = r.Add(Job(12, 1001));
  EXPECT_EQ(taken.code(), SYNCD_ERR_REFUSED);
  EXPECT_NE(taken.message().find("registered already, for uid 1000"), std::string::npos);
  EXPECT_FALSE(r.Add(Job(12, 1000, 5)).ok()) << "nor its group";
  EXPECT_EQ(r.Find(12)->uid, 1000u);
  EXPECT_EQ(r.Add(Job(0, 1000)).code(), SYNCD_ERR_INVALID);
  EXPECT_EQ(r.Add(Job(15, 1000, std::nullopt, 0)).code(), SYNCD_ERR_INVALID);
}

TEST(JobRegistry, AJobsOwnSettingsAreAJobsValidOnesAndStayAsRegistered) {
  JobRegistry r;
  JobAdmission j = Job(12, 1000);
  j.settings = {{"coord", "topo"}, {"on-loss", "continue"}};
  ASSERT_TRUE(r.Add(j).ok());
  EXPECT_EQ(r.Find(12)->settings.at("coord"), "topo");
  ASSERT_TRUE(r.Add(j).ok()) << "a prolog that runs twice";
  JobAdmission other = j;
  other.settings["coord"] = "nbcs";
  const Status changed = r.Add(other);
  EXPECT_EQ(changed.code(), SYNCD_ERR_REFUSED);
  EXPECT_EQ(changed.message(), "job 12 is registered already with other settings (--coord topo --on-loss continue); "
                               "remove it first to change them");
  JobAdmission bad = Job(13, 1000);
  bad.settings = {{"coord", "fast"}};
  EXPECT_EQ(r.Add(bad).message(), "job 13: coord: unknown mode 'fast' (available: negotiate, gs, nbcs, topo)");
  bad.settings = {{"nodes", "4"}};
  EXPECT_NE(r.Add(bad).message().find("job 13: nodes is not a setting of one job"), std::string::npos);
  EXPECT_FALSE(r.Find(13).has_value());
  // Its config: the daemon's with the job's over it.
  Config daemon;
  daemon.stall_shutdown_s = 30;
  StatusOr<Config> c = JobConfig(daemon, j.settings);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->coord, abi::CoordMode::kTopo);
  EXPECT_EQ(c->on_loss, OnLoss::kContinue);
  EXPECT_EQ(c->stall_shutdown_s, 30u);
}

TEST(JobRegistry, AJobOfSeveralNodesNeedsItsPlaceARendezvousAndATokenAndKeepsThem) {
  JobRegistry r;
  JobAdmission j = Job(20, 1000);
  j.nodes = 2;
  j.node_rank = 2;
  EXPECT_EQ(r.Add(j).message(), "job 20: node rank 2 is not one of its 2 nodes (0 to 1)");
  j.node_rank = 1;
  EXPECT_NE(r.Add(j).message().find("give the rendezvous its first node serves"), std::string::npos);
  j.rendezvous = "node0:29520";
  EXPECT_NE(r.Add(j).message().find("give its token"), std::string::npos);
  j.token = "t";
  ASSERT_TRUE(r.Add(j).ok());
  EXPECT_EQ(r.Find(20)->nodes, 2u);
  EXPECT_EQ(r.Find(20)->rendezvous, "node0:29520");
  j.weight = 4;
  EXPECT_TRUE(r.Add(j).ok()) << "again, the same nodes: the weight";
  EXPECT_EQ(r.Find(20)->weight, 4u);
  j.node_rank = 0;
  const Status moved = r.Add(j);
  EXPECT_EQ(moved.code(), SYNCD_ERR_REFUSED);
  EXPECT_NE(moved.message().find("registered already as node 1 of 2 at node0:29520"), std::string::npos) << moved.message();
  JobAdmission alone = Job(21, 1000);
  alone.nodes = 0;  // as a request without nodes says it
  ASSERT_TRUE(r.Add(alone).ok());
  EXPECT_EQ(r.Find(21)->nodes, 1u);
}

TEST(JobRegistry, ADrainingJobAdmitsNoNewRankAndTellsOnlyItsOwnUser) {
  JobRegistry r;
  ASSERT_TRUE(r.Add(Job(12, 1000)).ok());
  ASSERT_TRUE(r.Drain(12).ok());
  EXPECT_TRUE(r.Find(12)->draining);
  const Status own = r.Admit(12, 1000, 7);
  EXPECT_EQ(own.code(), SYNCD_ERR_REFUSED);
  EXPECT_NE(own.message().find("job 12, which is draining from this node's daemon (syncctl job drain)"), std::string::npos)
      << own.message();
  EXPECT_EQ(r.Admit(12, 1001, 7).message(), "runs as uid 1001, but job 12 is registered for uid 1000")
      << "another user learns nothing of the drain";
  EXPECT_EQ(r.Drain(13).code(), SYNCD_ERR_INVALID);
}

TEST(JobRegistry, ARemovedJobAdmitsNoOneAndRemovingItTwiceSaysSo) {
  JobRegistry r;
  ASSERT_TRUE(r.Add(Job(12, 1000)).ok());
  ASSERT_TRUE(r.Add(Job(11, 1000)).ok());
  ASSERT_EQ(r.List().size(), 2u);
  EXPECT_EQ(r.List()[0].job, 11u) << "by id";
  EXPECT_GT(r.List()[0].added_unix_s, 0);
  ASSERT_TRUE(r.Remove(12).ok());
  EXPECT_EQ(r.Admit(12, 1000, 7).code(), SYNCD_ERR_REFUSED);
  const Status again = r.Remove(12);
  EXPECT_EQ(again.code(), SYNCD_ERR_INVALID);
  EXPECT_EQ(again.message(), "job 12 is not registered with this daemon");
  EXPECT_EQ(r.List().size(), 1u);
}

}  // namespace
}  // namespace syncd
