// Stalls end the job: ranks that submit names that never match, or a node whose ranks never
// come, fail every rank after --stall-shutdown-s with the tensor and the missing ranks named,
// and the daemons serve the next job.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

constexpr double kShutdownS = 3;

// Submits `name` and waits for it (much longer than the shutdown): it must fail as a stall
// within --stall-shutdown-s + 2 s, with every string of `expect` in the message (the seconds
// waited are not among them: stalls are checked once a second).
int ExpectStalledOut(syncd_client* c, int rank, const std::string& name, const std::vector<std::string>& expect) {
  int32_t v = 1;
  int64_t shape = 1;
  syncd_tensor t{name.c_str(), &v, SYNCD_INT32, 1, &shape, 0};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
  const double t0 = NowS();
  const int rc = syncd_wait(c, h, 30'000);
  const double waited = NowS() - t0;
  CHILD_CHECK(rc == SYNCD_ERR_STALLED, "rank %d: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
  CHILD_CHECK(waited < kShutdownS + 2, "rank %d: the job ended %.1f s after the submission", rank, waited);
  for (const std::string& e : expect) CHILD_CHECK(Contains(syncd_last_error(), e), "rank %d: no '%s' in: %s", rank, e.c_str(), syncd_last_error());
  // The job is over: the next call fails at once, saying why.
  CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 2'000) == SYNCD_ERR_STALLED, "rank %d, next call: %s", rank, syncd_last_error());
  return 0;
}

const std::vector<std::string> kFlags = {"--stall-warning-s", "1", "--stall-shutdown-s", "3"};

TEST(Stalls, RanksWhoseNamesNeverMatchEndWithinTheShutdownTimeNamingTensorAndRanks) {
  Daemon d(2, kFlags);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    // Each rank waits for the other's name: both tensors and both ranks are named.
    return ExpectStalledOut(c, rank, rank == 0 ? "grad.a" : "grad.b",
                            {"--stall-shutdown-s 3", "tensor 'grad.a' has waited ", "s for rank 1 (submitted by rank 0)",
                             "tensor 'grad.b' has waited ", "s for rank 0 (submitted by rank 1)",
                             // How long each missing rank of the node has been away from syncd.
                             "(submitted by rank 0) [rank 1 last called syncd ",
                             "(submitted by rank 1) [rank 0 last called syncd "});
  });
  ExpectAllSucceeded(st);
  EXPECT_TRUE(Contains(d.Log(), "the job was shut down")) << d.Log();
  ExpectDaemonServes(d, 2);
}

TEST(Stalls, AcrossNodesEveryRankFailsAsAStallNamingTheMissingRank) {
  Cluster cluster(2, 1, kFlags);
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    // Rank 1's name is 1.5 s younger: it must be named too when rank 0's passes the shutdown time.
    if (rank == 1) usleep(1'500'000);
    std::vector<std::string> expect = {"tensor 'grad.a' has waited ", "s for rank 1 (submitted by rank 0)",
                                       "tensor 'grad.b' has waited ", "s for rank 0 (submitted by rank 1)"};
    // Node 0 ends the job: its message says how long rank 1, on node 1, has been away from syncd
    // (from node 1's health reports).
    if (rank == 0) expect.push_back("(submitted by rank 0) [rank 1 on node 1 last called syncd ");
    return ExpectStalledOut(c, rank, rank == 0 ? "grad.a" : "grad.b", expect);
  });
  ExpectAllSucceeded(st);
  auto again = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    int32_t v = rank + 1;
    int64_t shape = 1;
    syncd_tensor t{"next.job", &v, SYNCD_INT32, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK && v == 3, "%s (%d)", syncd_last_error(), v);
    return 0;
  });
  ExpectAllSucceeded(again);
}

// A node whose ranks never start the job: the ranks that did are not left waiting for ever.
TEST(Stalls, ANodeWhoseRanksNeverComeEndsTheJobOnTheOthers) {
  Cluster cluster(2, 1, kFlags);
  NextJob();
  const std::string dir = cluster.node(0).run_dir();
  pid_t rank0 = Spawn([&] {
    syncd_client* c = AttachAs(dir, 0, 2, 0, 1);
    CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
    return ExpectStalledOut(c, 0, "grad", {"tensor 'grad' has waited ", "s for rank 1 (submitted by rank 0)"});
  });
  const int s = WaitChild(rank0, 30'000);
  EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "status " << s;
}

}  // namespace
}  // namespace syncd::testing
