// Elastic jobs that lose a node (--on-loss continue and restore): a node's daemon SIGKILLed at a
// random moment while every rank trains (node 0, the coordinator, included). The ranks of the
// nodes left see what was in flight fail (RANK_LOST, naming the node), acknowledge the job's new
// membership as hvd.elastic.run does, and go on: their next complete step comes within 2 s of the
// kill (continue) or 5 s (restore), and from then on every collective sums exactly the ranks left
// (each rank adds its own power of two) and averages over them. The lost node's ranks learn that
// their daemon is gone; a join, a step after it, a final join and a process set of the ranks left
// complete among them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/model_graph.h"

namespace syncd::testing {
namespace {

struct Shared {
  std::atomic<double> t_kill{0};
  std::atomic<int> steps[8];
  std::atomic<double> recovered_s[8];  // kill to the first complete step without the lost node
};

struct NodeCase {
  const char* policy;
  const char* coord;
  int nodes, local, lost;
  // Instead of its daemon being killed, the node's ranks leave mid-job (clean exits, as Python's
  // on an exception: syncd.torch says goodbye at exit) while the other nodes' ranks train on.
  bool leave = false;
};
std::string NodeCaseName(const ::testing::TestParamInfo<NodeCase>& info) {
  const NodeCase& k = info.param;
  return std::string(k.policy) + "_" + k.coord + "_" + std::to_string(k.nodes) + "x" + std::to_string(k.local) +
         "_node" + std::to_string(k.lost) + (k.leave ? "_ranks_leave" : "");
}

const std::vector<int64_t> kLayers = {1000, 3};  // int32 gradients, the TOPO plan's
constexpr int64_t kAverageCount = 5;
constexpr int kStepsAfterLoss = 15;
constexpr int kStepsBeforeLeaving = 5;  // NodeCase::leave

int TrainThroughANodeLoss(const std::string& dir, const NodeCase& k, int rank, bool topo, Shared* shared) {
  const int n = k.nodes * k.local;
  syncd_client* c = AttachAs(dir, rank, n, rank % k.local, k.local);
  CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
  if (topo) {
    ModelGraph model(kLayers);
    CHILD_CHECK(syncd_register_graph(c, &model.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: %s", rank,
                syncd_last_error());
  }
  const bool doomed = rank / k.local == k.lost;  // its daemon is the one killed
  std::vector<int32_t*> grads;
  for (int64_t count : kLayers) grads.push_back(static_cast<int32_t*>(syncd_alloc(c, uint64_t(count) * 4)));
  auto* avg = static_cast<float*>(syncd_alloc(c, kAverageCount * 4));
  int32_t full = (1 << n) - 1, left = full;
  for (int r = k.lost * k.local; r < (k.lost + 1) * k.local; ++r) left -= 1 << r;
  const int ranks_left = n - k.local;
  const double t_start = NowS();
  int complete_without = 0, failures = 0;
  for (int step = 0; complete_without < kStepsAfterLoss; ++step) {
    CHILD_CHECK(NowS() - t_start < 60, "rank %d: not %d steps without node %d in 60 s (step %d)", rank,
                kStepsAfterLoss, k.lost, step);
    shared->steps[rank].store(step);
    if (doomed && k.leave && step == kStepsBeforeLeaving) {
      syncd_shutdown(c);
      double t = 0, now = NowS();  // the last of the node's ranks to leave
      while (!shared->t_kill.compare_exchange_weak(t, std::max(t, now))) {
      }
      return 0;
    }
    std::vector<syncd_handle> hs;
    int rc = SubmitPowerOfTwoStep(c, rank, kLayers, grads, avg, kAverageCount, &hs);
    if (doomed && rc == SYNCD_ERR_DAEMON_LOST) return 0;
    CHILD_CHECK(rc == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
    bool failed = false;
    std::string why;
    for (syncd_handle x : hs) {
      rc = syncd_wait(c, x, 30'000);
      if (doomed && rc == SYNCD_ERR_DAEMON_LOST) return 0;
      if (rc == SYNCD_ERR_RANK_LOST) {
        CHILD_CHECK(!doomed, "rank %d (on the lost node): %s", rank, syncd_last_error());
        CHILD_CHECK(complete_without == 0, "rank %d step %d: a collective failed after the job went on: %s", rank, step,
                    syncd_last_error());
        failed = true;
        why = syncd_last_error();
        continue;
      }
      CHILD_CHECK(rc == SYNCD_OK, "rank %d step %d: %s: %s", rank, step, syncd_status_name(rc), syncd_last_error());
    }
    if (failed) {
      // What hvd.elastic.run does: every call in flight is done (waited above), then the rank
      // acknowledges the new membership and trains on (after a moment: its daemon may not have
      // seen the loss yet, only a peer's word of it).
      CHILD_CHECK(++failures <= 1000, "rank %d: %d steps failed, the last: %s", rank, failures, why.c_str());
      usleep(1000);
      uint32_t membership = 0;
      CHILD_CHECK(syncd_acknowledge_membership(c, &membership) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
      continue;
    }
    bool without = true;
    for (size_t l = 0; l < kLayers.size(); ++l) {
      const int32_t v = grads[l][0];
      CHILD_CHECK(v == full || v == left, "rank %d step %d grad.%zu: %d (all ranks %d, without node %d %d)", rank,
                  step, l, v, full, k.lost, left);
      CHILD_CHECK(complete_without == 0 || v == left, "rank %d step %d grad.%zu: node %d's ranks counted after the "
                  "job went on without them", rank, step, l, k.lost);
      for (int64_t i = 1; i < kLayers[l]; ++i)
        CHILD_CHECK(grads[l][i] == v, "rank %d step %d grad.%zu[%lld]: %d, element 0 %d", rank, step, l,
                    static_cast<long long>(i), grads[l][i], v);
      without &= v == left;
    }
    const float avg_left = float(left) / float(ranks_left);
    if (without)
      CHILD_CHECK(std::fabs(avg[0] - avg_left) < 1e-5f * avg_left, "rank %d step %d: average %.7g, expected %.7g "
                  "over the %d ranks left", rank, step, double(avg[0]), double(avg_left), ranks_left);
    if (without && complete_without++ == 0) shared->recovered_s[rank].store(NowS() - shared->t_kill.load());
  }
  CHILD_CHECK(!doomed, "rank %d: trained on although its daemon was killed", rank);
  // hvd.join() (uneven data), a step after it, and a join at the end: each completes among the
  // ranks left, and the step sums exactly them (a node whose ranks left stands in again after the
  // first join).
  for (int round = 0; round < 2; ++round) {
    int last = -1;
    const int rc = syncd_join(c, 30'000, &last);
    CHILD_CHECK(rc == SYNCD_OK && last / k.local != k.lost, "rank %d: join %d: %s (last rank %d): %s", rank, round,
                syncd_status_name(rc), last, syncd_last_error());
    if (round == 1) break;
    std::vector<syncd_handle> hs;
    CHILD_CHECK(SubmitPowerOfTwoStep(c, rank, kLayers, grads, avg, kAverageCount, &hs) == SYNCD_OK, "rank %d: %s",
                rank, syncd_last_error());
    for (syncd_handle x : hs)
      CHILD_CHECK(syncd_wait(c, x, 30'000) == SYNCD_OK, "rank %d: the step after the join: %s", rank,
                  syncd_last_error());
    for (size_t l = 0; l < kLayers.size(); ++l)
      CHILD_CHECK(grads[l][0] == left, "rank %d: the step after the join, grad.%zu: %d, the ranks left %d", rank, l,
                  grads[l][0], left);
  }
  // A process set of the ranks left (syncd_add_process_set, torch's new_group), a sum in it and
  // its removal: where the node's ranks left, its daemon stands in for the change.
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (r / k.local != k.lost) members.push_back(r);
  int set = 0;
  CHILD_CHECK(syncd_add_process_set(c, members.data(), int(members.size()), 30'000, &set) == SYNCD_OK,
              "rank %d: add a process set of the ranks left: %s", rank, syncd_last_error());
  int32_t mine = 1 << rank;
  int64_t one = 1;
  syncd_tensor t{"in.the.set", &mine, SYNCD_INT32, 1, &one, set};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
              "rank %d: in process set %d: %s", rank, set, syncd_last_error());
  CHILD_CHECK(mine == left, "rank %d: process set %d summed %d, the ranks left %d", rank, set, mine, left);
  CHILD_CHECK(syncd_remove_process_set(c, set, 30'000) == SYNCD_OK, "rank %d: remove process set %d: %s", rank, set,
              syncd_last_error());
  syncd_shutdown(c);
  return 0;
}

class LostNode : public ::testing::TestWithParam<NodeCase> {};

TEST_P(LostNode, TheRanksLeftGoOnSummingExactlyThemselves) {
  const NodeCase k = GetParam();
  Cluster cluster(k.nodes, k.local, {"--on-loss", k.policy, "--coord", k.coord, "--log-level", "error"});
  const int n = k.nodes * k.local;
  const bool topo = std::string(k.coord) == "topo";
  auto* shared = new (mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared();
  for (int r = 0; r < n; ++r) shared->recovered_s[r].store(-1);
  std::mt19937 rng(uint32_t(NodeCaseName(::testing::TestParamInfo<NodeCase>(k, 0)).size()) * 7919u);
  NextJob();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const std::string dir = cluster.node(r / k.local).run_dir();
    pids.push_back(Spawn([=] { return TrainThroughANodeLoss(dir, k, r, topo, shared); }));
  }
  if (!k.leave) {
    PauseAtARandomMoment(shared->steps, n, rng);
    shared->t_kill.store(NowS());
    cluster.node(k.lost).Kill(SIGKILL);
  }
  // Ranks that leave may come back for a while (kRejoinGraceNs, 2 s), then the node's next stall
  // check (each second) sees the other nodes' ranks still attached.
  const double bound_s = k.leave ? 4.0 : std::string(k.policy) == "continue" ? 2.0 : 5.0;
  double slowest = 0;
  for (int r = 0; r < n; ++r) {
    const int s = WaitChild(pids[size_t(r)], 90'000);
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "rank " << r << " status " << s;
    if (r / k.local == k.lost) continue;
    const double recovered = shared->recovered_s[r].load();
    EXPECT_TRUE(recovered >= 0 && recovered < bound_s) << "rank " << r << ": first complete step without node "
                                                       << k.lost << " " << recovered << " s after the kill";
    slowest = std::max(slowest, recovered);
  }
  std::printf("node %d's %s (--on-loss %s): the ranks left completed a step without it %.3f s after\n", k.lost,
              k.leave ? "ranks left" : "daemon killed", k.policy, slowest);
  if (k.leave) {  // the node whose ranks left says so, as a user reads it: they left, cleanly
    const std::string table = SyncctlStatus(cluster.node(k.lost).run_dir());
    for (int r = k.lost * k.local; r < (k.lost + 1) * k.local; ++r)
      EXPECT_TRUE(Contains(table, "LEFT rank " + std::to_string(r) + " at ")) << table;
    EXPECT_TRUE(Contains(table, std::string("the job went on without it (--on-loss ") + k.policy + ")")) << table;
    std::printf("%s\n", table.c_str());
    return;
  }
  // A node left says what happened, as a user reads it.
  const int asked = k.lost == 0 ? 1 : 0;
  std::string table = SyncctlStatus(cluster.node(asked).run_dir());
  EXPECT_TRUE(Contains(table, "MEMBERSHIP 1 at ") && Contains(table, "lost node " + std::to_string(k.lost)) &&
              Contains(table, std::string("the job went on without it (--on-loss ") + k.policy))
      << table;
  // Under --coord topo the set made afresh runs the registered plan on (nobody registers it again):
  // its groups ran for every step since, not negotiated.
  if (topo) {
    EXPECT_GE(PlanGroupsRun(table), kStepsAfterLoss) << table;
  }
  // Its job-wide health view still hears from every other node left (their reports now travel on
  // the new global set, by node number): none of them shows as unresponsive.
  for (int other = 0; other < k.nodes; ++other) {
    if (other == asked || other == k.lost) continue;
    const std::string unheard = "daemon of node " + std::to_string(other) + " ";
    for (int i = 0; i < 30 && Contains(table, unheard); ++i) {
      usleep(100'000);
      table = SyncctlStatus(cluster.node(asked).run_dir());
    }
    EXPECT_FALSE(Contains(table, unheard)) << table;
  }
}

// --on-loss restore, 3 x 2: node 2's daemon is killed while nothing is in flight, the ranks left
// acknowledge the new membership, and then rank 1 is killed before any collective of the global
// set made afresh has run. That set's first collective is the first without rank 1: restore
// fails it on every rank left, as it does any rank's loss, and the next one sums the ranks left.
// (A set made afresh took its baseline from its first group before, and summed without rank 1
// with no failure: a rollback restore promises, missing.)
struct Phases {
  std::atomic<int> stepped{0}, acknowledged{0}, go{0};
};

// The global set made afresh without node 2, as the node page lists it: launch ranks 0-3, rank 1
// (lost) stood in for by its daemon. An alltoall takes one split per rank of it, and rank 1's
// stand-in sends nothing.
int ExpectTheSetOfNodes0And1(syncd_client* c, int rank) {
  int set[6] = {}, count = 0;
  uint32_t membership = 0;
  CHILD_CHECK(syncd_job_set_ranks(c, set, 6, &count, &membership) == SYNCD_OK && count == 4 && membership >= 1,
              "rank %d: set of %d ranks (membership %u): %s", rank, count, membership, syncd_last_error());
  for (int i = 0; i < 4; ++i) CHILD_CHECK(set[i] == i, "rank %d: the set's rank %d is %d", rank, i, set[i]);
  CHILD_CHECK(syncd_process_set_size(c, 0) == 4 && syncd_process_set_rank(c, 0) == rank, "rank %d: set 0: rank %d of %d",
              rank, syncd_process_set_rank(c, 0), syncd_process_set_size(c, 0));
  int32_t rows[4];
  for (int d = 0; d < 4; ++d) rows[d] = 10 * rank + d;
  const int64_t shape = 4, splits[4] = {1, 1, 1, 1};
  syncd_tensor t{"alltoall.after", rows, SYNCD_INT32, 1, &shape, 0};
  syncd_result res{};
  syncd_handle h;
  int rc = syncd_alltoall_async(c, &t, splits, 4, &res, &h);
  if (rc == SYNCD_OK) rc = syncd_wait(c, h, 30'000);
  CHILD_CHECK(rc == SYNCD_OK && res.nranks == 4 && res.bytes == 12, "rank %d: alltoall: %s, %d ranks, %llu bytes: %s",
              rank, syncd_status_name(rc), res.nranks, static_cast<unsigned long long>(res.bytes), syncd_last_error());
  const auto* got = static_cast<const int32_t*>(res.data);
  CHILD_CHECK(res.rows[0] == 1 && res.rows[1] == 0 && res.rows[2] == 1 && res.rows[3] == 1 && got[0] == rank &&
                  got[1] == 20 + rank && got[2] == 30 + rank,
              "rank %d: alltoall received rows %lld %lld %lld %lld: %d %d %d", rank,
              static_cast<long long>(res.rows[0]), static_cast<long long>(res.rows[1]),
              static_cast<long long>(res.rows[2]), static_cast<long long>(res.rows[3]), got[0], got[1], got[2]);
  syncd_release_result(c, &res);
  return 0;
}

int FirstCollectiveAfterARemake(const std::string& dir, int rank, Phases* p) {
  syncd_client* c = AttachAs(dir, rank, 6, rank % 2, 2);
  CHILD_CHECK(c != nullptr, "attach: %s", syncd_last_error());
  auto sum = [&](const char* name, int32_t* v) {
    *v = 1 << rank;
    const int64_t one = 1;
    syncd_tensor t{name, v, SYNCD_INT32, 1, &one, 0};
    syncd_handle h;
    const int rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
    return rc == SYNCD_OK ? syncd_wait(c, h, 30'000) : rc;
  };
  int32_t v = 0;
  CHILD_CHECK(sum("before", &v) == SYNCD_OK && v == 63, "rank %d: before: %d %s", rank, v, syncd_last_error());
  ++p->stepped;
  const double t0 = NowS();
  if (rank == 1 || rank >= 4) {  // killed, or their daemon is
    while (p->go.load() == 0 && NowS() - t0 < 60) usleep(10'000);
    return 0;
  }
  uint32_t membership = 0;
  while (membership == 0) {
    CHILD_CHECK(NowS() - t0 < 20, "rank %d: the job's membership did not change", rank);
    usleep(10'000);
    CHILD_CHECK(syncd_acknowledge_membership(c, &membership) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
  }
  ++p->acknowledged;
  while (p->go.load() == 0) {
    CHILD_CHECK(NowS() - t0 < 40, "rank %d: never told to go on", rank);
    usleep(10'000);
  }
  int rc = sum("first.after", &v);
  CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "lost while it was in flight"),
              "rank %d: the first collective without rank 1: %s (%d) %s", rank, syncd_status_name(rc), v,
              syncd_last_error());
  rc = sum("second.after", &v);
  CHILD_CHECK(rc == SYNCD_OK && v == 1 + 4 + 8, "rank %d: the next: %s, summed %d (ranks 0, 2, 3: 13) %s", rank,
              syncd_status_name(rc), v, syncd_last_error());
  if (ExpectTheSetOfNodes0And1(c, rank) != 0) return 1;
  syncd_shutdown(c);
  return 0;
}

TEST(LostNodeThenARank, UnderRestoreTheFirstCollectiveOfTheSetMadeAfreshFailsForARankLostBeforeIt) {
  Cluster cluster(3, 2, {"--on-loss", "restore", "--log-level", "error"});
  auto* p = new (mmap(nullptr, sizeof(Phases), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Phases();
  NextJob();
  std::vector<pid_t> pids;
  for (int r = 0; r < 6; ++r) {
    const std::string dir = cluster.node(r / 2).run_dir();
    pids.push_back(Spawn([=] { return FirstCollectiveAfterARemake(dir, r, p); }));
  }
  auto wait_for = [](const std::atomic<int>& a, int value) {
    for (int i = 0; i < 2000 && a.load() < value; ++i) usleep(10'000);
    return a.load() >= value;
  };
  EXPECT_TRUE(wait_for(p->stepped, 6));
  cluster.node(2).Kill(SIGKILL);
  EXPECT_TRUE(wait_for(p->acknowledged, 3));
  kill(pids[1], SIGKILL);
  std::string table;
  for (int i = 0; i < 100 && !Contains(table, "LOST rank 1"); ++i) {
    usleep(50'000);
    table = SyncctlStatus(cluster.node(0).run_dir());
  }
  EXPECT_TRUE(Contains(table, "LOST rank 1")) << table;
  p->go.store(1);
  for (int r = 0; r < 6; ++r) {
    const int s = WaitChild(pids[size_t(r)], 60'000);
    if (r == 1) continue;  // killed
    EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "rank " << r << " status " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Elastic, LostNode,
    ::testing::Values(NodeCase{"restore", "negotiate", 2, 2, 1}, NodeCase{"restore", "negotiate", 2, 2, 0},
                      NodeCase{"restore", "topo", 2, 2, 1}, NodeCase{"continue", "negotiate", 2, 2, 1},
                      NodeCase{"continue", "topo", 2, 2, 0}, NodeCase{"restore", "negotiate", 3, 1, 1},
                      NodeCase{"restore", "topo", 3, 2, 0}, NodeCase{"continue", "gs", 3, 1, 2},
                      NodeCase{"continue", "nbcs", 3, 2, 1}, NodeCase{"continue", "negotiate", 2, 2, 1, true},
                      NodeCase{"restore", "negotiate", 2, 2, 0, true}, NodeCase{"continue", "topo", 2, 2, 0, true},
                      NodeCase{"restore", "topo", 3, 1, 1, true}),
    NodeCaseName);

}  // namespace
}  // namespace syncd::testing
