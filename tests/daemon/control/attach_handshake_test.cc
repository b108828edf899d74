#include "daemon/control/attach_handshake.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

abi::AttachRequest Request(int32_t rank, int32_t size, uint64_t job) {
  return abi::AttachRequest{abi::kMagic, abi::kVersion, rank, size, rank, size, 4321, 0, job};
}

TEST(AttachHandshake, ANodeServiceSaysNothingButWhyToAProcessOfAnotherJob) {
  JobRegistry jobs;
  JobAdmission alice;
  alice.job = 10;
  alice.uid = 1000;
  ASSERT_TRUE(jobs.Add(alice).ok());
  AttachRules rules;
  rules.local_size = 2;
  rules.jobs = &jobs;
  rules.uid = 1001;
  // Wrong local size too: the job is what it is told, not the node's shape.
  Status st = CheckAttachRequest(Request(0, 4, 10), 4321, rules);
  EXPECT_EQ(st.code(), SYNCD_ERR_REFUSED);
  EXPECT_EQ(st.message(), "rank 0 (pid 4321) runs as uid 1001, but job 10 is registered for uid 1000");
  rules.uid = 1000;
  st = CheckAttachRequest(Request(0, 4, 10), 4321, rules);
  EXPECT_NE(st.message().find("says local size 4 but this node runs 2 ranks"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckAttachRequest(Request(1, 2, 10), 4321, rules).ok());
  EXPECT_NE(CheckAttachRequest(Request(1, 2, 11), 4321, rules).message().find("job 11, which is not registered"),
            std::string::npos);
  // Not a node service: the attach server admitted the daemon's own uid already.
  rules.jobs = nullptr;
  rules.uid = 1001;
  EXPECT_TRUE(CheckAttachRequest(Request(1, 2, 11), 4321, rules).ok());
}

}  // namespace
}  // namespace syncd
