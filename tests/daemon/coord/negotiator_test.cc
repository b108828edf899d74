// Negotiator on the loopback transport: several nodes' negotiators driven from one thread.
#include "daemon/coord/negotiator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/coord/job_join.h"
#include "daemon/transport/host_collectives.h"
#include "daemon/transport/loopback/loopback_transport.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

struct Job {
  // `holds`: what node n's set holds outside its negotiator (see NegotiatorOptions::holds_work).
  explicit Job(uint32_t nodes, std::function<bool(uint32_t)> holds = nullptr) : hub(nodes) {
    for (uint32_t n = 0; n < nodes; ++n) {
      transports.push_back(std::make_unique<LoopbackTransport>(&hub, n));
      NegotiatorOptions opts;
      opts.cycle_ns = 100'000;
      if (holds) opts.holds_work = [holds, n] { return holds(n); };
      negotiators.push_back(std::make_unique<Negotiator>(transports.back().get(), opts));
    }
  }
  // What a process set does with node n's negotiator: runs what it agreed (here: records it) and
  // completes what it gave up (here: records the error).
  void Serve(uint32_t n) {
    Negotiator& neg = *negotiators[n];
    if (std::optional<AgreedWork> work = neg.TakeAgreed()) {
      EXPECT_TRUE(neg.executing());
      for (ReadyTensor& t : work->tensors) {
        executed.push_back("node " + std::to_string(n) + ": " + t.first().name);
        rank_rows.push_back(t.agreed ? t.agreed->rows : std::vector<int64_t>{});
      }
      neg.Executed(Status::Ok());
    }
    for (const FailedTensor& f : neg.TakeEnded()) failed.push_back("node " + std::to_string(n) + ": " + f.error.message());
  }
  // Polls until `done` or 2 s.
  template <typename F>
  void PollUntil(F done) {
    const uint64_t end = abi::MonotonicNs() + 2'000'000'000ull;
    while (!done() && abi::MonotonicNs() < end)
      for (uint32_t n = 0; n < negotiators.size(); ++n) {
        negotiators[n]->Poll(abi::MonotonicNs());
        Serve(n);
      }
  }

  LoopbackHub hub;
  std::vector<std::unique_ptr<LoopbackTransport>> transports;
  std::vector<std::unique_ptr<Negotiator>> negotiators;
  std::vector<std::string> executed, failed;
  std::vector<std::vector<int64_t>> rank_rows;  // of each executed tensor
};

// One rank per node.
ReadyTensor Tensor(const std::string& name, uint32_t rank, bool gpu) {
  Request r;
  r.name = name;
  r.rank = rank;
  r.kind = abi::OpKind::kAllreduce;
  r.dtype = SYNCD_FLOAT32;
  r.shape = {8};
  r.bytes = 32;
  r.gpu = gpu;
  return ReadyTensor{{r}};
}

TEST(Negotiator, ANameOnTheGpuOnOneNodeAndOnTheHostOnAnotherFailsEveryRank) {
  // NCCL on one node and the host path on the other would wait for each other for ever.
  Job job(2);
  job.negotiators[0]->Add(Tensor("x", 0, true));
  job.negotiators[1]->Add(Tensor("x", 1, false));
  job.PollUntil([&] { return job.failed.size() == 2; });
  EXPECT_TRUE(job.executed.empty());
  ASSERT_EQ(job.failed.size(), 2u);
  for (const std::string& f : job.failed)
    EXPECT_NE(f.find("tensor 'x': mismatched memory across ranks: GPU on rank 0; host on rank 1"), std::string::npos) << f;
}

TEST(Negotiator, ACachedNameThatMovesToTheGpuIsNegotiatedAgain) {
  Job job(2);
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("x", n, false));
  job.PollUntil([&] { return job.executed.size() == 2; });
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("x", n, false));
  job.PollUntil([&] { return job.executed.size() == 4; });
  EXPECT_EQ(job.negotiators[0]->stats().cache_hits, 1u);
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("x", n, true));
  job.PollUntil([&] { return job.executed.size() == 6; });
  EXPECT_EQ(job.executed.size(), 6u);
  EXPECT_EQ(job.negotiators[0]->stats().cache_hits, 1u) << "the cached entry (host) must not match a GPU tensor";
  EXPECT_TRUE(job.failed.empty());
}

// Pending names' map nodes and the agreement's storage are reused from cycle to cycle: names of
// every length, round after round, each run once per round on every node.
TEST(Negotiator, NamesAgreedRoundAfterRoundEachRunOncePerRound) {
  Job job(2);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i)
      for (uint32_t n = 0; n < 2; ++n)
        job.negotiators[n]->Add(Tensor("layer." + std::string(size_t(i % 40), 'x') + std::to_string(i), n, false));
    const size_t want = size_t(200 * (round + 1));
    job.PollUntil([&] { return job.executed.size() == want; });
    ASSERT_EQ(job.executed.size(), want);
  }
  std::map<std::string, int> runs;
  for (const std::string& e : job.executed) ++runs[e];
  EXPECT_EQ(runs.size(), 200u);
  for (const auto& [e, k] : runs) EXPECT_EQ(k, 3) << e;
  EXPECT_TRUE(job.failed.empty());
}

// A name handed to the negotiator while it is still pending there fails (neither is dropped).
TEST(Negotiator, ANameAlreadyPendingFailsAsADuplicateAndTheFirstStillRuns) {
  Job job(2);
  for (uint32_t round = 0; round < 2; ++round) {  // the second time the map node is a spare one
    job.negotiators[0]->Add(Tensor("dup" + std::to_string(round), 0, false));
    job.negotiators[0]->Add(Tensor("dup" + std::to_string(round), 0, false));
    job.Serve(0);
    ASSERT_EQ(job.failed.size(), round + 1);
    EXPECT_EQ(job.failed.back(), "node 0: tensor 'dup" + std::to_string(round) + "' is already being negotiated on this node");
    job.negotiators[1]->Add(Tensor("dup" + std::to_string(round), 1, false));
    job.PollUntil([&] { return job.executed.size() == 2 * (round + 1); });
    EXPECT_EQ(job.executed.size(), 2 * (round + 1));
  }
}

TEST(Negotiator, ShapesThatVaryByRankReachEveryNodeAndAreNeverCached) {
  Job job(2);
  for (int step = 0; step < 2; ++step) {
    for (uint32_t n = 0; n < 2; ++n) {
      ReadyTensor t = Tensor("g", n, false);
      t.requests[0].kind = abi::OpKind::kAllgather;
      t.requests[0].shape = {int64_t(n + 1 + step), 8};  // node 0 has 1 + step rows, node 1 2 + step
      job.negotiators[n]->Add(std::move(t));
    }
    job.PollUntil([&] { return job.executed.size() == 2u * (step + 1); });
    ASSERT_EQ(job.rank_rows.size(), 2u * (step + 1));
    for (size_t i = 2 * size_t(step); i < job.rank_rows.size(); ++i)
      EXPECT_EQ(job.rank_rows[i], (std::vector<int64_t>{1 + step, 2 + step}));
  }
  EXPECT_EQ(job.negotiators[0]->stats().cache_hits, 0u) << "each step's first dimensions may differ";
  EXPECT_TRUE(job.failed.empty());
}

// Polls every node's negotiator `turns` times without running anything; returns whether `done`
// held before that.
template <typename F>
bool PollOnly(Job& job, int turns, F done) {
  for (int i = 0; i < turns && !done(); ++i)
    for (auto& n : job.negotiators) n->Poll(abi::MonotonicNs());
  return done();
}

bool EveryNode(Job& job, bool (Negotiator::*what)() const) {
  for (auto& n : job.negotiators)
    if (!((*n).*what)()) return false;
  return true;
}

// Coordination only agrees, and agreements run one at a time in cycle order: cycle N+1 agrees
// while N's agreement runs (it is not handed out before N has run), N+2 waits for N to have run.
// A failed run ends the job on every node, the other nodes' requests handed back with the error.
TEST(Negotiator, TheNextCycleAgreesWhileOneRunsAndAFailedRunEndsTheJobEverywhere) {
  Job job(2);
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("x", n, false));
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::has_agreement); }));
  std::vector<AgreedWork> x;
  for (auto& n : job.negotiators) x.push_back(*n->TakeAgreed());
  EXPECT_EQ(x[0].tag, x[1].tag) << "one tag for the same work on every node";
  ASSERT_EQ(x[0].tensors.size(), 1u);
  EXPECT_EQ(x[0].tensors[0].first().name, "x");
  // x runs (not reported yet): y is agreed meanwhile, and waits for x.
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("y", n, false));
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::has_agreement); }));
  for (auto& n : job.negotiators) {
    EXPECT_TRUE(n->executing());
    EXPECT_FALSE(n->TakeAgreed().has_value()) << "handed out before the agreement before it has run";
    EXPECT_EQ(n->stats().overlapped_cycles, 1u);
  }
  // z is not agreed before x has run: y's cycle stays open until y is taken.
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("z", n, false));
  const uint64_t cycles = job.negotiators[0]->stats().cycles;
  PollOnly(job, 2000, [] { return false; });
  EXPECT_TRUE(job.negotiators[0]->cycle_running());
  EXPECT_EQ(job.negotiators[0]->stats().cycles, cycles);
  EXPECT_EQ(job.negotiators[0]->pending(), 1u) << "z";
  for (auto& n : job.negotiators) n->Executed(Status::Ok());
  for (auto& n : job.negotiators) {
    std::optional<AgreedWork> y = n->TakeAgreed();
    ASSERT_TRUE(y.has_value());
    ASSERT_EQ(y->tensors.size(), 1u);
    EXPECT_EQ(y->tensors[0].first().name, "y");
    EXPECT_NE(y->tag, x[0].tag);
  }
  // z is agreed while y runs. Node 0's run of y fails (its requests are its own to fail); node 1
  // still holds z, agreed, and "w", pending.
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::has_agreement); }));
  job.negotiators[1]->Add(Tensor("w", 1, false));
  job.negotiators[0]->Executed(Status(SYNCD_ERR_RANK_LOST, "the wire broke"));
  job.negotiators[1]->Executed(Status::Ok());
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::broken); }));
  EXPECT_NE(job.negotiators[1]->failure().message().find("the wire broke"), std::string::npos)
      << job.negotiators[1]->failure().message();
  std::vector<std::string> failed;
  for (uint32_t n = 0; n < 2; ++n)
    for (const FailedTensor& f : job.negotiators[n]->TakeEnded())
      failed.push_back("node " + std::to_string(n) + ": " + f.error.message());
  std::sort(failed.begin(), failed.end());
  ASSERT_EQ(failed.size(), 3u) << "z on both nodes, w on node 1, each once";
  EXPECT_EQ(failed[0].rfind("node 0: tensor 'z': ", 0), 0u) << failed[0];
  EXPECT_EQ(failed[1].rfind("node 1: tensor 'w': ", 0), 0u) << failed[1];
  EXPECT_EQ(failed[2].rfind("node 1: tensor 'z': ", 0), 0u) << failed[2];
  for (auto& n : job.negotiators) EXPECT_FALSE(n->TakeAgreed().has_value());
}

// A fence (here GPU work: its hold on the job-wide GPU order) keeps its cycle open until it has
// run: nothing after it is agreed before.
TEST(Negotiator, AFenceKeepsItsCycleOpenUntilItHasRun) {
  Job job(2);
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("g", n, true));
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::has_agreement); }));
  for (auto& n : job.negotiators) ASSERT_TRUE(n->TakeAgreed().has_value());
  for (uint32_t n = 0; n < 2; ++n) job.negotiators[n]->Add(Tensor("h", n, false));
  PollOnly(job, 2000, [] { return false; });
  for (auto& n : job.negotiators) {
    EXPECT_TRUE(n->cycle_running() && n->executing());
    EXPECT_FALSE(n->has_agreement());
    EXPECT_EQ(n->pending(), 1u) << "h";
  }
  for (auto& n : job.negotiators) n->Executed(Status::Ok());
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::has_agreement); }));
  for (auto& n : job.negotiators) {
    std::optional<AgreedWork> h = n->TakeAgreed();
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->tensors[0].first().name, "h");
    EXPECT_EQ(n->stats().overlapped_cycles, 0u);
  }
}

// Graceful drain (SIGTERM on every node, as a Slurm epilog does): node 1 leaves only once a
// cycle found no node holding work. Node 0 started a cycle with nothing of its own, then its
// rank submitted x, then node 1 began draining, its rank to submit its half of x afterwards:
// that cycle's agreement (quiet) must not let node 1 go, whichever of its turns polls it.
TEST(Negotiator, ADrainingNodeWaitsForWorkAnotherNodeTookInAfterItsPartOfACycle) {
  Job job(2);
  ASSERT_TRUE(PollOnly(job, 1'000'000, [&] { return EveryNode(job, &Negotiator::joined); }));
  Negotiator& busy = *job.negotiators[0];
  Negotiator& draining = *job.negotiators[1];
  const uint64_t end = abi::MonotonicNs() + 1'000'000'000ull;
  while (!busy.cycle_running() && abi::MonotonicNs() < end) busy.Poll(abi::MonotonicNs());
  ASSERT_TRUE(busy.cycle_running());
  ASSERT_EQ(draining.cycle_seq() + 1, busy.cycle_seq()) << "node 1 has not started that cycle";
  busy.Add(Tensor("x", 0, false));
  const uint64_t cycles = busy.stats().cycles;
  for (int turn = 0; turn < 200'000 && busy.stats().cycles < cycles + 5; ++turn) {
    draining.Drain(false);
    ASSERT_FALSE(draining.QuietSinceDrain()) << "node 0 holds x: node 1 left in cycle " << draining.cycle_seq();
    for (auto& n : job.negotiators) n->Poll(abi::MonotonicNs());
  }
  EXPECT_GE(busy.stats().cycles, cycles + 5);
  // Node 1's rank submits its half: x runs on both nodes and the job is quiet.
  draining.Add(Tensor("x", 1, false));
  job.PollUntil([&] {
    draining.Drain(false);
    return job.executed.size() == 2 && draining.QuietSinceDrain();
  });
  EXPECT_EQ(job.executed.size(), 2u);
  EXPECT_TRUE(draining.QuietSinceDrain());
}

// Work a node holds outside its negotiator (a collective waiting for another rank of that node,
// TOPO tensors waiting for their group) keeps a draining node from leaving, though the holder is
// not draining itself; once it holds nothing, the drain ends.
TEST(Negotiator, WorkHeldOutsideTheNegotiatorOnANodeNotDrainingKeepsTheDrainOpen) {
  bool held = true;
  Job job(2, [&](uint32_t n) { return n == 0 && held; });
  for (int turn = 0; turn < 200'000 && job.negotiators[1]->stats().cycles < 10; ++turn) {
    job.negotiators[1]->Drain(false);
    ASSERT_FALSE(job.negotiators[1]->QuietSinceDrain());
    for (auto& n : job.negotiators) n->Poll(abi::MonotonicNs());
  }
  EXPECT_GE(job.negotiators[1]->stats().cycles, 10u);
  held = false;
  EXPECT_TRUE(PollOnly(job, 1'000'000, [&] {
    job.negotiators[1]->Drain(false);
    return job.negotiators[1]->QuietSinceDrain();
  }));
}

// A hostile or broken peer: node 0 runs a real negotiator, node 1 is the test writing bytes by
// hand. Whatever node 1 sends, node 0 fails its job with an error naming node 1 (its pending
// requests get it) and never crashes or waits for ever.
class BrokenPeer : public ::testing::Test {
 protected:
  BrokenPeer() : hub_(2), node0_(&hub_, 0), node1_(&hub_, 1) {
    NegotiatorOptions opts;
    opts.cycle_ns = 100'000;
    opts.job = kJob;
    negotiator_ = std::make_unique<Negotiator>(&node0_, opts);
    negotiator_->Add(Tensor("pending", 0, false));
  }
  // Node 1 does its part of the job start correctly.
  void Join() {
    std::vector<bool> joined;
    CommTask join = JoinJob(&node1_, kJob, &joined);
    PollUntil([&] { return join.Poll(); });
    ASSERT_TRUE(join.done() && join.status().ok()) << join.status().message();
  }
  void Send(uint64_t tag, const std::string& bytes) {
    sent_.push_back(bytes);
    node1_.Send(0, tag, sent_.back().data(), sent_.back().size(), {});
  }
  template <typename F>
  void PollUntil(F done) {
    const uint64_t end = abi::MonotonicNs() + 2'000'000'000ull;
    while (!done() && abi::MonotonicNs() < end) {
      negotiator_->Poll(abi::MonotonicNs());
      if (negotiator_->TakeAgreed()) negotiator_->Executed(Status::Ok());
      for (const FailedTensor& f : negotiator_->TakeEnded()) failures_.push_back(f.error.message());
      node1_.Progress();
    }
  }
  // Node 0's job ended with an error naming node 1 and `what`, which its pending request got.
  // `also` drives node 1's side meanwhile, if it has one.
  void ExpectTheJobFailedNamingNode1(const std::string& what, CommTask* also = nullptr) {
    PollUntil([&] {
      if (also != nullptr) also->Poll();
      return !failures_.empty();
    });
    ASSERT_TRUE(negotiator_->broken());
    EXPECT_NE(negotiator_->failure().message().find("node 1"), std::string::npos) << negotiator_->failure().message();
    EXPECT_NE(negotiator_->failure().message().find(what), std::string::npos) << negotiator_->failure().message();
    ASSERT_EQ(failures_.size(), 1u);
    EXPECT_NE(failures_[0].find("tensor 'pending'"), std::string::npos) << failures_[0];
  }

  static constexpr uint64_t kJob = 0x5eed;
  LoopbackHub hub_;
  LoopbackTransport node0_, node1_;
  std::unique_ptr<Negotiator> negotiator_;
  std::vector<std::string> failures_;
  std::deque<std::string> sent_;  // buffers of node 1's sends
};

TEST_F(BrokenPeer, GarbageInsteadOfTheJobStartHandshake) {
  Send(kJoinHelloTag, std::string(kControlMessageBytes, 'Z'));
  ExpectTheJobFailedNamingNode1("job start handshake");
}

TEST_F(BrokenPeer, AControlMessageOfAnUnknownKind) {
  Join();
  std::string m(kControlMessageBytes, '\0');
  m[0] = 'Z';
  Send(kTagMask, m);  // the control channel
  ExpectTheJobFailedNamingNode1("control message of unknown kind 90");
}

TEST_F(BrokenPeer, AControlMessageOfTheWrongSize) {
  Join();
  Send(kTagMask, "short");
  ExpectTheJobFailedNamingNode1("5 bytes, expected 384");
}

TEST_F(BrokenPeer, ARequestListTheCoordinatorCannotDecode) {
  Join();
  // Cycle 1 as node 1 would run it (tags as negotiator.cc lays them out): an agreement saying it
  // has uncached names, then a request list that does not decode.
  const uint64_t base = uint64_t(1) << 24;
  const uint32_t words = (1024 + 63) / 64;
  std::vector<uint64_t> agree(2 * words + 3, 0);
  agree[0] = words;
  agree[1 + 2 * words] = 1;
  CommTask agreement = RecursiveDoublingCombine(&node1_, (base + 1) << 8, agree.data(), {}, agree.size() * 8,
                                                [](char*, const char*, size_t) {});
  PollUntil([&] { return agreement.Poll(); });
  ASSERT_TRUE(agreement.status().ok()) << agreement.status().message();
  const std::string garbage("\x02\x00\x00\x00\xff\xff", 6);
  std::vector<std::string> all;
  CommTask gather = GatherBytes(&node1_, (base + 2) << 8, 0, &garbage, &all);
  ExpectTheJobFailedNamingNode1("broke the coordination protocol", &gather);
}

}  // namespace
}  // namespace syncd
