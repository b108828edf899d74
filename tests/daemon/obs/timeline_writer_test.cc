#include "daemon/obs/timeline_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace syncd {
namespace {

constexpr uint64_t kStart = 1'000'000'000;  // node 0's clock when the timeline started

std::string TempPath(const std::string& what) {
  return ::testing::TempDir() + "timeline_" + what + "_" + std::to_string(getpid()) + ".json";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Records `events` as node `node` into chunks and hands them to `w`.
void Send(TimelineWriter& w, uint32_t node, const std::string& name, const std::vector<TraceEvent>& events) {
  Timeline t;
  t.Start(node, [&w](std::shared_ptr<TraceChunk> c) { return w.Push(std::move(c)); });
  const uint32_t id = t.Name(name);
  for (TraceEvent e : events) {
    e.name = id;
    t.Record(e);
  }
  t.Stop();
}

void Finish(TimelineWriter& w) {
  w.Finish();
  for (int i = 0; i < 5000 && !w.done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(w.done());
}

TEST(TimelineWriterTest, EveryNodesEventsLandOnNodeZerosClockAsOneChromeTrace) {
  const std::string path = TempPath("clock");
  auto w = TimelineWriter::Open(path, 1 << 20, kStart);
  ASSERT_TRUE(w.ok()) << w.status().message();
  TraceEvent submit;
  submit.kind = TraceKind::kSubmit;
  submit.t0 = submit.t1 = kStart + 5'000'000;  // 5 ms in
  submit.rank = 1;
  Send(**w, 0, "grad.w", {submit});
  // Node 1's clock runs 2 ms ahead of node 0's: its event at its 7 ms is node 0's 5 ms.
  (*w)->SetClock(1, 2'000'000, 1'500);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the offset before node 1's events
  submit.t0 = submit.t1 = kStart + 7'000'000;
  submit.rank = 3;
  TraceEvent tensor;
  tensor.kind = TraceKind::kTensor;
  tensor.t0 = kStart + 7'000'000;
  tensor.t2 = kStart + 8'000'000;
  tensor.t3 = kStart + 9'000'000;
  tensor.t4 = kStart + 9'500'000;
  tensor.t1 = kStart + 10'000'000;
  tensor.bytes = 4000;
  tensor.count = 2;
  Send(**w, 1, "grad.\"quoted\"", {submit, tensor});
  Finish(**w);
  const std::string text = ReadAll(path);
  EXPECT_EQ(text.substr(0, 2), "[\n");
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  EXPECT_NE(text.find("\"name\":\"submit grad.w\",\"ph\":\"i\",\"s\":\"t\",\"ts\":5000.000,\"pid\":0,\"tid\":1"), std::string::npos) << text;
  EXPECT_NE(text.find("\"ts\":5000.000,\"pid\":1,\"tid\":3"), std::string::npos) << text;
  EXPECT_NE(text.find("\"name\":\"grad.\\\"quoted\\\"\",\"ph\":\"b\",\"ts\":5000.000"), std::string::npos) << "escaped\n" << text;
  for (const char* phase : {"WAIT_FOR_RANKS", "NEGOTIATE", "QUEUE", "EXECUTE"})
    EXPECT_NE(text.find(std::string("\"name\":\"") + phase + "\",\"ph\":\"b\""), std::string::npos) << phase;
  EXPECT_NE(text.find("\"name\":\"EXECUTE\",\"ph\":\"e\",\"ts\":8000.000"), std::string::npos) << text;
  EXPECT_NE(text.find("\"offset_us\":2000.000,\"error_bound_us\":1.500"), std::string::npos) << text;
  EXPECT_NE(text.find("\"thread_name\",\"args\":{\"name\":\"rank 3\"}"), std::string::npos) << text;
  EXPECT_EQ((*w)->stats().events, 3u);
  unlink(path.c_str());
}

TEST(TimelineWriterTest, TheFileStopsGrowingAtItsCapAndSaysHowManyEventsWereCut) {
  const std::string path = TempPath("cap");
  constexpr uint64_t kCap = 16 * 1024;
  auto w = TimelineWriter::Open(path, kCap, kStart);
  ASSERT_TRUE(w.ok());
  std::vector<TraceEvent> many(2000);
  for (size_t i = 0; i < many.size(); ++i) {
    many[i].kind = TraceKind::kSubmit;
    many[i].t0 = many[i].t1 = kStart + i * 1000;
  }
  Send(**w, 0, "grad", many);
  Finish(**w);
  const std::string text = ReadAll(path);
  EXPECT_LE(text.size(), kCap + 256) << "the cap, plus the closing marker";
  EXPECT_GT((*w)->stats().cut_by_cap, 1000u);
  EXPECT_NE(text.find("timeline cut: the file reached its size cap"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  unlink(path.c_str());
}

TEST(TimelineWriterTest, AFileThatCannotBeCreatedIsAnErrorNamingIt) {
  auto w = TimelineWriter::Open("/nonexistent-dir/t.json", 1 << 20, kStart);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/nonexistent-dir/t.json"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace syncd
