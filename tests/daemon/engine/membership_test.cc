// A job's membership (engine/membership.h): lost nodes, the global set's nodes, the notices of a
// node's return, as node 0 and as the asking node see them.
#include "daemon/engine/membership.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/base/hex.h"
#include "daemon/transport/loopback/loopback_transport.h"

namespace syncd {
namespace {

TEST(Membership, ALostNodeIsSeenOnceAndTheGlobalSetSpeaksInItsOwnNodeNumbers) {
  LoopbackHub hub(4);
  LoopbackTransport t(&hub, 1);
  Membership m;
  EXPECT_TRUE(m.SeeLostNodes(&t).empty());
  hub.Kill(0);
  hub.Kill(2);
  EXPECT_EQ(m.SeeLostNodes(&t), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(m.SeeLostNodes(&t).empty());  // seen once
  EXPECT_TRUE(m.NodeLost(2));
  EXPECT_FALSE(m.NodeLost(3));
  EXPECT_EQ(m.LostNodes(), (std::vector<uint32_t>{0, 2}));
  m.Change(1, "node 0, node 2 lost; the job went on without them (membership 1)");
  EXPECT_EQ(m.number(), 1u);
  ASSERT_EQ(m.changes().size(), 1u);
  EXPECT_EQ(m.changes()[0].membership, 1u);
  EXPECT_GT(m.changes()[0].unix_s, 1.7e9);
  // Before the set is made afresh every node is its own number; after, the nodes left in order.
  EXPECT_EQ(m.SetNode(3), 3);
  m.SetGlobalNodes({1, 3});
  EXPECT_EQ(m.Leader(), 1u);
  EXPECT_EQ(m.SetNode(3), 1);
  EXPECT_EQ(m.SetNode(2), -1);
  EXPECT_EQ(m.JobNode(1), 3u);
  m.NodeRestarted(2);
  EXPECT_EQ(m.LostNodes(), (std::vector<uint32_t>{0}));
}

TEST(Membership, Node0AnswersEachAskingNodeOnceAndKnowsWhichJoin) {
  Membership m;
  EXPECT_FALSE(m.ReturnWaits(true));
  EXPECT_TRUE(m.Receive(3, ControlMessage{ControlMessage::Kind::kNodeBack, 7, 2, Membership::kJoinsWord}));
  EXPECT_TRUE(m.Receive(1, ControlMessage{ControlMessage::Kind::kNodeBack, 7, 2, ""}));
  EXPECT_TRUE(m.Receive(3, ControlMessage{ControlMessage::Kind::kNodeBack, 7, 2, Membership::kJoinsWord}));
  EXPECT_FALSE(m.Receive(3, ControlMessage{ControlMessage::Kind::kHealth, 7, 0, ""}));  // not the membership's
  EXPECT_TRUE(m.ReturnWaits(false));
  EXPECT_EQ(m.TakeAsking(), (std::vector<uint32_t>{1, 3}));
  EXPECT_TRUE(m.Joins(3));
  EXPECT_FALSE(m.Joins(1));
  m.AskAgain({3});
  EXPECT_EQ(m.TakeAsking(), (std::vector<uint32_t>{3}));
  m.Joined(3);
  EXPECT_FALSE(m.Joins(3));
  // Node 0's answer as every node reads it: node 3 joins on slot 5 with membership 4.
  EXPECT_TRUE(m.Receive(0, ControlMessage{ControlMessage::Kind::kNodeJoin, 7, 4,
                                          "3 " + std::string(Membership::kJoinsWord), 5}));
  const std::vector<Membership::NodeJoin> joins = m.TakeAnswers();
  ASSERT_EQ(joins.size(), 1u);
  EXPECT_EQ(joins[0].node, 3u);
  EXPECT_EQ(joins[0].number, 4u);
  EXPECT_EQ(joins[0].slot, 5u);
  EXPECT_TRUE(joins[0].joins);
  EXPECT_FALSE(m.ReturnWaits(true));
}

TEST(Membership, AReplacementAsksOnceUntilTakenBackAndAsksAgainWhenNode0IsLost) {
  Membership m;
  m.WantBack(/*joins=*/false);
  m.WantBack(/*joins=*/true);  // a second replacement does not change what the node asks
  EXPECT_TRUE(m.wants_back());
  EXPECT_FALSE(m.back_joins());
  EXPECT_TRUE(m.ReturnWaits(true));
  EXPECT_FALSE(m.ReturnWaits(false));
  m.Asked(true);
  EXPECT_TRUE(m.asked());
  m.Asked(false);  // node 0 was lost: ask the next one
  EXPECT_FALSE(m.asked());
  m.TakenBack();
  EXPECT_FALSE(m.wants_back());
  EXPECT_FALSE(m.ReturnWaits(true));
}

TEST(Membership, ARestartedDaemonsAddressIsPutTogetherFromItsPieces) {
  Membership m;
  const std::string address(500, '\x7f');
  const std::string hex = Hex(address);
  ASSERT_TRUE(m.Receive(0, ControlMessage{ControlMessage::Kind::kNodeRestarted, 7, 3, "2 4242 3 hostb", 9}));
  for (int i = 0; i < 3; ++i) {
    const size_t piece = (hex.size() + 2) / 3 / 2 * 2 + 2;
    m.Receive(0, ControlMessage{ControlMessage::Kind::kNodeAddress, 7, 2, hex.substr(i * piece, piece), i});
  }
  ASSERT_EQ(m.restarts().size(), 1u);
  const Membership::RestartedNode& n = m.restarts()[0];
  EXPECT_EQ(n.node, 2u);
  EXPECT_EQ(n.pid, 4242);
  EXPECT_EQ(n.host, "hostb");
  EXPECT_EQ(n.number, 3u);
  EXPECT_EQ(n.slot, 9u);
  EXPECT_EQ(n.got, 3u);
  EXPECT_EQ(n.address, address);
  EXPECT_TRUE(m.ReturnWaits(false));
  // A notice that does not read is logged and dropped.
  m.Receive(0, ControlMessage{ControlMessage::Kind::kNodeRestarted, 7, 3, "garbage", 9});
  EXPECT_EQ(m.restarts().size(), 1u);
}

}  // namespace
}  // namespace syncd
