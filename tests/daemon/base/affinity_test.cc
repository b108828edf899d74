#include "daemon/base/affinity.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

TEST(CoreList, ParsesRangesAndFormatsThemBack) {
  auto c = ParseCoreList("3,1,4-6,1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (CoreSet{1, 3, 4, 5, 6}));
  EXPECT_EQ(FormatCoreList(*c), "1,3-6");
  EXPECT_FALSE(ParseCoreList("1,,2").ok());
  EXPECT_FALSE(ParseCoreList("5-2").ok());
  EXPECT_FALSE(ParseCoreList("x").ok());
}

TEST(ResolveCores, AutoTakesTheLastCoreAndLeavesTheRestToWorkers) {
  const CoreSet allowed = AllowedCores();
  auto p = ResolveCores("auto");
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(p->daemon.empty());
  EXPECT_EQ(p->daemon.back(), allowed.back());
  if (allowed.size() > p->daemon.size()) {
    for (uint32_t c : p->daemon) EXPECT_EQ(std::count(p->workers.begin(), p->workers.end(), c), 0);
    EXPECT_EQ(p->workers.size() + p->daemon.size(), allowed.size());
  }
}

TEST(ResolveCores, NoneAndUnavailableCores) {
  auto none = ResolveCores("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->daemon.empty());
  EXPECT_EQ(none->workers, AllowedCores());
  auto bad = ResolveCores("4000");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("4000"), std::string::npos);
}

}  // namespace
}  // namespace syncd
