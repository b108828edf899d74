// Negotiator on the loopback transport: several nodes' negotiators driven from one thread.
#include "daemon/coord/negotiator.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "daemon/coord/job_join.h"
#include "daemon/transport/host_collectives.h"
#include "daemon/transport/loopback/loopback_transport.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

struct Job {
  explicit Job(uint32_t nodes) : hub(nodes) {
    for (uint32_t n = 0; n < nodes; ++n) {
      transports.push_back(std::make_unique<LoopbackTransport>(&hub, n));
      NegotiatorOptions opts;
      opts.blocking = false;
      opts.cycle_ns = 100'000;
      negotiators.push_back(std::make_unique<Negotiator>(
          transports.back().get(), opts,
          [this, n](std::vector<ReadyTensor>* ready, uint64_t) { return Record(n, ready); },
          [this, n](const std::vector<Request>& rs, const Status& st) {
            failed.push_back("node " + std::to_string(n) + ": " + st.message());
          }));
    }
  }
  CommTask Record(uint32_t n, std::vector<ReadyTensor>* ready) {
    for (ReadyTensor& t : *ready) {
      executed.push_back("node " + std::to_string(n) + ": " + t.first().name);
      rank_rows.push_back(t.rank_rows);
      t.requests.clear();
    }
    co_return Status::Ok();
  }
  // Polls until `done` or 2 s.
  template <typename F>
  void PollUntil(F done) {
    const uint64_t end = abi::MonotonicNs() + 2'000'000'000ull;
    while (!done() && abi::MonotonicNs() < end)
      for (auto& n : negotiators) n->Poll(abi::MonotonicNs());
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

// A hostile or broken peer: node 0 runs a real negotiator, node 1 is the test writing bytes by
// hand. Whatever node 1 sends, node 0 fails its job with an error naming node 1 (its pending
// requests get it) and never crashes or waits for ever.
class BrokenPeer : public ::testing::Test {
 protected:
  BrokenPeer() : hub_(2), node0_(&hub_, 0), node1_(&hub_, 1) {
    NegotiatorOptions opts;
    opts.blocking = false;
    opts.cycle_ns = 100'000;
    opts.job = kJob;
    negotiator_ = std::make_unique<Negotiator>(
        &node0_, opts, [](std::vector<ReadyTensor>*, uint64_t) -> CommTask { co_return Status::Ok(); },
        [this](const std::vector<Request>&, const Status& st) { failures_.push_back(st.message()); });
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
