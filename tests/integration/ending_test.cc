// One way to end work (Engine::End): whichever path ends a request (refused at once, a rank that
// vanishes, a stall shutdown, the drain deadline, a lost node), it completes exactly once. The
// completions are counted on the rings themselves: the C client would hide a second one (it
// drops completions of handles no longer in flight), and a missing one would show only as a hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <map>
#include <vector>

#include "syncd/client.h"
#include "tests/integration/harness.h"
#include "tests/integration/raw_client.h"

namespace syncd::testing {
namespace {

// Pushes `n` well-formed allreduces named "<prefix>.<i>", handles `first` + i.
std::vector<uint64_t> PushNamed(RawClient& c, uint64_t first, int n, const char* prefix) {
  std::vector<uint64_t> handles;
  for (int i = 0; i < n; ++i) {
    abi::SubmitEntry e = c.Valid(first + i);
    snprintf(e.name, sizeof(e.name), "%s.%d", prefix, i);
    c.Push(e);
    handles.push_back(first + i);
  }
  return handles;
}

// Collects `c`'s completions for `for_s` and checks them against `want` (handle -> status):
// every handle of `want` exactly once with its status, no other handle.
void ExpectEachOnce(RawClient& c, double for_s, const std::map<uint64_t, int>& want, const char* path) {
  std::map<uint64_t, int> status;
  const std::map<uint64_t, int> seen = c.Completions(for_s, &status);
  for (const auto& [h, n] : seen) EXPECT_TRUE(want.count(h)) << path << ": handle " << h << " was never pending";
  for (const auto& [h, code] : want) {
    auto it = seen.find(h);
    if (it == seen.end()) {
      ADD_FAILURE() << path << ": handle " << h << " never completed";
      continue;
    }
    EXPECT_EQ(it->second, 1) << path << ": handle " << h << " completed " << it->second << " times";
    EXPECT_EQ(status.at(h), code) << path << ": handle " << h;
  }
}

std::map<uint64_t, int> All(const std::vector<uint64_t>& handles, int status) {
  std::map<uint64_t, int> m;
  for (uint64_t h : handles) m[h] = status;
  return m;
}

// Request scope: refused as it is read, or as a duplicate; and the normal end, for comparison.
TEST(Ending, RefusedAndCompletedRequestsCompleteOnce) {
  Daemon d(2);
  RawClient r0(d.run_dir(), 0, 2, 0, 2), r1(d.run_dir(), 1, 2, 1, 2);
  abi::SubmitEntry bad = r0.Valid(1);
  bad.dtype = 99;
  r0.Push(bad);
  PushNamed(r0, 2, 1, "dup");
  PushNamed(r0, 3, 1, "dup");   // already in flight on this rank: refused, the first stays
  PushNamed(r1, 10, 1, "dup");  // completes the first
  ExpectEachOnce(r0, 1.0, {{1, SYNCD_ERR_PROTOCOL}, {2, SYNCD_OK}, {3, SYNCD_ERR_DUPLICATE}}, "request");
  ExpectEachOnce(r1, 0.1, {{10, SYNCD_OK}}, "request");
}

// Client scope: what waits for a rank that vanished fails, once.
TEST(Ending, WhatWaitsForAVanishedRankCompletesOnce) {
  Daemon d(2);
  RawClient r0(d.run_dir(), 0, 2, 0, 2), r1(d.run_dir(), 1, 2, 1, 2);
  PushNamed(r0, 1, 2, "mine");  // rank 0's own, never matched: nobody left to tell
  const std::vector<uint64_t> waiting = PushNamed(r1, 100, 5, "w");
  usleep(100'000);
  r0.Vanish();
  ExpectEachOnce(r1, 2.0, All(waiting, SYNCD_ERR_RANK_LOST), "client");
}

// Job scope, every node: a stall shutdown.
TEST(Ending, AStallShutdownCompletesEachRequestOnce) {
  Daemon d(2, {"--stall-warning-s", "1", "--stall-shutdown-s", "1"});
  RawClient r0(d.run_dir(), 0, 2, 0, 2), r1(d.run_dir(), 1, 2, 1, 2);
  const std::vector<uint64_t> stalled = PushNamed(r0, 1, 4, "s");
  ExpectEachOnce(r0, 3.5, All(stalled, SYNCD_ERR_STALLED), "stall");
  ExpectEachOnce(r1, 0.1, {}, "stall");
}

// Job scope, this node: the drain deadline.
TEST(Ending, TheDrainDeadlineCompletesEachRequestOnce) {
  Daemon d(2, {"--drain-timeout", "1"});
  RawClient r0(d.run_dir(), 0, 2, 0, 2), r1(d.run_dir(), 1, 2, 1, 2);
  const std::vector<uint64_t> held = PushNamed(r0, 1, 3, "d");
  usleep(100'000);
  d.Kill(SIGTERM);
  ExpectEachOnce(r0, 2.5, All(held, SYNCD_ERR_DAEMON_LOST), "drain");
  EXPECT_NE(d.Wait(10'000), -1);
}

// Process set scope on another node: a lost node ends the job's coordination; what this node
// holds (waiting for the other node) completes once.
TEST(Ending, ALostNodeCompletesEachRequestOnce) {
  Cluster cluster(2, 1, {"--cores", "none", "--log-level", "error"});
  RawClient n0(cluster.node(0).run_dir(), 0, 2, 0, 1), n1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  const std::vector<uint64_t> agreed_here = PushNamed(n0, 1, 3, "n");
  usleep(200'000);
  cluster.node(1).Kill(SIGKILL);
  std::map<uint64_t, int> status;
  const std::map<uint64_t, int> seen = n0.Completions(5.0, &status);
  ASSERT_EQ(seen.size(), agreed_here.size());
  for (uint64_t h : agreed_here) {
    EXPECT_EQ(seen.at(h), 1) << "handle " << h;
    EXPECT_TRUE(status.at(h) == SYNCD_ERR_DAEMON_LOST || status.at(h) == SYNCD_ERR_RANK_LOST) << status.at(h);
  }
}

// ---- Every end scope in every coordination mode, on two nodes of one rank each (rank 0 on node
// 0, rank 1 on node 1): each pending request completes exactly once on the rings, and afterwards
// no daemon holds a request (its ledger, daemon/core/request_ledger.h: `open_requests` 0) or
// refused a second completion (`requests_finished_twice` 0; the harness also fails any test
// whose daemon logged one).

class EndingModes : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::string> Args(std::vector<std::string> more = {}) const {
    std::vector<std::string> a = {"--cores", "none", "--log-level", "error", "--coord", GetParam()};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
};

// What `d`'s status says of its requests, once everything has ended.
void ExpectNothingHeld(Daemon& d, const char* path) {
  std::string json;
  for (int i = 0; i < 50; ++i) {  // the status is published every 20 ms
    json = d.StatusJson();
    if (json.find("\"open_requests\":\"0\"") != std::string::npos) break;
    usleep(20'000);
  }
  EXPECT_NE(json.find("\"open_requests\":\"0\""), std::string::npos) << path << ": " << json;
  EXPECT_NE(json.find("\"requests_finished_twice\":\"0\""), std::string::npos) << path << ": " << json;
}

TEST_P(EndingModes, ARefusedRequestAndADuplicateNameCompleteOnce) {
  Cluster cluster(2, 1, Args());
  RawClient r0(cluster.node(0).run_dir(), 0, 2, 0, 1), r1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  abi::SubmitEntry bad = r0.Valid(1);
  bad.dtype = 99;
  r0.Push(bad);
  PushNamed(r0, 2, 1, "dup");
  PushNamed(r0, 3, 1, "dup");  // already in flight on this rank: refused, the first stays
  // Both refused before rank 1 submits "dup" (else the first could complete before the daemon
  // reads the second, which would then be a new request of its own: blocking modes read nothing
  // new while a cycle is open, and a loaded machine can run a whole cycle in between).
  ExpectEachOnce(r0, 1.0, {{1, SYNCD_ERR_PROTOCOL}, {3, SYNCD_ERR_DUPLICATE}}, "request");
  PushNamed(r1, 10, 1, "dup");
  ExpectEachOnce(r0, 2.0, {{2, SYNCD_OK}}, "request");
  ExpectEachOnce(r1, 0.2, {{10, SYNCD_OK}}, "request");
  ExpectNothingHeld(cluster.node(0), "request");
  ExpectNothingHeld(cluster.node(1), "request");
}

TEST_P(EndingModes, WhatWaitsForARankOfAnotherNodeThatVanishedCompletesOnce) {
  Cluster cluster(2, 1, Args());
  RawClient r0(cluster.node(0).run_dir(), 0, 2, 0, 1), r1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  PushNamed(r0, 1, 2, "mine");  // rank 0's own, never matched: nobody left to tell
  const std::vector<uint64_t> waiting = PushNamed(r1, 100, 5, "w");
  usleep(200'000);
  r0.Vanish();
  ExpectEachOnce(r1, 3.0, All(waiting, SYNCD_ERR_RANK_LOST), "rank");
  ExpectNothingHeld(cluster.node(0), "rank");
  ExpectNothingHeld(cluster.node(1), "rank");
}

// Set scope: a process set removed (by every rank) while a request of it waits for a rank that
// never submitted it: the request fails once; the global set goes on.
TEST_P(EndingModes, RemovingAProcessSetCompletesWhatItHeldOnce) {
  Cluster cluster(2, 1, Args());
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int) {
    const int members[2] = {0, 1};
    int id = 0;
    CHILD_CHECK(syncd_add_process_set(c, members, 2, 30'000, &id) == SYNCD_OK, "add: %s", syncd_last_error());
    double x = 1;
    int64_t one = 1;
    syncd_tensor t{"only.rank0", &x, SYNCD_FLOAT64, 1, &one, id};
    syncd_handle h = 0;
    if (rank == 0) CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_remove_process_set(c, id, 30'000) == SYNCD_OK, "remove: %s", syncd_last_error());
    if (rank == 0) {
      const int rc = syncd_wait(c, h, 10'000);
      CHILD_CHECK(rc != SYNCD_OK && rc != SYNCD_ERR_TIMEOUT, "the removed set's request: %s", syncd_status_name(rc));
    }
    // The global set goes on.
    syncd_tensor g{"global.after.removal", &x, SYNCD_FLOAT64, 1, &one, 0};
    x = 1;
    CHILD_CHECK(syncd_allreduce_async(c, &g, SYNCD_SUM, 1, 1, &h) == SYNCD_OK && syncd_wait(c, h, 30'000) == SYNCD_OK,
                "after the removal: %s", syncd_last_error());
    CHILD_CHECK(x == 2, "after the removal: sum %g", x);
    return 0;
  });
  ExpectAllSucceeded(st);
  ExpectNothingHeld(cluster.node(0), "set");
  ExpectNothingHeld(cluster.node(1), "set");
}

// Job scope, every node: a stall shutdown.
TEST_P(EndingModes, AStallShutdownCompletesEachRequestOnce) {
  Cluster cluster(2, 1, Args({"--stall-warning-s", "1", "--stall-shutdown-s", "1"}));
  RawClient r0(cluster.node(0).run_dir(), 0, 2, 0, 1), r1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  const std::vector<uint64_t> stalled = PushNamed(r0, 1, 4, "s");
  ExpectEachOnce(r0, 4.0, All(stalled, SYNCD_ERR_STALLED), "stall");
  ExpectEachOnce(r1, 0.2, {}, "stall");
  ExpectNothingHeld(cluster.node(0), "stall");
  ExpectNothingHeld(cluster.node(1), "stall");
}

// Job scope, one node: its drain deadline; the other node's rank waits for nothing of it.
TEST_P(EndingModes, TheDrainDeadlineCompletesEachRequestOnce) {
  Cluster cluster(2, 1, Args({"--drain-timeout", "1"}));
  RawClient r0(cluster.node(0).run_dir(), 0, 2, 0, 1), r1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  const std::vector<uint64_t> held = PushNamed(r0, 1, 3, "d");
  usleep(200'000);
  cluster.node(0).Kill(SIGTERM);
  ExpectEachOnce(r0, 3.0, All(held, SYNCD_ERR_DAEMON_LOST), "drain");
  EXPECT_NE(cluster.node(0).Wait(10'000), -1);
  ExpectEachOnce(r1, 0.2, {}, "drain");
  ExpectNothingHeld(cluster.node(1), "drain");
}

// Job scope from outside: a lost node.
TEST_P(EndingModes, ALostNodeCompletesEachRequestOnce) {
  Cluster cluster(2, 1, Args());
  RawClient n0(cluster.node(0).run_dir(), 0, 2, 0, 1), n1(cluster.node(1).run_dir(), 1, 2, 0, 1);
  const std::vector<uint64_t> waiting = PushNamed(n0, 1, 3, "n");
  usleep(200'000);
  cluster.node(1).Kill(SIGKILL);
  std::map<uint64_t, int> status;
  const std::map<uint64_t, int> seen = n0.Completions(5.0, &status);
  ASSERT_EQ(seen.size(), waiting.size());
  for (uint64_t h : waiting) {
    EXPECT_EQ(seen.at(h), 1) << "handle " << h;
    EXPECT_TRUE(status.at(h) == SYNCD_ERR_DAEMON_LOST || status.at(h) == SYNCD_ERR_RANK_LOST) << status.at(h);
  }
  ExpectNothingHeld(cluster.node(0), "lost node");
}

INSTANTIATE_TEST_SUITE_P(Modes, EndingModes, ::testing::Values("negotiate", "gs", "nbcs", "topo"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

}  // namespace
}  // namespace syncd::testing
