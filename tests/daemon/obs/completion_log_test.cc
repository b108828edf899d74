// The engine's completion events, folded off its thread into metrics and stragglers.
#include "daemon/obs/completion_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "proto/shm_abi.h"

namespace syncd {
namespace {

constexpr uint64_t kMs = 1'000'000;

// One tensor of `set` and `kind`: completed at `done`, its ranks' requests arrived at `arrivals`.
void AppendTensor(CompletionLog* log, int32_t set, abi::OpKind kind, uint64_t done, uint64_t bytes,
                  const std::vector<std::pair<uint32_t, uint64_t>>& arrivals, bool spans_nodes = false,
                  uint16_t slot = 0) {
  CompletionEvent t;
  t.job = slot;
  t.t_ns = done;
  t.set = set;
  t.kind = uint8_t(kind);
  t.bytes = bytes;
  t.first_ns = UINT64_MAX;
  for (const auto& a : arrivals) t.first_ns = std::min(t.first_ns, a.second);
  t.rank = uint32_t(arrivals.size());
  t.stragglers = true;
  t.spans_nodes = spans_nodes;
  log->Append(t);
  for (const auto& [rank, ns] : arrivals) {
    CompletionEvent a;
    a.type = CompletionEvent::kArrival;
    a.rank = rank;
    a.t_ns = ns;
    log->Append(a);
  }
}

TEST(CompletionLogTest, TensorsFoldIntoMetricsAndTheStragglerWindow) {
  CompletionLog log;
  for (uint64_t i = 0; i < 10; ++i) {
    const uint64_t t = (i + 1) * 100 * kMs;
    // Rank 3 comes 5 ms after rank 2; the allreduce ends 2 ms after rank 3 came.
    AppendTensor(&log, 0, abi::OpKind::kAllreduce, t + 7 * kMs, 64, {{2, t}, {3, t + 5 * kMs}}, true);
  }
  CompletionEvent failed;
  failed.kind = uint8_t(abi::OpKind::kAllgather);
  failed.code = SYNCD_ERR_RANK_LOST;
  log.Append(failed);
  log.Fold([](const CompletionFigures& g) {
    const CollectiveMetrics& m = g.jobs.at(0).metrics.at({0, uint32_t(abi::OpKind::kAllreduce)});
    EXPECT_EQ(m.ops, 10u);
    EXPECT_EQ(m.bytes, 640u);
    EXPECT_EQ(m.latency.count, 10u);
    EXPECT_NEAR(m.latency.sum, 10 * 0.007, 1e-9) << "first arrival to completion";
    const CollectiveMetrics& f = g.jobs.at(0).metrics.at({0, uint32_t(abi::OpKind::kAllgather)});
    EXPECT_EQ(f.ops, 0u);
    EXPECT_EQ(f.errors.at("RANK_LOST"), 1u);
    const std::vector<StragglerRank> s = g.jobs.at(0).stragglers.Summary();
    EXPECT_EQ(g.jobs.at(0).stragglers.collectives(), 10u);
    EXPECT_FALSE(s.empty());
    if (s.empty()) return 0;
    EXPECT_EQ(s[0].rank, 3u);
    EXPECT_EQ(s[0].last, 10u);
    EXPECT_NEAR(s[0].mean_late_ms, 5.0, 1e-9);
    const StragglerWindow::NodeWait w = g.jobs.at(0).stragglers.node_wait();
    EXPECT_EQ(w.collectives, 10u);
    EXPECT_NEAR(w.p50_ms, 2.0, 1e-9) << "last local arrival to completion";
    EXPECT_EQ(g.dropped, 0u);
    return 0;
  });
}

TEST(CompletionLogTest, AJobBeginsWithFiguresOfItsOwn) {
  CompletionLog log;
  AppendTensor(&log, 0, abi::OpKind::kAllreduce, 10 * kMs, 8, {{0, 1 * kMs}, {1, 2 * kMs}});
  log.Fold([](const CompletionFigures& g) { return g.jobs.size(); });
  log.BeginJob(0, 5, /*alone=*/true);
  AppendTensor(&log, 1, abi::OpKind::kBroadcast, 20 * kMs, 4, {{0, 11 * kMs}});
  log.Fold([](const CompletionFigures& g) {
    EXPECT_EQ(g.jobs.size(), 1u) << "the previous job's figures went";
    const JobFigures& j = g.jobs.at(5);
    EXPECT_EQ(j.metrics.size(), 1u);
    EXPECT_EQ(j.metrics.count({1, uint32_t(abi::OpKind::kBroadcast)}), 1u);
    EXPECT_EQ(j.stragglers.collectives(), 0u) << "one rank says nothing about stragglers";
    return 0;
  });
}

// A node service: each job's tensors in its figures, whatever came between them; a job gone
// takes its figures with it, and its slot serves the next job afresh.
TEST(CompletionLogTest, JobsSideBySideEachHaveFiguresOfTheirOwn) {
  CompletionLog log;
  log.BeginJob(0, 7, /*alone=*/false);
  log.BeginJob(1, 8, /*alone=*/false);
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t t = (i + 1) * 100 * kMs;
    AppendTensor(&log, 0, abi::OpKind::kAllreduce, t + 3 * kMs, 8, {{0, t}, {1, t + 2 * kMs}}, false, 0);
    AppendTensor(&log, 0, abi::OpKind::kAllreduce, t + 9 * kMs, 64, {{0, t + 1 * kMs}, {1, t}}, false, 1);
    AppendTensor(&log, 0, abi::OpKind::kAllreduce, t + 9 * kMs, 64, {{0, t + 1 * kMs}, {1, t}}, false, 1);
  }
  log.Fold([](const CompletionFigures& g) {
    EXPECT_EQ(g.jobs.size(), 2u);
    const CollectiveMetrics& a = g.jobs.at(7).metrics.at({0, uint32_t(abi::OpKind::kAllreduce)});
    const CollectiveMetrics& b = g.jobs.at(8).metrics.at({0, uint32_t(abi::OpKind::kAllreduce)});
    EXPECT_EQ(a.ops, 4u);
    EXPECT_EQ(a.bytes, 32u);
    EXPECT_EQ(b.ops, 8u);
    EXPECT_EQ(b.bytes, 512u);
    // Job 7's rank 1 comes last, job 8's rank 0.
    const std::vector<StragglerRank> sa = g.jobs.at(7).stragglers.Summary();
    const std::vector<StragglerRank> sb = g.jobs.at(8).stragglers.Summary();
    EXPECT_FALSE(sa.empty() || sb.empty());
    if (sa.empty() || sb.empty()) return 0;
    EXPECT_EQ(sa[0].rank, 1u);
    EXPECT_NEAR(sa[0].mean_late_ms, 2.0, 1e-9);
    EXPECT_EQ(sb[0].rank, 0u);
    EXPECT_NEAR(sb[0].mean_late_ms, 1.0, 1e-9);
    return 0;
  });
  log.EndJob(0);
  log.BeginJob(0, 9, /*alone=*/false);
  AppendTensor(&log, 2, abi::OpKind::kBroadcast, 20 * kMs, 4, {{0, 11 * kMs}}, false, 0);
  log.Fold([](const CompletionFigures& g) {
    EXPECT_EQ(g.jobs.count(7), 0u) << "an ended job's figures go";
    EXPECT_EQ(g.jobs.at(8).metrics.size(), 1u) << "the other job's stay";
    EXPECT_EQ(g.jobs.at(9).metrics.count({2, uint32_t(abi::OpKind::kBroadcast)}), 1u);
    EXPECT_EQ(g.jobs.at(9).metrics.size(), 1u);
    return 0;
  });
}

TEST(CompletionLogTest, AFullQueueDropsAndCountsEventsAndTheFiguresStayWhole) {
  CompletionLog log;
  // More tensors than the queue holds, no fold meanwhile: the ones that did not fit are counted.
  const size_t tensors = CompletionLog::kCapacity / 3 + 100;  // three events each
  for (size_t i = 0; i < tensors; ++i)
    AppendTensor(&log, 0, abi::OpKind::kAllreduce, (i + 2) * kMs, 8, {{0, (i + 1) * kMs}, {1, (i + 1) * kMs + 1}});
  AppendTensor(&log, 0, abi::OpKind::kAllreduce, UINT64_MAX / 2, 8, {{0, 1}, {1, 2}});  // refused whole
  const uint64_t dropped = log.Fold([](const CompletionFigures& g) {
    // The queue holds kCapacity events: whole tensors, then one cut short after its first event
    // (kCapacity = 3k + 1), which keeps what came of it; everything after is dropped and counted.
    EXPECT_EQ(g.dropped, (tensors + 1) * 3 - CompletionLog::kCapacity);
    const CollectiveMetrics& m = g.jobs.at(0).metrics.at({0, uint32_t(abi::OpKind::kAllreduce)});
    EXPECT_EQ(m.ops, CompletionLog::kCapacity / 3 + 1);
    EXPECT_EQ(m.latency.count, m.ops);
    EXPECT_EQ(g.jobs.at(0).stragglers.collectives(), std::min<size_t>(CompletionLog::kCapacity / 3, g.jobs.at(0).stragglers.window()));
    return g.dropped;
  });
  // Once folded there is room again.
  AppendTensor(&log, 0, abi::OpKind::kAllreduce, 5 * kMs, 8, {{0, 1 * kMs}, {1, 2 * kMs}});
  log.Fold([dropped](const CompletionFigures& g) {
    EXPECT_EQ(g.dropped, dropped);
    return 0;
  });
}

// The engine appends while another thread folds (ThreadSanitizer checks the hand-over).
TEST(CompletionLogTest, FoldingWhileTheEngineAppendsLosesNothing) {
  CompletionLog log;
  constexpr int kTensors = 200'000;
  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (int i = 0; i < kTensors; ++i) {
      AppendTensor(&log, 0, abi::OpKind::kAllreduce, uint64_t(i + 2) * kMs, 4, {{0, uint64_t(i) * kMs}, {1, uint64_t(i) * kMs}});
      if (i % 4096 == 0) std::this_thread::yield();
    }
    done = true;
  });
  uint64_t folds = 0;
  while (!done) {
    log.Fold([](const CompletionFigures&) { return 0; });
    ++folds;
  }
  engine.join();
  log.Fold([](const CompletionFigures& g) {
    const CollectiveMetrics& m = g.jobs.at(0).metrics.at({0, uint32_t(abi::OpKind::kAllreduce)});
    // Each tensor counted once, unless the queue was full (a slow fold): then its loss is counted.
    if (g.dropped == 0) {
      EXPECT_EQ(m.ops, uint64_t(kTensors));
    }
    EXPECT_GE(m.ops + g.dropped, uint64_t(kTensors));
    EXPECT_LE(m.ops, uint64_t(kTensors));
    EXPECT_EQ(m.bytes, m.ops * 4);
    return 0;
  });
  EXPECT_GT(folds, 0u);
}

}  // namespace
}  // namespace syncd
