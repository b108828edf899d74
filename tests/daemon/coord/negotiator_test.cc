// Negotiator on the loopback transport: several nodes' negotiators driven from one thread.
#include "daemon/coord/negotiator.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace syncd
