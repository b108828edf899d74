// One daemon, several real client processes: results of every collective, op and dtype.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {


int AllreduceChecked(syncd_client* c, int rank, int n, syncd_dtype dt, syncd_reduce_op op, size_t count,
                     bool zero_copy, const std::string& name) {
  const size_t bytes = count * syncd_dtype_size(dt);
  std::vector<char> user(zero_copy ? 0 : bytes);
  void* buf = zero_copy ? syncd_alloc(c, bytes) : user.data();
  CHILD_CHECK(buf != nullptr, "alloc %zu: %s", bytes, syncd_last_error());
  for (size_t i = 0; i < count; ++i) SetValue(buf, dt, i, InputFor(dt, rank, i));
  int64_t shape[2] = {int64_t(count), 1};
  syncd_tensor t{name.c_str(), buf, dt, 2, shape, 0};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_async(c, &t, op, 1.0, 1.0, &h) == SYNCD_OK, "%s", syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  for (size_t i = 0; i < count; ++i) {
    const double want = Expected(dt, op, n, i), got = GetValue(buf, dt, i);
    CHILD_CHECK(got == want, "%s element %zu: got %g want %g", name.c_str(), i, got, want);
  }
  if (zero_copy) syncd_free(c, buf);
  return 0;
}

TEST(Collectives, AllreduceEveryOpAndDtypeIsExact) {
  Daemon d(3);
  auto st = RunRanks(d.run_dir(), 3, [](syncd_client* c, int rank, int n) {
    for (size_t count : {size_t(1), size_t(4099)})
      for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
        for (int op = 0; op <= SYNCD_PRODUCT; ++op)
          for (bool zc : {true, false}) {
            if (!Allreducible(syncd_dtype(dt), syncd_reduce_op(op))) continue;
            const std::string name = "t." + std::to_string(count) + "." + std::to_string(dt) + "." +
                                     std::to_string(op) + (zc ? ".zc" : ".staged");
            if (AllreduceChecked(c, rank, n, syncd_dtype(dt), syncd_reduce_op(op), count, zc, name)) return 1;
          }
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Collectives, AllreduceLargeTensorsUpTo64MiB) {
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    if (AllreduceChecked(c, rank, n, SYNCD_INT32, SYNCD_SUM, (1u << 20) + 3, false, "mid.staged")) return 1;
    if (AllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 16u << 20, true, "big.zc")) return 1;  // 64 MiB
    if (AllreduceChecked(c, rank, n, SYNCD_INT64, SYNCD_MAX, 8u << 20, false, "big.staged")) return 1;  // 64 MiB
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Collectives, ScaleFactorsApplyBeforeAndAfterTheReduction) {
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    double v[3] = {1.0 + rank, 10.0, -4.0};
    int64_t shape = 3;
    syncd_tensor t{"scaled", v, SYNCD_FLOAT64, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 0.5, 4.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(v[0] == 6.0 && v[1] == 40.0 && v[2] == -16.0, "got %g %g %g", v[0], v[1], v[2]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Collectives, BroadcastFromEveryRootAndDtype) {
  Daemon d(4);
  auto st = RunRanks(d.run_dir(), 4, [](syncd_client* c, int rank, int n) {
    for (int root = 0; root < n; ++root)
      for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
        for (size_t count : {size_t(1), size_t(1000)}) {
          const size_t bytes = count * syncd_dtype_size(syncd_dtype(dt));
          void* buf = syncd_alloc(c, bytes);
          for (size_t i = 0; i < count; ++i) SetValue(buf, syncd_dtype(dt), i, double((rank * 31 + i) % 100));
          int64_t shape = int64_t(count);
          const std::string name = "b." + std::to_string(root) + "." + std::to_string(dt) + "." + std::to_string(count);
          syncd_tensor t{name.c_str(), buf, syncd_dtype(dt), 1, &shape, 0};
          syncd_handle h;
          CHILD_CHECK(syncd_broadcast_async(c, &t, root, &h) == SYNCD_OK, "%s", syncd_last_error());
          CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
          for (size_t i = 0; i < count; ++i)
            CHILD_CHECK(GetValue(buf, syncd_dtype(dt), i) == Representable(syncd_dtype(dt), double((root * 31 + i) % 100)),
                        "%s element %zu",
                        name.c_str(), i);
          syncd_free(c, buf);
        }
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Collectives, NoRankLeavesABarrierBeforeAllEntered) {
  auto* arrived = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  new (arrived) std::atomic<int>(0);
  Daemon d(3);
  auto st = RunRanks(d.run_dir(), 3, [arrived](syncd_client* c, int rank, int n) {
    for (int round = 1; round <= 10; ++round) {
      usleep(useconds_t((rank * 7 + round) % 4) * 3000);  // arrive in varying order
      arrived->fetch_add(1);
      syncd_handle h;
      CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
      const int seen = arrived->load();
      CHILD_CHECK(seen >= round * n, "round %d: left the barrier after %d arrivals", round, seen);
      // A second barrier keeps a fast rank from counting the next round's arrival early.
      CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK, "%s",
                  syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  munmap(arrived, 4096);
}

// Many tensors in flight at once, waited for in reverse order; fused by the daemon.
int ManyInFlight(syncd_client* c, int rank, int n, int tensors) {
  std::vector<float*> bufs;
  std::vector<syncd_handle> handles(static_cast<size_t>(tensors));
  for (int i = 0; i < tensors; ++i) {
    auto* b = static_cast<float*>(syncd_alloc(c, 64 * sizeof(float)));
    for (int k = 0; k < 64; ++k) b[k] = float(rank + i + k);
    int64_t shape = 64;
    const std::string name = "grad." + std::to_string(i);
    syncd_tensor t{name.c_str(), b, SYNCD_FLOAT32, 1, &shape, 0};
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &handles[size_t(i)]) == SYNCD_OK, "%s",
                syncd_last_error());
    bufs.push_back(b);
  }
  for (int i = tensors - 1; i >= 0; --i) {
    CHILD_CHECK(syncd_wait(c, handles[size_t(i)], 10'000) == SYNCD_OK, "%s", syncd_last_error());
    for (int k = 0; k < 64; ++k) {
      const float want = float(n * (i + k) + n * (n - 1) / 2);
      CHILD_CHECK(bufs[size_t(i)][k] == want, "grad.%d[%d] = %g, want %g", i, k, bufs[size_t(i)][k], want);
    }
  }
  return 0;
}


TEST(Collectives, ReadyTensorsAreFusedAndStatusShowsIt) {
  Daemon d(2);
  // Rank 1 submits only after rank 0 has queued everything, so all 300 become ready together.
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    if (rank == 1) usleep(200'000);
    return ManyInFlight(c, rank, n, 300);
  });
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  ASSERT_FALSE(json.empty());
  const uint64_t allreduce = KindOps(json, "allreduce"), fused = JsonNumber(json, "fused_ops");
  EXPECT_EQ(allreduce, 300u) << json;
  EXPECT_LT(fused, 30u) << "300 small ready tensors should fuse into a few operations: " << json;
  // The table a user reads lists every kind of the registry by name, those not run too.
  const std::string text = SyncctlStatus(d.run_dir());
  for (const char* kind : {"allreduce 300", "broadcast 0", "barrier 0", "allgather 0", "alltoall 0", "reducescatter 0",
                           "join 0", "partial allreduce 0", "reduce 0", "gather 0", "scatter 0", "errors 0"})
    EXPECT_TRUE(Contains(text, kind)) << kind << " missing from:\n" << text;
}

TEST(Collectives, FusionThresholdZeroRunsEveryTensorAlone) {
  Daemon d(2, {"--fusion-threshold", "0"});
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    if (rank == 1) usleep(100'000);
    return ManyInFlight(c, rank, n, 50);
  });
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  EXPECT_EQ(JsonNumber(json, "fused_ops"), 50u) << json;
}

TEST(Collectives, RunDirectoryAndSocketsAreOwnerOnly) {
  Daemon d(1);
  struct stat st {};
  ASSERT_EQ(stat(d.run_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "run directory mode";
  for (const char* sock : {"/attach.sock", "/control.sock"}) {
    ASSERT_EQ(stat((d.run_dir() + sock).c_str(), &st), 0) << sock;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << sock;
    EXPECT_EQ(st.st_mode & 0077, 0u) << sock << " must not be reachable by group or others";
  }
}

TEST(Collectives, StatusReportsClientsCoresAndCounters) {
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    CHILD_CHECK(syncd_rank(c) == rank && syncd_size(c) == n && syncd_local_rank(c) == rank &&
                    syncd_local_size(c) == n && syncd_cross_rank(c) == 0 && syncd_cross_size(c) == 1,
                "identity");
    // The job's global set as launched: every rank, membership 0; a short buffer gets the count.
    int set[2] = {-1, -1}, count = 0;
    uint32_t membership = 7;
    CHILD_CHECK(syncd_job_set_ranks(c, set, 2, &count, &membership) == SYNCD_OK && count == n && set[0] == 0 &&
                    set[1] == 1 && membership == 0,
                "job set: %d ranks, membership %u: %s", count, membership, syncd_last_error());
    CHILD_CHECK(syncd_job_set_ranks(c, nullptr, 0, &count, nullptr) == SYNCD_OK && count == n, "count only");
    CHILD_CHECK(syncd_job_set_ranks(c, set, 1, &count, nullptr) == SYNCD_OK && count == n, "a buffer of one");
    CHILD_CHECK(syncd_job_set_ranks(c, set, 2, nullptr, nullptr) == SYNCD_ERR_INVALID &&
                    syncd_job_set_ranks(c, set, -1, &count, nullptr) == SYNCD_ERR_INVALID &&
                    syncd_job_set_ranks(c, nullptr, 2, &count, nullptr) == SYNCD_ERR_INVALID,
                "bad arguments are refused");
    return ManyInFlight(c, rank, n, 5);
  });
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  for (const char* key : {"\"version\"", "\"uptime_s\"", "\"worker_cores\"", "\"clients\"", "\"bytes_reduced\"",
                          "\"mean_tensors_per_fusion\"", "\"submit_depth\"", "\"node_count\""})
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing from " << json;
  EXPECT_EQ(JsonNumber(json, "bytes_reduced"), 5u * 64 * 4);
  // The engine's cost per collective: over the collectives completed here (each once, not per rank).
  EXPECT_EQ(JsonNumber(json, "collectives_completed"), 5u) << json;
  EXPECT_GE(JsonNumber(json, "engine_work_turns"), 1u) << json;
  EXPECT_NE(SyncctlStatus(d.run_dir()).find("per collective (5): "), std::string::npos) << SyncctlStatus(d.run_dir());
}

// Scrapes run on civetweb's threads while the engine completes collectives: counts come out exact.
TEST(Collectives, MetricsEndpointCountsWhileScrapedConcurrently) {
  Daemon d(2, {"--metrics-port", "0"});
  std::string url;
  std::ifstream(d.run_dir() + "/metrics.url") >> url;
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  const int port = std::stoi(url.substr(strlen("http://127.0.0.1:")));
  std::atomic<bool> done{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!done.load()) {
      if (HttpGet(port, "/metrics").first.find(" 200 ") != std::string::npos) ++scrapes;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) { return ManyInFlight(c, rank, n, 300); });
  done = true;
  scraper.join();
  ExpectAllSucceeded(st);
  EXPECT_GT(scrapes.load(), 0);
  const auto [status, page] = HttpGet(port, "/metrics");
  EXPECT_NE(status.find(" 200 "), std::string::npos) << status;
  EXPECT_EQ(Sample(page, "syncd_collectives_total{", "process_set=\"0\",kind=\"allreduce\""), 300) << page;
  EXPECT_EQ(Sample(page, "syncd_collective_bytes_total{", "process_set=\"0\",kind=\"allreduce\""), 300 * 64 * 4 * 2);
  EXPECT_EQ(Sample(page, "syncd_collective_latency_seconds_count{", "process_set=\"0\",kind=\"allreduce\""), 300);
  EXPECT_EQ(Sample(page, "syncd_collective_latency_seconds_bucket{", "kind=\"allreduce\",le=\"+Inf\""), 300);
  EXPECT_EQ(Sample(page, "syncd_clients{", "state=\"attached\""), 0);  // the ranks have detached
  EXPECT_NE(HttpGet(port, "/other").first.find(" 404 "), std::string::npos);
  EXPECT_NE(d.StatusJson().find("\"metrics_url\":\"" + url + "\""), std::string::npos);
  // The daemon's next job starts its series from zero, under its own job_id.
  ExpectAllSucceeded(RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) { return ManyInFlight(c, rank, n, 5); }));
  const std::string next = HttpGet(port, "/metrics").second;
  EXPECT_EQ(Sample(next, "syncd_collectives_total{", "process_set=\"0\",kind=\"allreduce\""), 5) << next;
  EXPECT_EQ(Sample(next, "syncd_collectives_completed_total{", ""), 305) << "over the daemon's life: " << next;
  EXPECT_NE(next.find("job_id=\"" + std::to_string(CurrentJobId()) + "\""), std::string::npos) << next;
  EXPECT_EQ(next.find("job_id=\"" + std::to_string(CurrentJobId() - 1) + "\""), std::string::npos);
}

// Sends and receives through the C API on one node: rank 0 sends 10 tensors to rank 1 on one tag,
// in order; a receive of the wrong size fails naming both sizes. The daemon's metrics count them
// per kind, as they count collectives.
TEST(Collectives, SendsAndReceivesArriveInOrderAndAreCountedPerKind) {
  Daemon d(2, {"--metrics-port", "0"});
  std::string url;
  std::ifstream(d.run_dir() + "/metrics.url") >> url;
  const int port = std::stoi(url.substr(strlen("http://127.0.0.1:")));
  constexpr int kMessages = 10;
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int) {
    int64_t shape[1] = {64};
    std::vector<std::vector<float>> bufs(kMessages, std::vector<float>(64));
    std::vector<syncd_handle> handles(kMessages);
    for (int i = 0; i < kMessages; ++i) {
      if (rank == 0) std::fill(bufs[i].begin(), bufs[i].end(), float(i));
      const std::string name = "p2p." + std::to_string(i);  // names in flight on a rank differ
      syncd_tensor t{name.c_str(), bufs[i].data(), SYNCD_FLOAT32, 1, shape, 0};
      const int rc = rank == 0 ? syncd_send_async(c, &t, 1, 7, &handles[i]) : syncd_recv_async(c, &t, 0, 7, &handles[i]);
      CHILD_CHECK(rc == SYNCD_OK, "message %d: %s", i, syncd_last_error());
    }
    for (int i = 0; i < kMessages; ++i) {
      int source = -1;
      const int rc = rank == 0 ? syncd_wait(c, handles[i], 20'000) : syncd_recv_wait(c, handles[i], 20'000, &source);
      CHILD_CHECK(rc == SYNCD_OK, "message %d: %s", i, syncd_last_error());
      if (rank == 1) {
        CHILD_CHECK(source == 0, "message %d from rank %d", i, source);
        CHILD_CHECK(bufs[i] == std::vector<float>(64, float(i)), "message %d out of order: %g", i, bufs[i][0]);
      }
    }
    // The wrong size: the receive fails naming both; the send completes.
    std::vector<float> x(rank == 0 ? 8 : 4);
    int64_t n[1] = {int64_t(x.size())};
    syncd_tensor t{"p2p.size", x.data(), SYNCD_FLOAT32, 1, n, 0};
    syncd_handle h;
    if (rank == 0) {
      CHILD_CHECK(syncd_send_async(c, &t, 1, 0, &h) == SYNCD_OK && syncd_wait(c, h, 20'000) == SYNCD_OK, "%s",
                  syncd_last_error());
    } else {
      CHILD_CHECK(syncd_recv_async(c, &t, 0, 0, &h) == SYNCD_OK, "%s", syncd_last_error());
      const int rc = syncd_recv_wait(c, h, 20'000, nullptr);
      CHILD_CHECK(rc == SYNCD_ERR_MISMATCH && Contains(syncd_last_error(), "rank 0 sent 32 bytes of float32") &&
                      Contains(syncd_last_error(), "the receive holds 16 bytes"),
                  "%s: %s", syncd_status_name(rc), syncd_last_error());
    }
    return 0;
  });
  ExpectAllSucceeded(st);
  const std::string page = HttpGet(port, "/metrics").second;
  EXPECT_EQ(Sample(page, "syncd_collectives_total{", "process_set=\"0\",kind=\"send\""), kMessages + 1) << page;
  EXPECT_EQ(Sample(page, "syncd_collectives_total{", "process_set=\"0\",kind=\"recv\""), kMessages) << page;
  EXPECT_EQ(Sample(page, "syncd_collective_bytes_total{", "process_set=\"0\",kind=\"recv\""), kMessages * 64 * 4);
  EXPECT_EQ(Sample(page, "syncd_collective_latency_seconds_count{", "process_set=\"0\",kind=\"send\""),
            kMessages + 1);
  EXPECT_EQ(Sample(page, "syncd_collective_errors_total{", "kind=\"recv\",code=\"MISMATCH\""), 1) << page;
}

// A receive whose send does not come: `syncctl status` shows it waiting, naming both ranks, and the
// daemon warns after --stall-warning-s; --stall-shutdown-s does not end the job over it (a receive
// may wait long on purpose: the caller's timeout bounds it). The late send then completes it.
TEST(Collectives, AReceiveWaitingForItsSendIsShownAndWarnedAboutButNotShutDown) {
  Daemon d(2, {"--stall-warning-s", "1", "--stall-shutdown-s", "2"});
  const std::string run_dir = d.run_dir();
  auto st = RunRanks(run_dir, 2, [&run_dir](syncd_client* c, int rank, int) {
    std::vector<float> v(4, rank == 0 ? 5.0f : 0.0f);
    int64_t shape[1] = {4};
    syncd_tensor t{"late", v.data(), SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    if (rank == 1) {
      CHILD_CHECK(syncd_recv_async(c, &t, 0, 3, &h) == SYNCD_OK, "%s", syncd_last_error());
      int source = -1;
      CHILD_CHECK(syncd_recv_wait(c, h, 20'000, &source) == SYNCD_OK && source == 0, "%s", syncd_last_error());
      CHILD_CHECK(v == std::vector<float>(4, 5.0f), "got %g", v[0]);
      return 0;
    }
    usleep(3'000'000);  // past both thresholds
    const std::string text = SyncctlStatus(run_dir, "");
    CHILD_CHECK(Contains(text, "WAITING  recv of tensor 'late' (tag 3) by rank 1 waiting") && Contains(text, "for rank 0"),
                "%s", text.c_str());
    CHILD_CHECK(Contains(SyncctlStatusJson(run_dir), "\"transfer\":\"recv\""), "no transfer in the JSON status");
    CHILD_CHECK(syncd_send_async(c, &t, 1, 3, &h) == SYNCD_OK && syncd_wait(c, h, 20'000) == SYNCD_OK, "%s",
                syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
  EXPECT_TRUE(Contains(d.Log(), "stall: recv of tensor 'late' (tag 3) has waited ")) << d.Log();
  EXPECT_FALSE(Contains(d.Log(), "shut down")) << d.Log();
}

}  // namespace
}  // namespace syncd::testing
