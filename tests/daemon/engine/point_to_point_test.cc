// PointToPoint's matching and transfers on two in-process "nodes" of 2 ranks each (ranks 0, 1 on
// node 0; 2, 3 on node 1) joined by the loopback transport. The real daemons and clients are
// exercised by tests/python/test_c10d.py and test_jobs.py.
#include "daemon/engine/point_to_point.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "daemon/transport/loopback/loopback_transport.h"

namespace syncd {
namespace {

struct Done {
  uint64_t handle;
  Status status;
};

class PointToPointTest : public ::testing::Test {
 protected:
  PointToPointTest() : hub_(2), net0_(&hub_, 0), net1_(&hub_, 1) {
    Begin(&node0_, &net0_, 0);
    Begin(&node1_, &net1_, 1);
  }

  static void Begin(PointToPoint* p, Transport* net, uint32_t node) {
    PointToPoint::Links links;
    links.transport = net;
    links.job = 7;
    links.node_rank = node;
    links.local_size = 2;
    p->BeginJob(std::move(links));
  }

  // A request over `buffer` (floats); `peer` -1: a receive from any rank.
  static Request Make(abi::OpKind kind, uint32_t rank, int32_t peer, int64_t tag, std::vector<float>* buffer,
                      uint64_t handle) {
    Request r;
    r.kind = kind;
    r.rank = rank;
    r.local_rank = rank % 2;
    r.peer = peer;
    r.tag = tag;
    r.handle = handle;
    r.name = "t" + std::to_string(handle);
    r.dtype = SYNCD_FLOAT32;
    r.shape = {int64_t(buffer->size())};
    r.bytes = buffer->size() * sizeof(float);
    r.data = reinterpret_cast<char*>(buffer->data());
    return r;
  }

  void PollBoth(int rounds = 8) {
    for (int i = 0; i < rounds; ++i) {
      node0_.Poll();
      node1_.Poll();
    }
  }

  static const Done* Find(const std::vector<Done>& done, uint64_t handle) {
    for (const Done& d : done)
      if (d.handle == handle) return &d;
    return nullptr;
  }

  // What each node ended so far (point-to-point hands its ends back: TakeEnded).
  const std::vector<Done>& Done0() { return Collect(node0_, &done0_); }
  const std::vector<Done>& Done1() { return Collect(node1_, &done1_); }
  static const std::vector<Done>& Collect(PointToPoint& p, std::vector<Done>* done) {
    for (PointToPoint::Ended& e : p.TakeEnded()) done->push_back({e.request.handle, e.status});
    return *done;
  }

  LoopbackHub hub_;
  LoopbackTransport net0_, net1_;
  PointToPoint node0_, node1_;
  std::vector<Done> done0_, done1_;
};

TEST_F(PointToPointTest, OnOneNodeASendWaitsForItsReceiveThenBothComplete) {
  std::vector<float> src = {1, 2, 3}, dst(3, 0);
  node0_.Add(Make(abi::OpKind::kSend, 0, 1, 5, &src, 1));
  PollBoth();
  EXPECT_TRUE(Done0().empty());
  EXPECT_EQ(node0_.InFlight(), 1u);
  node0_.Add(Make(abi::OpKind::kRecv, 1, 0, 5, &dst, 2));
  ASSERT_EQ(Done0().size(), 2u);
  EXPECT_TRUE(Find(Done0(), 1)->status.ok());
  EXPECT_EQ(Find(Done0(), 2)->status.message(), "source 0");
  EXPECT_EQ(dst, src);
  EXPECT_EQ(node0_.InFlight(), 0u);
}

TEST_F(PointToPointTest, AcrossNodesTagsSelectAndOneTagKeepsItsOrder) {
  std::vector<float> a = {1}, b = {2}, c = {3};
  node0_.Add(Make(abi::OpKind::kSend, 0, 2, 1, &a, 1));
  node0_.Add(Make(abi::OpKind::kSend, 0, 2, 2, &b, 2));
  node0_.Add(Make(abi::OpKind::kSend, 0, 2, 1, &c, 3));
  std::vector<float> r1(1), r2(1), r3(1);
  node1_.Add(Make(abi::OpKind::kRecv, 2, 0, 2, &r1, 11));
  PollBoth();
  node1_.Add(Make(abi::OpKind::kRecv, 2, 0, 1, &r2, 12));
  node1_.Add(Make(abi::OpKind::kRecv, 2, 0, 1, &r3, 13));
  PollBoth();
  ASSERT_EQ(Done1().size(), 3u);
  EXPECT_EQ(r1[0], 2);
  EXPECT_EQ(r2[0], 1);
  EXPECT_EQ(r3[0], 3);
  for (const Done& d : Done1()) EXPECT_EQ(d.status.message(), "source 0");
  EXPECT_EQ(Done0().size(), 3u);  // the loopback's sends complete at once
  EXPECT_FALSE(node1_.WaitsOnNetwork());
}

TEST_F(PointToPointTest, AReceiveFromAnyRankTakesLocalAndRemoteSendsAndNamesTheSender) {
  std::vector<float> from1 = {10}, from3 = {30}, x(1), y(1);
  node0_.Add(Make(abi::OpKind::kRecv, 0, -1, 0, &x, 1));
  EXPECT_TRUE(node0_.WaitsOnNetwork());  // rank 0 may hear from node 1
  node1_.Add(Make(abi::OpKind::kSend, 3, 0, 0, &from3, 2));
  PollBoth();
  node0_.Add(Make(abi::OpKind::kSend, 1, 0, 0, &from1, 3));
  node0_.Add(Make(abi::OpKind::kRecv, 0, -1, 0, &y, 4));
  PollBoth();
  ASSERT_NE(Find(Done0(), 1), nullptr);
  ASSERT_NE(Find(Done0(), 4), nullptr);
  EXPECT_EQ(Find(Done0(), 1)->status.message(), "source 3");
  EXPECT_EQ(x[0], 30);
  EXPECT_EQ(Find(Done0(), 4)->status.message(), "source 1");
  EXPECT_EQ(y[0], 10);
}

TEST_F(PointToPointTest, AReceiveOfTheWrongSizeFailsNamingBothAndTheNextOneWorks) {
  std::vector<float> four = {1, 2, 3, 4}, three(3), one = {9}, got(1);
  node0_.Add(Make(abi::OpKind::kSend, 1, 3, 0, &four, 1));
  node1_.Add(Make(abi::OpKind::kRecv, 3, 1, 0, &three, 2));
  PollBoth();
  ASSERT_EQ(Done1().size(), 1u);
  EXPECT_EQ(Done1()[0].status.code(), SYNCD_ERR_MISMATCH);
  EXPECT_NE(Done1()[0].status.message().find("rank 1 sent 16 bytes of float32 but the receive holds 12 bytes"),
            std::string::npos)
      << Done1()[0].status.message();
  EXPECT_EQ(three, std::vector<float>(3, 0));  // nothing written
  EXPECT_TRUE(Find(Done0(), 1)->status.ok());
  node0_.Add(Make(abi::OpKind::kSend, 1, 3, 0, &one, 3));
  node1_.Add(Make(abi::OpKind::kRecv, 3, 1, 0, &got, 4));
  PollBoth();
  EXPECT_TRUE(Find(Done1(), 4)->status.ok());
  EXPECT_EQ(got[0], 9);
}

TEST_F(PointToPointTest, ALostNodeFailsTheReceivesThatWaitForIt) {
  std::vector<float> x(2), z = {5, 6}, w(2);
  node0_.Add(Make(abi::OpKind::kRecv, 0, 2, 0, &x, 1));
  node0_.Add(Make(abi::OpKind::kRecv, 1, 0, 0, &w, 3));  // from this node: unaffected
  PollBoth();
  hub_.Kill(1);
  PollBoth();
  ASSERT_NE(Find(Done0(), 1), nullptr);
  EXPECT_FALSE(Find(Done0(), 1)->status.ok());
  EXPECT_NE(Find(Done0(), 1)->status.message().find("recv of tensor 't1' (rank 2 to rank 0, tag 0)"), std::string::npos)
      << Find(Done0(), 1)->status.message();
  EXPECT_EQ(Find(Done0(), 3), nullptr);
  node0_.Add(Make(abi::OpKind::kSend, 0, 1, 0, &z, 4));
  EXPECT_EQ(w, z);
}

TEST_F(PointToPointTest, ALostRankFailsReceivesFromItOrFromAnyoneAndItsOwnSends) {
  std::vector<float> x(1), y(1), z(1), s = {1};
  node0_.Add(Make(abi::OpKind::kSend, 1, 0, 4, &s, 1));       // rank 1's, not taken yet
  node0_.Add(Make(abi::OpKind::kRecv, 0, 1, 0, &x, 2));       // tag 0: does not take it
  node0_.Add(Make(abi::OpKind::kRecv, 0, -1, 9, &y, 3));
  node0_.Add(Make(abi::OpKind::kRecv, 0, 2, 0, &z, 4));       // from node 1: not about rank 1
  EXPECT_TRUE(node0_.Holds(1));  // a rank leaving now abandons its send
  EXPECT_TRUE(node0_.Holds(0));
  EXPECT_FALSE(node0_.Holds(2));
  node0_.EndRank(1, 1, Status(SYNCD_ERR_RANK_LOST, "rank 1 exited"));
  EXPECT_FALSE(node0_.Holds(1));
  ASSERT_NE(Find(Done0(), 1), nullptr);
  ASSERT_NE(Find(Done0(), 2), nullptr);
  ASSERT_NE(Find(Done0(), 3), nullptr);
  EXPECT_EQ(Find(Done0(), 2)->status.code(), SYNCD_ERR_RANK_LOST);
  EXPECT_NE(Find(Done0(), 3)->status.message().find("rank 1 exited"), std::string::npos);
  EXPECT_EQ(Find(Done0(), 4), nullptr);
  node0_.EndAll(Status(SYNCD_ERR_RANK_LOST, "its job ended"));
  ASSERT_NE(Find(Done0(), 4), nullptr);
  EXPECT_EQ(node0_.InFlight(), 0u);
}

}  // namespace
}  // namespace syncd
