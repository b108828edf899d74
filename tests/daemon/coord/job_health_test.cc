#include "daemon/coord/job_health.h"

#include <gtest/gtest.h>

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
    r.collectives = 100;
    r.last = i;
    r.mean_late_ms = 1.5 * i;
    r.p95_late_ms = 2.5 * i;
    r.wait_share = 0.01 * i;
    h.ranks.push_back(r);
  }
  return h;
}

// Node 1's report reaches node 0 (chunk by chunk, as the control channel carries it).
void Deliver(JobHealth& to, uint32_t from, const std::vector<ControlMessage>& chunks, uint64_t now) {
  for (const ControlMessage& m : chunks) {
    char bytes[kControlMessageBytes];
    EncodeControl(m, bytes);  // what the wire keeps of it
    StatusOr<ControlMessage> back = DecodeControl(bytes, sizeof(bytes));
    ASSERT_TRUE(back.ok()) << back.status().message();
    ASSERT_TRUE(to.Receive(from, *back, now).ok());
  }
}

TEST(JobHealthTest, ANodesReportReachesThePeerWithEveryRankEvenWhenItTakesManyChunks) {
  JobHealth sender(2, 1, 0), viewer(2, 0, 0);
  const NodeHealth mine = NodeWith(1, 40);  // far more rows than one control message holds
  const std::vector<ControlMessage> chunks = sender.Encode(mine, 7);
  ASSERT_GT(chunks.size(), 3u);
  for (const ControlMessage& m : chunks) EXPECT_EQ(m.job, 7u);
  Deliver(viewer, 1, chunks, kSecond);
  const std::vector<NodeHealth> peers = viewer.Peers(kSecond + kSecond / 2, {false, false});
  ASSERT_EQ(peers.size(), 1u);
  const NodeHealth& got = peers[0];
  EXPECT_EQ(got.node, 1u);
  EXPECT_EQ(got.host, "host-1");
  EXPECT_EQ(got.daemon_pid, 4001);
  EXPECT_EQ(got.pending, 3u);
  EXPECT_EQ(got.collectives, 7u);
  EXPECT_NEAR(got.wait_p50_ms, 1.25, 1e-9);
  EXPECT_NEAR(got.wait_p95_ms, 2.5, 1e-9);
  EXPECT_NEAR(got.spread_p50_ms, 0.75, 1e-9);
  EXPECT_EQ(got.state, "ok");
  EXPECT_NEAR(got.report_age_s, 0.5, 1e-9);
  ASSERT_EQ(got.ranks.size(), 40u);
  for (uint32_t i = 0; i < 40; ++i) {
    const RankHealth& r = got.ranks[i];
    EXPECT_EQ(r.rank, 40 + i);
    EXPECT_EQ(r.pid, int32_t(5040 + i));
    EXPECT_NEAR(r.last_seen_s, 0.25 * i + 0.5, 1e-3) << "aged by the report's age";
    EXPECT_EQ(r.process, i % 2 ? "sleeping" : "running");
    EXPECT_EQ(r.last, i);
    EXPECT_NEAR(r.mean_late_ms, 1.5 * i, 1e-3);
    EXPECT_NEAR(r.p95_late_ms, 2.5 * i, 1e-3);
    EXPECT_NEAR(r.wait_share, 0.01 * i, 1e-6);
    EXPECT_EQ(r.why, "");
  }
}

TEST(JobHealthTest, AnUnresponsiveRankIsNamedInWordsOnThePeer) {
  JobHealth sender(2, 1, 0), viewer(2, 0, 0);
  NodeHealth mine = NodeWith(1, 2);
  mine.ranks[0].process = "stopped";
  mine.ranks[0].unresponsive = 'S';
  mine.ranks[1].last_seen_s = 4.0;
  mine.ranks[1].unresponsive = 'N';
  Deliver(viewer, 1, sender.Encode(mine, 1), kSecond);
  const std::vector<NodeHealth> peers = viewer.Peers(kSecond, {false, false});
  ASSERT_EQ(peers[0].ranks.size(), 2u);
  EXPECT_EQ(peers[0].ranks[0].why, "stopped (SIGSTOP, Ctrl-Z or a debugger)");
  EXPECT_EQ(peers[0].ranks[1].why, "not calling syncd for 4.0 s while a tensor waits for it (process sleeping)");
}

TEST(JobHealthTest, ADaemonSilentForThreeSecondsIsUnresponsiveAndALostOneIsLost) {
  JobHealth sender(3, 1, 0), viewer(3, 0, 0);
  Deliver(viewer, 1, sender.Encode(NodeWith(1, 2), 1), kSecond);
  std::vector<NodeHealth> peers = viewer.Peers(2 * kSecond, {false, false, false});
  ASSERT_EQ(peers.size(), 2u);
  EXPECT_EQ(peers[0].state, "ok");
  EXPECT_EQ(peers[1].state, "waiting") << "node 2 has sent nothing yet";
  peers = viewer.Peers(kSecond + JobHealth::kSilentNs, {false, false, false});
  EXPECT_EQ(peers[0].state, "unresponsive");
  EXPECT_NE(peers[0].why.find("no report from its daemon for 3.0 s"), std::string::npos) << peers[0].why;
  EXPECT_EQ(peers[0].ranks.size(), 2u) << "its last report is still shown";
  EXPECT_EQ(peers[1].state, "unresponsive");
  peers = viewer.Peers(kSecond + JobHealth::kSilentNs, {false, true, false});
  EXPECT_EQ(peers[0].state, "lost");
  // A fresh report brings it back.
  Deliver(viewer, 1, sender.Encode(NodeWith(1, 2), 1), 5 * kSecond);
  EXPECT_EQ(viewer.Peers(5 * kSecond, {false, false, false})[0].state, "ok");
}

TEST(JobHealthTest, AReportCutOffCountsOnlyOnceANewOneIsWhole) {
  JobHealth sender(2, 1, 0), viewer(2, 0, 0);
  std::vector<ControlMessage> first = sender.Encode(NodeWith(1, 30), 1);
  ASSERT_GT(first.size(), 2u);
  first.pop_back();  // its last chunk never came
  Deliver(viewer, 1, first, kSecond);
  EXPECT_EQ(viewer.Peers(kSecond, {false, false})[0].state, "waiting");
  Deliver(viewer, 1, sender.Encode(NodeWith(1, 30), 1), 2 * kSecond);
  const NodeHealth got = viewer.Peers(2 * kSecond, {false, false})[0];
  EXPECT_EQ(got.state, "ok");
  EXPECT_EQ(got.ranks.size(), 30u);
}

TEST(JobHealthTest, AMalformedReportIsAnErrorNamingTheNode) {
  JobHealth viewer(2, 0, 0);
  const Status st = viewer.Receive(1, ControlMessage{ControlMessage::Kind::kHealth, 1, 1 << 16 | 0 << 8 | 1, "host 1 2\n3 x\n"}, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 1 sent a health report"), std::string::npos) << st.message();
  EXPECT_FALSE(viewer.Receive(5, ControlMessage{ControlMessage::Kind::kHealth, 1, 1 << 16 | 1, "h 1 2\n"}, 1).ok());
  EXPECT_FALSE(viewer.Receive(1, ControlMessage{ControlMessage::Kind::kHealth, 1, 1 << 16 | 3 << 8 | 2, "h 1 2\n"}, 1).ok());
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
