// The names a negotiator holds (coord/pending_tensors.h).
#include "daemon/coord/pending_tensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace syncd {
namespace {

ReadyTensor Tensor(const std::string& name, int ranks = 2) {
  ReadyTensor t;
  for (int r = 0; r < ranks; ++r) {
    Request q;
    q.name = name;
    q.rank = uint32_t(r);
    t.requests.push_back(q);
  }
  return t;
}

TEST(PendingTensors, NamesKeepTheOrderTheyBecameReadyInAndADuplicateComesBackWhole) {
  PendingTensors p;
  std::vector<Request> refused;
  ASSERT_TRUE(p.Add(Tensor("b"), Status::Ok(), 5, &refused));
  ASSERT_TRUE(p.Add(Tensor("a"), InvalidArgument("ranks disagree"), 6, &refused));
  ASSERT_TRUE(p.Add(Tensor("c"), Status::Ok(), 7, &refused));
  EXPECT_EQ(p.Names(), (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_FALSE(p.Add(Tensor("a", 3), Status::Ok(), 8, &refused));
  ASSERT_EQ(refused.size(), 3u);  // the second's requests, to fail; the first stays
  EXPECT_EQ(p.Find("a")->since_ns, 6u);
  EXPECT_FALSE(p.Find("a")->local_error.ok());
  EXPECT_EQ(p.size(), 3u);
  const PendingTensor a = p.Remove("a");
  EXPECT_EQ(a.tensor.requests.size(), 2u);
  EXPECT_EQ(p.Names(), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(p.Find("a"), nullptr);
}

TEST(PendingTensors, ANameAnnouncedIsForgottenWithItAndItsRoomServesTheNext) {
  PendingTensors p;
  std::vector<Request> refused;
  for (int step = 0; step < 100; ++step) {
    const std::string name = "grad." + std::to_string(step % 7);
    ASSERT_TRUE(p.Add(Tensor(name), Status::Ok(), uint64_t(step), &refused)) << name;
    EXPECT_FALSE(p.Announced(name));
    p.Announce(name);
    EXPECT_TRUE(p.Announced(name));
    EXPECT_EQ(p.Remove(name).since_ns, uint64_t(step));
    EXPECT_TRUE(p.empty());
  }
  EXPECT_TRUE(refused.empty());
  ASSERT_TRUE(p.Add(Tensor("grad.0"), Status::Ok(), 1, &refused));
  EXPECT_FALSE(p.Announced("grad.0"));  // announced once before it left: not now
}

}  // namespace
}  // namespace syncd
