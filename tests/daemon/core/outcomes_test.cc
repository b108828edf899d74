#include "daemon/core/outcomes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace syncd {
namespace {

Request Named(const std::string& name, uint64_t handle) {
  Request r;
  r.name = name;
  r.handle = handle;
  return r;
}

// The engine applies what ended in the order it ended, each tensor's requests together with
// their status, and each once.
TEST(Outcomes, KeepTheOrderAndTheStatusOfWhatEnded) {
  Outcomes out;
  std::vector<Request> a{Named("grad.layer1.weight", 1), Named("grad.layer1.weight", 2)};
  out.Add(a, Status::Ok());
  EXPECT_TRUE(a.empty()) << "the requests are taken";
  out.Add(Named("grad.layer2.bias", 3), Status(SYNCD_ERR_RANK_LOST, "tensor 'grad.layer2.bias': rank 1 lost"));
  std::vector<Request> none;
  out.Add(none, Status::Ok());  // nothing to complete: no outcome
  ASSERT_EQ(out.count(), 2u);
  std::vector<std::string> seen;
  for (const Outcome& o : out) {
    seen.push_back(o.requests.front().name + "/" + std::to_string(o.requests.size()) + "/" + std::to_string(o.status.code()));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"grad.layer1.weight/2/0",
                                            "grad.layer2.bias/1/" + std::to_string(SYNCD_ERR_RANK_LOST)}));
  RequestPool pool;
  out.Clear(&pool);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(pool.spare(), 3u) << "applied requests go to the pool for their storage";
  EXPECT_EQ(out.begin(), out.end());
}

// Once the first turns have grown them, the lists circulate: the caller gets back the storage of
// an outcome applied before, and Add allocates nothing.
TEST(Outcomes, HandTheStorageOfAppliedListsBackToTheCaller) {
  Outcomes out;
  std::vector<Request> turn;
  turn.reserve(8);
  const Request* grown = turn.data();
  turn.push_back(Named("t", 1));
  out.Add(turn, Status::Ok());
  out.Clear(nullptr);
  std::vector<Request> next;
  next.reserve(8);
  const Request* other = next.data();
  next.push_back(Named("t", 2));
  out.Add(next, Status::Ok());
  EXPECT_EQ(next.data(), grown) << "the caller gets the applied list's storage";
  EXPECT_GE(next.capacity(), 8u);
  EXPECT_EQ(out.begin()->requests.data(), other);
  EXPECT_EQ(out.begin()->requests.front().handle, 2u);
}

}  // namespace
}  // namespace syncd
