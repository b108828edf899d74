// The job-wide timeline through the real daemons: started from node 1 with syncctl (node 0 writes
// the file), stopped the same way, every node's events in one complete Chrome trace; bad starts
// get errors naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/harness.h"

namespace syncd::testing {
namespace {

int BarrierAll(syncd_client* c) {
  syncd_handle h;
  const int rc = syncd_barrier_async(c, &h);
  return rc == SYNCD_OK ? syncd_wait(c, h, 30'000) : rc;
}

int Syncctl(const std::string& run_dir, const std::string& args) {
  return system((BinDir() + "/syncctl --run-dir " + run_dir + " " + args + " > /dev/null").c_str());
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Timeline, StartedAndStoppedWithSyncctlOnNodeOneNodeZeroWritesEveryNodesEvents) {
  Cluster cluster(2, 2, {"--log-level", "warn"});
  const std::string file = ::testing::TempDir() + "syncd_timeline_" + std::to_string(getpid()) + ".json";
  unlink(file.c_str());
  const std::string node1 = cluster.node(1).run_dir();
  auto st = RunClusterRanks(cluster, [&](syncd_client* c, int rank, int) {
    CHILD_CHECK(BarrierAll(c) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 1) {  // a file node 0 cannot create: the error names it
      CHILD_CHECK(syncd_start_timeline(c, "/nonexistent-dir/t.json") == SYNCD_ERR_INVALID, "%s", syncd_last_error());
      CHILD_CHECK(Contains(syncd_last_error(), "/nonexistent-dir/t.json"), "%s", syncd_last_error());
      CHILD_CHECK(syncd_start_timeline(c, "") == SYNCD_ERR_INVALID, "an empty file name: %s", syncd_last_error());
    }
    CHILD_CHECK(BarrierAll(c) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 2) {
      CHILD_CHECK(Syncctl(node1, "timeline start " + file) == 0, "syncctl timeline start failed");
      usleep(300'000);  // node 0 starts it and tells node 1
    }
    CHILD_CHECK(BarrierAll(c) == SYNCD_OK, "%s", syncd_last_error());
    for (int i = 0; i < 10; ++i) {
      int32_t v = rank;
      int64_t shape = 1;
      syncd_tensor t{"timeline.grad", &v, SYNCD_INT32, 1, &shape, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK && v == 6, "%s (%d)", syncd_last_error(), v);
    }
    CHILD_CHECK(BarrierAll(c) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 3) {
      // Another file while this one is written: refused, naming the one being written.
      CHILD_CHECK(syncd_start_timeline(c, "/tmp/other.json") == SYNCD_ERR_INVALID, "%s", syncd_last_error());
      CHILD_CHECK(Contains(syncd_last_error(), file), "%s", syncd_last_error());
      CHILD_CHECK(Syncctl(node1, "timeline stop") == 0, "syncctl timeline stop failed");
    }
    CHILD_CHECK(BarrierAll(c) == SYNCD_OK, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
  std::string text;
  for (int i = 0; i < 100; ++i) {  // node 0 closes it once node 1's last chunk is in
    text = ReadAll(file);
    if (text.size() > 3 && text.substr(text.size() - 3) == "\n]\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(text.substr(text.size() - 3), "\n]\n") << "the file is not complete";
  for (int rank = 0; rank < 4; ++rank) {
    const std::string submit = "\"name\":\"submit timeline.grad\",\"ph\":\"i\"";
    const std::string where = ",\"pid\":" + std::to_string(rank / 2) + ",\"tid\":" + std::to_string(rank) + ",";
    size_t n = 0;
    for (size_t at = text.find(submit); at != std::string::npos; at = text.find(submit, at + 1))
      n += text.compare(text.find(",\"pid\":", at), where.size(), where) == 0;
    EXPECT_EQ(n, 10u) << "rank " << rank << "'s submissions";
  }
  EXPECT_NE(text.find("\"name\":\"clock sync\",\"ph\":\"i\",\"s\":\"p\",\"ts\":0,\"pid\":1"), std::string::npos);
  EXPECT_NE(text.find("\"name\":\"timeline started on node 1\""), std::string::npos);
  const std::string status = SyncctlStatus(cluster.node(0).run_dir());
  EXPECT_TRUE(Contains(status, "timeline   stopped " + file)) << status;
  unlink(file.c_str());
}

}  // namespace
}  // namespace syncd::testing
