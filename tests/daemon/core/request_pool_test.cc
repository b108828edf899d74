#include "daemon/core/request_pool.h"

#include <gtest/gtest.h>

#include <memory>

namespace syncd {
namespace {

// A spent request comes back as a default one: only its storage is kept, nothing it referred
// to (a client's segment stays mapped while a request holds it).
TEST(RequestPool, AGivenRequestComesBackBlankWithItsStorageAndLetsGoOfWhatItHeld) {
  RequestPool pool;
  auto segment = std::make_shared<int>(7);
  Request r;
  r.name = "a.name.longer.than.fifteen.bytes";
  r.shape = {1, 2, 3, 4, 5, 6};
  r.rank = 3;
  r.handle = 99;
  r.root = 2;
  r.failure = "x";
  r.memory = segment;
  const char* storage = r.name.data();
  pool.Give(std::move(r));
  EXPECT_EQ(segment.use_count(), 1) << "the pool must not keep the client's segment mapped";
  ASSERT_EQ(pool.spare(), 1u);
  Request again = pool.Take();
  EXPECT_EQ(pool.spare(), 0u);
  EXPECT_TRUE(again.name.empty());
  EXPECT_TRUE(again.shape.empty());
  EXPECT_EQ(again.rank, 0u);
  EXPECT_EQ(again.handle, 0u);
  EXPECT_EQ(again.root, 0);
  EXPECT_TRUE(again.failure.empty());
  EXPECT_EQ(again.memory, nullptr);
  again.name.assign("another.name.of.similar.size");
  EXPECT_EQ(again.name.data(), storage) << "the name reuses the spent request's storage";
  EXPECT_TRUE(pool.Take().name.empty()) << "an empty pool gives a default request";
}

TEST(RequestPool, ShortNamesAreNotKept) {
  RequestPool pool;
  Request r;
  r.name = "short";
  pool.Give(std::move(r));
  EXPECT_EQ(pool.spare(), 0u) << "nothing to gain: the name lives inside the string";
}

}  // namespace
}  // namespace syncd
