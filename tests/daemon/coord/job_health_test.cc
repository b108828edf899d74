#include "daemon/coord/job_health.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>

namespace syncd {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

NodeHealth NodeWith(uint32_t node, uint32_t ranks) {
  NodeHealth h;
  h.node = node;
  h.host = "host-" + std::to_string(node);
  h.daemon_pid = 4000 + int32_t(node);
  h.pending = 3;
  h.collectives = 7;
  h.wait_p50_ms = 1.25;
  h.wait_p95_ms = 2.5;
  h.spread_p50_ms = 0.75;
  for (uint32_t i = 0; i < ranks; ++i) {
    RankHealth r;
    r.rank = node * ranks + i;
    r.pid = 5000 + int32_t(r.rank);
    r.last_seen_s = 0.25 * i;
    r.process = i % 2 ? "sleeping" : "running";
    r.attached = i % 3 == 0;  // then lost, then left
    r.left = i % 3 == 2;
    r.collectives = 100;
    r.last = i;
    r.mean_late_ms = 1.5 * i;
    r.p95_late_ms = 2.5 * i;
    r.wait_share = 0.01 * i;
    h.ranks.push_back(r);
  }
  return h;
}

constexpr uint64_t kPeriod = JobHealth::kReportPeriodNs;

// N daemons' health views joined by an instant network: each builds its report every period (at
// its own phase) and hands on what it receives at once. A stopped node neither runs nor receives
// (what is sent to it is dropped); a lost one is known lost to every other (the transport's word).
struct Cluster {
  explicit Cluster(uint32_t n) : stopped(n), lost(n), next_tick(n), sent(n) {
    for (uint32_t i = 0; i < n; ++i) {
      views.emplace_back(n, i, 0);
      reports.push_back(NodeWith(i, 1));
      next_tick[i] = (uint64_t(i) * 37'000'000) % kPeriod;
    }
  }
  void Post(uint32_t from, std::vector<HealthBundle> out) {
    for (HealthBundle& b : out) queue.push_back({from, std::move(b)});
  }
  // Runs to `until`, in steps of 10 ms; `check` after each step.
  void Run(uint64_t until, const std::function<void()>& check = nullptr) {
    while (now < until) {
      now += 10'000'000;
      for (uint32_t i = 0; i < views.size(); ++i) {
        if (stopped[i] || lost[i] || now < next_tick[i]) continue;
        Post(i, views[i].Report(reports[i], now, lost));
        next_tick[i] = std::max(next_tick[i] + kPeriod, now);
      }
      while (!queue.empty()) {
        auto [from, b] = std::move(queue.front());
        queue.pop_front();
        ++sent[from];
        if (stopped[b.to] || lost[b.to] || lost[from]) continue;
        std::vector<HealthBundle> out;
        const Status st = views[b.to].Receive(from, b.down, b.text, now, lost, &out);
        ASSERT_TRUE(st.ok()) << st.message();
        Post(b.to, std::move(out));
      }
      if (check) check();
    }
  }
  void Resume(uint32_t node) {
    stopped[node] = false;
    next_tick[node] = now;
  }
  // Node `node` as node `viewer` sees it now.
  NodeHealth View(uint32_t viewer, uint32_t node) const {
    for (const NodeHealth& h : views[viewer].Peers(now, lost))
      if (h.node == node) return h;
    return NodeHealth{};
  }

  std::vector<JobHealth> views;
  std::vector<NodeHealth> reports;
  std::vector<bool> stopped, lost;
  std::vector<uint64_t> next_tick, sent;
  std::deque<std::pair<uint32_t, HealthBundle>> queue;
  uint64_t now = 0;
};

TEST(HealthTreeTest, TheTreeIsBinomialWithNodeZeroAtItsRoot) {
  EXPECT_EQ(HealthTree::Children(0, 8), (std::vector<uint32_t>{1, 2, 4}));
  EXPECT_EQ(HealthTree::Children(4, 8), (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(HealthTree::Children(6, 8), (std::vector<uint32_t>{7}));
  EXPECT_EQ(HealthTree::Children(6, 7), (std::vector<uint32_t>{}));
  EXPECT_TRUE(HealthTree::Children(0, 1).empty());
  EXPECT_EQ(HealthTree::Parent(7), 6u);
  EXPECT_EQ(HealthTree::Parent(6), 4u);
  EXPECT_EQ(HealthTree::Parent(4), 0u);
  // 4,608 nodes: each reaches node 0 in at most 13 hops, every node but 0 is some node's child
  // exactly once, and no node has more than 13 children.
  const uint32_t n = 4608;
  std::vector<int> parents(n);
  for (uint32_t p = 0; p < n; ++p) {
    EXPECT_LE(HealthTree::Children(p, n).size(), 13u);
    for (uint32_t c : HealthTree::Children(p, n)) {
      EXPECT_EQ(HealthTree::Parent(c), p);
      ++parents[c];
    }
    int hops = 0;
    for (uint32_t q = p; q != 0; q = HealthTree::Parent(q)) ++hops;
    EXPECT_LE(hops, 13) << p;
  }
  EXPECT_EQ(parents[0], 0);
  for (uint32_t p = 1; p < n; ++p) EXPECT_EQ(parents[p], 1) << p;
}

TEST(JobHealthTest, EveryNodeSeesEveryOtherFreshWhileEachSendsAFewBundlesAPeriod) {
  for (uint32_t n : {2u, 3u, 8u, 33u}) {
    Cluster c(n);
    c.Run(3 * kSecond);
    for (uint32_t v = 0; v < n; ++v)
      for (const NodeHealth& h : c.views[v].Peers(c.now, c.lost)) {
        EXPECT_EQ(h.state, "ok") << n << " nodes: node " << h.node << " seen from " << v;
        EXPECT_LE(h.report_age_s, 1.5) << n << " nodes: node " << h.node << " seen from " << v;
        EXPECT_EQ(h.host, "host-" + std::to_string(h.node));
      }
    const std::vector<uint64_t> before = c.sent;
    c.Run(13 * kSecond);  // 20 periods
    double total = 0, most = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const double per_period = double(c.sent[i] - before[i]) / 20;
      total += per_period;
      most = std::max(most, per_period);
      // Up once a period, down to each child once: a few more while phases settle.
      EXPECT_LE(per_period, 1.5 + 1.5 * double(HealthTree::Children(i, n).size())) << n << " nodes, node " << i;
    }
    EXPECT_LE(total / n, 3.0) << n << " nodes";
    if (n == 33) {
      EXPECT_LT(most, 12.0) << "the root sends down to its 6 children, not to 32 nodes";
    }
  }
}

TEST(JobHealthTest, ANodesReportReachesTheOthersWithEveryRank) {
  Cluster c(3);
  c.reports[2] = NodeWith(2, 40);  // a bundle far larger than one control message
  c.Run(2 * kSecond);
  for (uint32_t v : {0u, 1u}) {
    const NodeHealth got = c.View(v, 2);
    EXPECT_EQ(got.host, "host-2");
    EXPECT_EQ(got.daemon_pid, 4002);
    EXPECT_EQ(got.pending, 3u);
    EXPECT_EQ(got.collectives, 7u);
    EXPECT_NEAR(got.wait_p50_ms, 1.25, 1e-9);
    EXPECT_NEAR(got.wait_p95_ms, 2.5, 1e-9);
    EXPECT_NEAR(got.spread_p50_ms, 0.75, 1e-9);
    EXPECT_EQ(got.state, "ok");
    ASSERT_EQ(got.ranks.size(), 40u);
    for (uint32_t i = 0; i < 40; ++i) {
      const RankHealth& r = got.ranks[i];
      EXPECT_EQ(r.rank, 80 + i);
      EXPECT_EQ(r.pid, int32_t(5080 + i));
      EXPECT_NEAR(r.last_seen_s, 0.25 * i + got.report_age_s, 2e-3) << "aged by the report's age";
      EXPECT_EQ(r.process, i % 2 ? "sleeping" : "running");
      EXPECT_EQ(r.attached, i % 3 == 0) << i;
      EXPECT_EQ(r.left, i % 3 == 2) << i;
      EXPECT_EQ(r.last, i);
      EXPECT_NEAR(r.mean_late_ms, 1.5 * i, 1e-3);
      EXPECT_NEAR(r.p95_late_ms, 2.5 * i, 1e-3);
      EXPECT_NEAR(r.wait_share, 0.01 * i, 1e-6);
      EXPECT_EQ(r.why, "");
    }
  }
}

TEST(JobHealthTest, AnUnresponsiveRankIsNamedInWordsOnThePeer) {
  Cluster c(2);
  c.reports[1] = NodeWith(1, 2);
  c.reports[1].ranks[0].process = "stopped";
  c.reports[1].ranks[0].unresponsive = 'S';
  c.reports[1].ranks[1].last_seen_s = 4.0;
  c.reports[1].ranks[1].unresponsive = 'N';
  c.Run(kSecond);
  const NodeHealth got = c.View(0, 1);
  ASSERT_EQ(got.ranks.size(), 2u);
  EXPECT_EQ(got.ranks[0].why, "stopped (SIGSTOP, Ctrl-Z or a debugger)");
  EXPECT_NE(got.ranks[1].why.find("not calling syncd for 4."), std::string::npos) << got.ranks[1].why;
  EXPECT_NE(got.ranks[1].why.find("while a tensor waits for it (process sleeping)"), std::string::npos) << got.ranks[1].why;
}

// A stopped daemon (SIGSTOP) in the middle of the tree: every other node names it within 5 s,
// and the nodes under it go round it without ever being called unresponsive themselves.
void StopAndResume(uint32_t n, uint32_t node) {
  Cluster c(n);
  c.Run(3 * kSecond);
  c.stopped[node] = true;
  const uint64_t stopped_at = c.now;
  std::vector<uint64_t> named(n, 0);
  c.Run(stopped_at + 6 * kSecond, [&] {
    for (uint32_t v = 0; v < n; ++v) {
      if (v == node) continue;
      for (const NodeHealth& h : c.views[v].Peers(c.now, c.lost)) {
        if (h.node == node) {
          if (h.state == "unresponsive" && named[v] == 0) named[v] = c.now;
        } else {
          ASSERT_EQ(h.state, "ok") << "node " << h.node << " seen from " << v << " at "
                                   << double(c.now - stopped_at) / 1e9 << " s: " << h.why;
        }
      }
    }
  });
  for (uint32_t v = 0; v < n; ++v) {
    if (v == node) continue;
    ASSERT_NE(named[v], 0u) << "node " << v << " never named node " << node;
    EXPECT_LE(named[v] - stopped_at, 5 * kSecond) << "node " << v;
    // Its last report was built up to a period or two before it stopped: 3 s from then.
    EXPECT_GE(named[v] - stopped_at, JobHealth::kSilentNs - 2 * kPeriod) << "node " << v;
  }
  c.Resume(node);
  c.Run(c.now + 3 * kSecond);
  for (uint32_t v = 0; v < n; ++v)
    for (const NodeHealth& h : c.views[v].Peers(c.now, c.lost)) EXPECT_EQ(h.state, "ok") << h.node << " from " << v;
  for (uint32_t child : HealthTree::Children(node, n)) EXPECT_EQ(c.views[child].above(), node) << "back under it";
}

TEST(JobHealthTest, AStoppedDaemonInTheMiddleIsNamedWithinFiveSecondsAndNoneBelowIt) { StopAndResume(8, 4); }

TEST(JobHealthTest, AStoppedRootIsNamedAndTheOthersStillSeeEachOther) { StopAndResume(8, 0); }

TEST(JobHealthTest, ALeafAndANodeWithManyBelowStopped) {
  StopAndResume(5, 4);
  StopAndResume(32, 16);
}

TEST(JobHealthTest, TheChildrenOfALostDaemonGoRoundItAtOnceAndItIsLost) {
  Cluster c(8);
  c.Run(3 * kSecond);
  c.lost[4] = true;
  const uint64_t at = c.now;
  c.Run(at + 2 * kSecond);
  EXPECT_EQ(c.views[5].above(), 0u);
  EXPECT_EQ(c.views[6].above(), 0u);
  for (uint32_t v : {0u, 5u, 7u}) {
    EXPECT_EQ(c.View(v, 4).state, "lost");
    for (uint32_t k : {5u, 6u, 7u})
      if (k != v) {
        EXPECT_LE(c.View(v, k).report_age_s, 1.5) << k << " from " << v;
      }
  }
}

TEST(JobHealthTest, ADaemonSilentForThreeSecondsIsUnresponsiveAndALostOneIsLost) {
  Cluster c(3);
  c.stopped[2] = true;  // sends nothing from the start
  c.Run(kSecond);
  EXPECT_EQ(c.View(0, 1).state, "ok");
  EXPECT_EQ(c.View(0, 2).state, "waiting") << "node 2 has sent nothing yet";
  c.Run(JobHealth::kSilentNs + kSecond / 10);
  EXPECT_EQ(c.View(0, 2).state, "unresponsive");
  EXPECT_NE(c.View(0, 2).why.find("no report from its daemon since the job started"), std::string::npos)
      << c.View(0, 2).why;
  c.lost[2] = true;
  EXPECT_EQ(c.View(0, 2).state, "lost");
  EXPECT_EQ(c.View(1, 2).state, "lost");
}

TEST(JobHealthTest, AMalformedBundleIsAnErrorNamingTheNodeAndNothingOfItIsKept) {
  JobHealth viewer(3, 0, 0);
  std::vector<HealthBundle> out;
  const std::string good = "@2 10\n" + JobHealth::EncodeReport(NodeWith(2, 1));
  for (const std::string& bad : {std::string("host 1 2\n3 x\n"), std::string("@9 1\nh 1 2 3 4 5 6\n"),
                                 std::string("@2 x\nh 1 2 3 4 5 6\n"), good + "@1 5\nh 1 2\n",
                                 good + "@1 5\nh 1 2 3 4 5 6\n1 2 3\n",
                                 good + "@1 5\nh 1 2 3 4 5 6\n4 5 7 -1 r - 1 1 1 1 1\n"}) {  // state 7
    const Status st = viewer.Receive(1, false, bad, kSecond, {}, &out);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("node 1 sent a health report"), std::string::npos) << st.message();
  }
  EXPECT_EQ(viewer.Peers(kSecond, {})[1].state, "waiting") << "node 2's good entry came with bad ones";
  EXPECT_FALSE(viewer.Receive(5, false, good, kSecond, {}, &out).ok()) << "not a node of the job";
  EXPECT_FALSE(viewer.Receive(0, false, good, kSecond, {}, &out).ok()) << "itself";
  ASSERT_TRUE(viewer.Receive(1, false, good, kSecond, {}, &out).ok());
  EXPECT_EQ(viewer.Peers(kSecond, {})[1].state, "ok");
  EXPECT_NEAR(viewer.Peers(kSecond, {})[1].report_age_s, 0.01, 1e-9) << "its age came with it";
}

TEST(JobHealthTest, TheNodeThatWaitsLeastIsTheLateOneAndItsLateRankCarriesTheLateness) {
  // Node 1's rank 3 sleeps 50 ms before each step: node 0 waits 50.5 ms for every collective,
  // node 1 only 0.5 ms (rank 3 came 50 ms after rank 2).
  std::vector<NodeHealth> nodes = {NodeWith(0, 2), NodeWith(1, 2), NodeWith(2, 2)};
  for (NodeHealth& n : nodes) {
    n.collectives = 10;
    for (RankHealth& r : n.ranks) r.mean_late_ms = 0;
  }
  nodes[0].wait_p50_ms = 50.5;
  nodes[1].wait_p50_ms = 0.5;
  nodes[1].spread_p50_ms = 50;
  nodes[1].ranks[1].mean_late_ms = 50;
  nodes[2].wait_p50_ms = 50.5;
  nodes[2].collectives = 0;  // nothing spanning nodes yet: not known
  CompareNodeWaits(&nodes);
  EXPECT_NEAR(nodes[0].late_ms, 0.0, 1e-9);
  EXPECT_NEAR(nodes[1].late_ms, 50.0, 1e-9);
  EXPECT_EQ(nodes[2].late_ms, -1.0);
  EXPECT_NEAR(nodes[1].ranks[1].job_late_ms, 50.0, 1e-9);
  EXPECT_NEAR(nodes[1].ranks[0].job_late_ms, 0.0, 1e-9) << "rank 2 came with node 0's ranks";
  EXPECT_NEAR(nodes[0].ranks[0].job_late_ms, 0.0, 1e-9);
  EXPECT_EQ(nodes[2].ranks[0].job_late_ms, -1.0);
}

}  // namespace
}  // namespace syncd
