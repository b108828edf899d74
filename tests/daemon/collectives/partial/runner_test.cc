#include "daemon/collectives/partial/runner.h"

#include "daemon/transport/loopback/loopback_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace syncd {
namespace {

struct Done {
  std::string name;
  uint32_t rank;
  Status status;
  std::vector<float> data;  // the tensor when it completed
};

// A float32 partial allreduce request of set rank `rank` (`local_rank` on its node) over `data`.
Request PartialRequest(std::vector<float>* data, const std::string& name, uint32_t rank, uint32_t local_rank,
                       syncd_partial_mode mode, int quorum, syncd_reduce_op op) {
  Request r;
  r.kind = abi::OpKind::kPartialAllreduce;
  r.name = name;
  r.rank = r.set_rank = rank;
  r.local_rank = local_rank;
  r.dtype = SYNCD_FLOAT32;
  r.op = op;
  r.partial_mode = mode;
  r.quorum = quorum;
  r.shape = {int64_t(data->size())};
  r.bytes = data->size() * sizeof(float);
  r.data = reinterpret_cast<char*>(data->data());
  return r;
}

// Four local ranks of a four-rank set; each request's tensor is a fresh vector of `n` floats.
class PartialRunnerTest : public ::testing::Test {
 protected:
  PartialRunnerTest()
      : runner_(PartialPlace{4, {0, 4}, 0, 0, nullptr, nullptr}) {}

  // What the process set does after each call: completes what the runner finished.
  void Collect() {
    EXPECT_TRUE(runner_.TakeMessages().empty()) << "one node sends nothing";
    for (const PartialCompletion& c : runner_.TakeCompleted())
      for (const Request& r : c.requests) {
        const float* f = reinterpret_cast<const float*>(r.data);
        done_.push_back({r.name, r.rank, c.status, std::vector<float>(f, f + r.bytes / sizeof(float))});
      }
  }
  Status Submit(uint32_t rank, std::vector<float> v, syncd_partial_mode mode = SYNCD_PARTIAL_SOLO, int quorum = 0,
                syncd_reduce_op op = SYNCD_SUM, const std::string& name = "g") {
    buffers_.push_back(std::make_unique<std::vector<float>>(std::move(v)));
    Status st = runner_.Add(PartialRequest(buffers_.back().get(), name, rank, rank, mode, quorum, op));
    Collect();
    return st;
  }

  // "round R nap N initiator I fresh F" of completion `i`.
  static std::map<std::string, int> Info(const Done& d) {
    unsigned long long round = 0;
    int nap = 0, initiator = 0, fresh = 0;
    EXPECT_EQ(sscanf(d.status.message().c_str(), "round %llu nap %d initiator %d fresh %d", &round, &nap, &initiator,
                     &fresh),
              4)
        << d.status.message();
    return {{"round", int(round)}, {"nap", nap}, {"initiator", initiator}, {"fresh", fresh}};
  }

  PartialRunner runner_;
  std::vector<Done> done_;
  std::vector<std::unique_ptr<std::vector<float>>> buffers_;
};

TEST_F(PartialRunnerTest, SoloRunsAtTheFirstArrivalAndALateRankGetsTheLatestResultAndLosesNothing) {
  ASSERT_TRUE(Submit(0, {1, 0}).ok());  // round 1: rank 0 alone
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].data, (std::vector<float>{1, 0}));
  EXPECT_EQ(Info(done_[0]), (std::map<std::string, int>{{"round", 1}, {"nap", 1}, {"initiator", 0}, {"fresh", 1}}));
  EXPECT_NE(done_[0].status.message().find("ranks 1"), std::string::npos);  // bitmap: rank 0 only
  ASSERT_TRUE(Submit(1, {0, 10}).ok());  // late for round 1: gets it, its tensor waits
  ASSERT_EQ(done_.size(), 2u);
  EXPECT_EQ(done_[1].data, (std::vector<float>{1, 0}));
  EXPECT_EQ(Info(done_[1])["fresh"], 0);
  EXPECT_EQ(Info(done_[1])["round"], 1);
  ASSERT_TRUE(Submit(1, {0, 20}).ok());  // fresh for round 2, with its stale 10
  ASSERT_EQ(done_.size(), 3u);
  EXPECT_EQ(done_[2].data, (std::vector<float>{0, 30}));
  EXPECT_EQ(Info(done_[2])["nap"], 1);
  EXPECT_EQ(runner_.in_flight(), 0u);
  const std::vector<PartialOpSnapshot> s = runner_.Snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].rounds, 2u);
  EXPECT_EQ(s[0].late, 1u);
  EXPECT_EQ(s[0].most_absent.front().second, 2u);  // ranks 2 and 3 missed both rounds
}

TEST_F(PartialRunnerTest, ARankRoundsBehindGetsEachRoundsResultInOrderSoModelsStayEqual) {
  for (float k = 1; k <= 3; ++k) ASSERT_TRUE(Submit(0, {k}).ok());  // rounds 1..3: rank 0 alone
  ASSERT_EQ(done_.size(), 3u);
  for (int call = 1; call <= 3; ++call) {  // rank 1's calls 1..3 are late: rounds 1..3, in order
    ASSERT_TRUE(Submit(1, {0}).ok());
    EXPECT_EQ(Info(done_.back())["round"], call);
    EXPECT_EQ(Info(done_.back())["fresh"], 0);
    EXPECT_EQ(done_.back().data[0], float(call));
  }
  ASSERT_TRUE(Submit(1, {10}).ok());  // call 4: fresh, round 4
  EXPECT_EQ(Info(done_.back())["round"], 4);
  EXPECT_EQ(Info(done_.back())["fresh"], 1);
  EXPECT_EQ(done_.back().data[0], 10.f);
}

TEST_F(PartialRunnerTest, AverageDividesByTheContributionsTheRoundSummed) {
  ASSERT_TRUE(Submit(0, {2}, SYNCD_PARTIAL_SOLO, 0, SYNCD_AVERAGE).ok());  // round 1: 2 / 1
  ASSERT_TRUE(Submit(1, {4}, SYNCD_PARTIAL_SOLO, 0, SYNCD_AVERAGE).ok());  // late
  ASSERT_TRUE(Submit(2, {6}, SYNCD_PARTIAL_SOLO, 0, SYNCD_AVERAGE).ok());  // late
  ASSERT_TRUE(Submit(0, {8}, SYNCD_PARTIAL_SOLO, 0, SYNCD_AVERAGE).ok());  // round 2: (4 + 6 + 8) / 3
  ASSERT_EQ(done_.size(), 4u);
  EXPECT_EQ(done_[0].data[0], 2.f);
  EXPECT_EQ(done_[3].data[0], 6.f);
}

TEST_F(PartialRunnerTest, QuorumWaitsForExactlyKFreshRanks) {
  ASSERT_TRUE(Submit(0, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  ASSERT_TRUE(Submit(1, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  EXPECT_TRUE(done_.empty());
  EXPECT_EQ(runner_.in_flight(), 2u);
  ASSERT_TRUE(Submit(3, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  ASSERT_EQ(done_.size(), 3u);
  for (const Done& d : done_) {
    EXPECT_EQ(d.data[0], 3.f);
    EXPECT_EQ(Info(d)["nap"], 3);
  }
  ASSERT_TRUE(Submit(2, {5}, SYNCD_PARTIAL_SOLO, 3).ok());  // late: round 1's result, its 5 waits
  EXPECT_EQ(done_.back().data[0], 3.f);
  EXPECT_EQ(Info(done_.back())["fresh"], 0);
}

TEST_F(PartialRunnerTest, MajorityRunsWhenTheRoundsInitiatorArrives) {
  for (uint64_t round = 1; round <= 6; ++round) {
    const uint32_t initiator = PartialInitiator("g", round, 4);
    const size_t before = done_.size();
    for (uint32_t r = 0; r < 4; ++r) {
      if (r != initiator) {
        ASSERT_TRUE(Submit(r, {1}, SYNCD_PARTIAL_MAJORITY).ok());
      }
    }
    EXPECT_EQ(done_.size(), before) << "round " << round << " ran before its initiator " << initiator << " arrived";
    ASSERT_TRUE(Submit(initiator, {1}, SYNCD_PARTIAL_MAJORITY).ok());
    ASSERT_EQ(done_.size(), before + 4);
    for (size_t i = before; i < done_.size(); ++i) {
      EXPECT_EQ(Info(done_[i])["initiator"], int(initiator));
      EXPECT_EQ(Info(done_[i])["nap"], 4);
      EXPECT_EQ(done_[i].data[0], 4.f);
    }
  }
  // The draw: the same for the same name and round, spread over the ranks.
  EXPECT_EQ(PartialInitiator("g", 7, 4), PartialInitiator("g", 7, 4));
  std::vector<int> hits(4, 0);
  for (uint64_t round = 1; round <= 400; ++round) ++hits[PartialInitiator("g", round, 4)];
  for (int h : hits) EXPECT_GT(h, 60);
}

// Ranks running free (a rank calls again as soon as its last call completed), 40 calls each,
// then a synchronous collective: each rank's k-th call is for round k, so when every rank has made
// its 40 calls nobody waits (a rank fresh for a round after its last step would wait forever).
TEST_F(PartialRunnerTest, MajorityNeverWaitsOnceEveryRankMadeItsLastStepsCall) {
  std::mt19937 rng(5);
  std::vector<int> calls(4, 0);
  std::vector<size_t> pending(4, SIZE_MAX);  // index in buffers_ of the rank's waiting call
  for (int tick = 0; tick < 100000; ++tick) {
    std::vector<uint32_t> ready;
    for (uint32_t r = 0; r < 4; ++r) {
      if (pending[r] != SIZE_MAX &&
          std::any_of(done_.begin(), done_.end(), [&](const Done& d) { return d.rank == r; }) &&
          std::count_if(done_.begin(), done_.end(), [&](const Done& d) { return d.rank == r; }) == calls[r])
        pending[r] = SIZE_MAX;
      if (pending[r] == SIZE_MAX && calls[r] < 40) ready.push_back(r);
    }
    if (ready.empty()) break;
    const uint32_t r = ready[rng() % ready.size()];
    ASSERT_TRUE(Submit(r, {1}, SYNCD_PARTIAL_MAJORITY).ok());
    ++calls[r];
    pending[r] = buffers_.size() - 1;
  }
  EXPECT_EQ(calls, (std::vector<int>{40, 40, 40, 40}));
  EXPECT_EQ(runner_.in_flight(), 0u) << "a rank still waits after its 40th call";
  EXPECT_EQ(done_.size(), 160u);
}

TEST_F(PartialRunnerTest, AChangedShapeOrModeIsAMismatchAndFailAllFailsTheWaiting) {
  ASSERT_TRUE(Submit(0, {1, 2}, SYNCD_PARTIAL_SOLO, 2).ok());
  const Status st = Submit(1, {1}, SYNCD_PARTIAL_SOLO, 2);
  EXPECT_EQ(st.code(), SYNCD_ERR_MISMATCH);
  EXPECT_NE(st.message().find("tensor 'g': partial allreduce from rank 1 is float32 [1]"), std::string::npos) << st.message();
  EXPECT_EQ(Submit(1, {1, 2}, SYNCD_PARTIAL_MAJORITY, 2).code(), SYNCD_ERR_MISMATCH);
  EXPECT_EQ(Submit(0, {1, 2}, SYNCD_PARTIAL_SOLO, 2).code(), SYNCD_ERR_INVALID);  // rank 0 already waits
  runner_.FailAll(Status(SYNCD_ERR_RANK_LOST, "rank 3 is gone"));
  Collect();
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].status.code(), SYNCD_ERR_RANK_LOST);
  EXPECT_EQ(done_[0].status.message(), "tensor 'g': rank 3 is gone");
  EXPECT_EQ(runner_.in_flight(), 0u);
}

// Three nodes holding set ranks {0, 1}, {2}, {3, 4}: runners joined by a loopback transport, their
// control messages delivered in process.
class PartialNodesTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kRanks = 5;

  PartialNodesTest() : PartialNodesTest({0, 2, 3, 5}) {}
  explicit PartialNodesTest(std::vector<uint32_t> offsets)
      : offsets_(std::move(offsets)), nodes_(uint32_t(offsets_.size() - 1)), hub_(nodes_), runs_sent_(nodes_, 0) {
    for (uint32_t n = 0; n < nodes_; ++n) {
      transports_.push_back(std::make_unique<LoopbackTransport>(&hub_, n));
      PartialPlace place{offsets_.back(), offsets_, n, 7, transports_.back().get(), nullptr};
      runners_.push_back(std::make_unique<PartialRunner>(place));
    }
  }

  // What each node's process set does after each call: sends the runner's control messages
  // (delivered in process here) and completes what it finished.
  void Collect(uint32_t n) {
    for (PartialMessage& m : runners_[n]->TakeMessages()) {
      ++messages_;
      if (m.message.kind == ControlMessage::Kind::kPartialRun) runs_sent_[n] += m.node < 0 ? int(nodes_) - 1 : 1;
      for (uint32_t d = 0; d < nodes_; ++d)
        if (d != n && (m.node < 0 || uint32_t(m.node) == d)) runners_[d]->Receive(n, m.message);
    }
    for (const PartialCompletion& c : runners_[n]->TakeCompleted())
      for (const Request& r : c.requests) {
        const float* f = reinterpret_cast<const float*>(r.data);
        done_.push_back({r.name, r.rank, c.status, std::vector<float>(f, f + r.bytes / sizeof(float))});
      }
  }

  uint32_t NodeOf(uint32_t rank) const {
    uint32_t n = 0;
    while (offsets_[n + 1] <= rank) ++n;
    return n;
  }

  Status Submit(uint32_t rank, std::vector<float> v, syncd_partial_mode mode = SYNCD_PARTIAL_SOLO, int quorum = 0,
                const std::string& name = "g") {
    buffers_.push_back(std::make_unique<std::vector<float>>(std::move(v)));
    Status st = runners_[NodeOf(rank)]->Add(
        PartialRequest(buffers_.back().get(), name, rank, rank - offsets_[NodeOf(rank)], mode, quorum, SYNCD_SUM));
    Collect(NodeOf(rank));
    return st;
  }

  // Polls every node until nothing moves.
  void Pump() {
    for (int quiet = 0; quiet < 3;) {
      bool any = false;
      for (uint32_t n = 0; n < nodes_; ++n) {
        bool did = false;
        ASSERT_TRUE(runners_[n]->Poll(&did).ok());
        Collect(n);
        any |= did;
      }
      quiet = any ? 0 : quiet + 1;
    }
  }

  const Done* DoneOf(uint32_t rank, size_t from = 0) const {
    for (size_t i = done_.size(); i-- > from;)
      if (done_[i].rank == rank) return &done_[i];
    return nullptr;
  }

  const std::vector<uint32_t> offsets_;
  const uint32_t nodes_;
  LoopbackHub hub_;
  std::vector<std::unique_ptr<LoopbackTransport>> transports_;
  std::vector<std::unique_ptr<PartialRunner>> runners_;
  std::vector<Done> done_;
  std::vector<std::unique_ptr<std::vector<float>>> buffers_;
  int messages_ = 0;
  std::vector<int> runs_sent_;  // kPartialRun messages, by sender
};

// A name node `node` of `nodes` coordinates.
std::string NameCoordinatedBy(uint32_t node, uint32_t nodes) {
  for (int i = 0;; ++i)
    if (const std::string name = "g" + std::to_string(i); PartialCoordinator(name, nodes) == node) return name;
}

TEST_F(PartialNodesTest, SoloOnAnyNodeRunsWithTheOthersStaleTensorsAndNothingIsLost) {
  // Rank r contributes r + 1 in every call; the ranks call in an uneven order, so most calls are
  // late and their tensors wait for a later round, on whichever node it starts.
  float contributed = 0;
  std::vector<int> calls(kRanks, 0);
  for (int step = 0; step < 14; ++step) {
    const uint32_t rank = uint32_t((step * 3 + step / 4) % kRanks);
    const size_t before = done_.size();
    ASSERT_TRUE(Submit(rank, {float(rank + 1)}).ok());
    contributed += float(rank + 1);
    ++calls[rank];
    Pump();
    ASSERT_EQ(done_.size(), before + 1) << "step " << step << ": rank " << rank << " did not complete";
    ASSERT_TRUE(done_.back().status.ok()) << done_.back().status.message();
  }
  // The rank with the most calls is fresh for the next round (call i is for round i): its zero
  // runs one that takes all that is left.
  const uint32_t most = uint32_t(std::max_element(calls.begin(), calls.end()) - calls.begin());
  ASSERT_TRUE(Submit(most, {0}).ok());
  Pump();
  EXPECT_NE(done_.back().status.message().find(" fresh 1"), std::string::npos) << done_.back().status.message();
  Pump();
  std::map<int, float> results;  // by round
  for (const Done& d : done_) {
    int round = 0, nap = 0, init = 0, fresh = 0;
    ASSERT_EQ(sscanf(d.status.message().c_str(), "round %d nap %d initiator %d fresh %d", &round, &nap, &init, &fresh), 4);
    if (fresh == 1) {
      EXPECT_EQ(nap, 1);
      EXPECT_EQ(uint32_t(init), d.rank);  // solo: the rank that arrived is the initiator
      EXPECT_EQ(results.count(round), 0u) << "round " << round << " completed twice fresh";
    }
    if (results.count(round)) {
      EXPECT_EQ(results[round], d.data[0]) << "round " << round << " differs between ranks";
    }
    results[round] = d.data[0];
  }
  float total = 0;
  for (const auto& [round, value] : results) total += value;
  EXPECT_GT(results.size(), 4u);
  EXPECT_EQ(total, contributed);
  EXPECT_EQ(int(results.rbegin()->first), int(results.size()));  // rounds 1..N, none skipped
}

TEST_F(PartialNodesTest, MajorityInitiatorSequenceIsTheSameOnEveryNode) {
  for (uint64_t round = 1; round <= 8; ++round) {
    const uint32_t initiator = PartialInitiator("g", round, kRanks);
    const size_t before = done_.size();
    for (uint32_t r = 0; r < kRanks; ++r)
      if (r != initiator) {
        ASSERT_TRUE(Submit(r, {1}, SYNCD_PARTIAL_MAJORITY).ok());
      }
    Pump();
    EXPECT_EQ(done_.size(), before) << "round " << round << " ran before its initiator " << initiator << " arrived";
    ASSERT_TRUE(Submit(initiator, {1}, SYNCD_PARTIAL_MAJORITY).ok());
    Pump();
    ASSERT_EQ(done_.size(), before + kRanks) << "round " << round;
    for (size_t i = before; i < done_.size(); ++i) {
      ASSERT_TRUE(done_[i].status.ok()) << done_[i].status.message();
      int got_round = 0, nap = 0, init = 0, fresh = 0;
      ASSERT_EQ(sscanf(done_[i].status.message().c_str(), "round %d nap %d initiator %d fresh %d", &got_round, &nap, &init,
                       &fresh),
                4);
      EXPECT_EQ(got_round, int(round));
      EXPECT_EQ(init, int(initiator)) << "rank " << done_[i].rank;
      EXPECT_EQ(nap, int(kRanks));
      EXPECT_EQ(done_[i].data[0], float(kRanks));
    }
  }
}

TEST_F(PartialNodesTest, QuorumCountsFreshRanksOnEveryNodeAndWaitsForExactlyK) {
  ASSERT_TRUE(Submit(0, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  ASSERT_TRUE(Submit(4, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  Pump();
  EXPECT_TRUE(done_.empty()) << "ran with 2 of quorum 3: " << done_.front().status.message();
  ASSERT_TRUE(Submit(2, {1}, SYNCD_PARTIAL_SOLO, 3).ok());
  Pump();
  ASSERT_EQ(done_.size(), 3u);
  for (const Done& d : done_) {
    EXPECT_EQ(d.data[0], 3.f);
    EXPECT_NE(d.status.message().find("nap 3 "), std::string::npos) << d.status.message();
    EXPECT_NE(d.status.message().find("ranks 51"), std::string::npos) << d.status.message();  // ranks 0, 2, 4
  }
}

TEST_F(PartialNodesTest, ARankLateWhileItsRoundIsOnTheNetworkGetsThatRoundsResult) {
  const std::string g = NameCoordinatedBy(0, nodes_);
  auto submit = [&](uint32_t rank, float v) { return Submit(rank, {v}, SYNCD_PARTIAL_SOLO, 0, g); };
  ASSERT_TRUE(submit(0, 1).ok());  // node 0 (the name's coordinator) starts round 1 at once
  ASSERT_TRUE(done_.empty());
  ASSERT_TRUE(submit(1, 10).ok());  // late for round 1, which is still on the network
  ASSERT_TRUE(done_.empty());
  Pump();
  ASSERT_EQ(done_.size(), 2u);
  EXPECT_EQ(DoneOf(0)->data[0], 1.f);
  EXPECT_EQ(DoneOf(1)->data[0], 1.f);
  EXPECT_NE(DoneOf(1)->status.message().find("fresh 0"), std::string::npos);
  ASSERT_TRUE(submit(3, 1000).ok());  // late too: round 1 ran without it
  Pump();
  EXPECT_EQ(DoneOf(3)->data[0], 1.f);
  ASSERT_TRUE(submit(0, 100).ok());  // round 2 holds ranks 1's and 3's stale tensors
  Pump();
  EXPECT_EQ(DoneOf(0)->data[0], 1110.f);
  EXPECT_NE(DoneOf(0)->status.message().find("round 2 nap 1 initiator 0 fresh 1"), std::string::npos);
}

TEST_F(PartialNodesTest, NodesThatDisagreeFailTheRoundOnEveryNodeNamingThem) {
  // The round runs as the name's coordinator (node 0 here) has it; the other node is named.
  const std::string g = NameCoordinatedBy(0, nodes_);
  ASSERT_TRUE(Submit(0, {1, 2}, SYNCD_PARTIAL_SOLO, 2, g).ok());
  ASSERT_TRUE(Submit(2, {1}, SYNCD_PARTIAL_SOLO, 2, g).ok());
  Pump();
  ASSERT_EQ(done_.size(), 2u);
  for (const Done& d : done_) {
    EXPECT_EQ(d.status.code(), SYNCD_ERR_MISMATCH);
    EXPECT_NE(d.status.message().find("tensor '" + g + "': partial allreduce round 1 ran as float32 [2 elements] Sum, "
                                      "solo with quorum 2, but the ranks on node(s) 1 submitted something else"),
              std::string::npos)
        << d.status.message();
  }
}

// Eight nodes of one rank: 32 names (a model's layers), each rank submitting each once with a
// quorum of all 8, so every round sums every rank.
class PartialEightNodesTest : public PartialNodesTest {
 protected:
  PartialEightNodesTest() : PartialNodesTest({0, 1, 2, 3, 4, 5, 6, 7, 8}) {}
};

TEST_F(PartialEightNodesTest, NamesSpreadOverCoordinatorsAndRunMessagesGoDownATree) {
  constexpr int kNames = 32;
  std::set<uint32_t> coordinators;
  for (int i = 0; i < kNames; ++i) {
    const std::string name = "layer" + std::to_string(i);
    coordinators.insert(PartialCoordinator(name, nodes_));
    // The ranks come in a different order for each name: the coordinator hears them as they come.
    for (uint32_t k = 0; k < nodes_; ++k) {
      const uint32_t r = (k * 3 + uint32_t(i)) % nodes_;
      ASSERT_TRUE(Submit(r, {float(r + 1)}, SYNCD_PARTIAL_SOLO, int(nodes_), name).ok());
    }
    Pump();
  }
  ASSERT_EQ(done_.size(), size_t(kNames) * nodes_);
  for (const Done& d : done_) {
    ASSERT_TRUE(d.status.ok()) << d.name << ": " << d.status.message();
    EXPECT_EQ(d.data[0], 36.f) << d.name << " on rank " << d.rank << ": every rank's 1..8 once";
    EXPECT_NE(d.status.message().find("nap 8 "), std::string::npos) << d.status.message();
  }
  EXPECT_GE(coordinators.size(), 5u) << "32 names should land on most of the 8 nodes";
  int total = 0, most = 0;
  for (uint32_t n = 0; n < nodes_; ++n) {
    total += runs_sent_[n];
    most = std::max(most, runs_sent_[n]);
  }
  EXPECT_EQ(total, kNames * int(nodes_ - 1)) << "each round's run message reaches every other node once";
  // One coordinator telling every node would send 7 per name (224); down a tree no node sends more
  // than 3 per name (its children), and with the names spread none comes near that.
  EXPECT_LE(most, kNames * 3 / 2) << "a node sent " << most << " run messages for " << kNames << " names";
}

}  // namespace
}  // namespace syncd
