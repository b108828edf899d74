// The control channel (coord/control_channel.h) on the loopback transport: three nodes' channels
// driven from one thread.
#include "daemon/coord/control_channel.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "daemon/transport/counting_transport.h"
#include "daemon/transport/loopback/loopback_transport.h"
#include "daemon/transport/tag_space.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

struct Nodes {
  explicit Nodes(uint32_t n) : hub(n) {
    for (uint32_t i = 0; i < n; ++i) {
      raw.push_back(std::make_unique<LoopbackTransport>(&hub, i));
      counted.push_back(std::make_unique<CountingTransport>(raw.back().get()));
      channels.push_back(std::make_unique<ControlChannel>(counted.back().get(), raw.back().get()));
      channels.back()->Open();
    }
  }
  std::vector<ControlChannel::Incoming> ReceiveAt(uint32_t node) {
    for (auto& t : raw) t->Progress();
    return channels[node]->Receive();
  }
  LoopbackHub hub;
  std::vector<std::unique_ptr<LoopbackTransport>> raw;
  std::vector<std::unique_ptr<CountingTransport>> counted;
  std::vector<std::unique_ptr<ControlChannel>> channels;
};

TEST(ControlChannel, AMessageToEveryNodeArrivesOnceEachAndOnlyCoordinationsCount) {
  Nodes n(3);
  n.channels[0]->Send(-1, ControlMessage{ControlMessage::Kind::kCycle, 7, 12, ""}, /*notice=*/false);
  n.channels[0]->Send(2, ControlMessage{ControlMessage::Kind::kHealth, 7, 0, "report"}, /*notice=*/true);
  EXPECT_EQ(n.counted[0]->sent(), 2u);  // the cycle request to nodes 1 and 2; the notice is not counted
  for (uint32_t node : {1u, 2u}) {
    std::vector<ControlChannel::Incoming> in = n.ReceiveAt(node);
    ASSERT_EQ(in.size(), 1u) << node;
    EXPECT_EQ(in[0].from, 0u);
    ASSERT_TRUE(in[0].message.ok());
    EXPECT_EQ(in[0].message->kind, ControlMessage::Kind::kCycle);
    EXPECT_EQ(in[0].message->cycle, 12u);
    EXPECT_EQ(in[0].message->job, 7u);
  }
  // The receive was posted again: node 2's next message is the notice.
  std::vector<ControlChannel::Incoming> in = n.ReceiveAt(2);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].message->text, "report");
  EXPECT_TRUE(n.ReceiveAt(1).empty());
  EXPECT_TRUE(n.channels[0]->Flush(abi::MonotonicNs() + 1'000'000'000));
}

TEST(ControlChannel, ALostPeerComesAsItsErrorOnceAndIsSentNothingMore) {
  Nodes n(3);
  n.hub.Kill(1);
  std::vector<ControlChannel::Incoming> in = n.ReceiveAt(0);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].from, 1u);
  EXPECT_TRUE(in[0].lost);
  EXPECT_EQ(in[0].message.status().code(), SYNCD_ERR_RANK_LOST);
  EXPECT_TRUE(n.ReceiveAt(0).empty());  // listened to no more
  n.channels[0]->Send(-1, ControlMessage{ControlMessage::Kind::kAbort, 7, 0, "why"}, false);
  EXPECT_EQ(n.counted[0]->sent(), 1u);  // node 2 only
  EXPECT_FALSE(n.channels[0]->Reap());
}

TEST(ControlChannel, BytesThatDoNotDecodeComeAsAnErrorNamingWhy) {
  Nodes n(2);
  std::vector<char> junk(kControlMessageBytes, 'z');
  n.raw[1]->Send(0, kControlTag, junk.data(), junk.size(), nullptr);
  std::vector<ControlChannel::Incoming> in = n.ReceiveAt(0);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_FALSE(in[0].lost);
  ASSERT_FALSE(in[0].message.ok());
  EXPECT_FALSE(in[0].message.status().message().empty());
}

}  // namespace
}  // namespace syncd
