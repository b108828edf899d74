// GPU tensors: CUDA IPC handles, the pointer cache and fused NCCL allreduce in the daemon, with
// real client processes on one GPU. Skipped, with the reason, where no GPU is visible; the
// refusal test runs everywhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/values.h"

#ifdef SYNCD_TEST_CUDA
#include <cuda_runtime.h>

#include "daemon/exec/gpu_executor.h"
#endif

namespace syncd::testing {
namespace {

TEST(Gpu, AHostPointerOrAMissingDriverIsRefusedClearly) {
  Daemon d(1);
  auto st = RunRanks(d.run_dir(), 1, [](syncd_client* c, int, int) {
    std::vector<float> host(16, 1.0f);
    int64_t shape[1] = {16};
    syncd_tensor t{"not.on.a.gpu", host.data(), SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    const int rc = syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID, "got %s: %s", syncd_status_name(rc), syncd_last_error());
    const std::string why = syncd_last_error();
    // Either this machine has no CUDA driver, or the pointer is host memory: the message says which.
    CHILD_CHECK(Contains(why, "tensor 'not.on.a.gpu'") &&
                    (Contains(why, "not CUDA device memory") || Contains(why, "CUDA driver") ||
                     Contains(why, "without CUDA") || Contains(why, "cuInit")),
                "%s", why.c_str());
    // The client still works for host tensors.
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
}

#ifdef SYNCD_TEST_CUDA

// Whether a GPU is visible, asked in a child: the test process itself must not initialise CUDA
// before it forks its ranks.
bool GpuVisible() {
  static const bool visible = [] {
    pid_t pid = Spawn([] {
      int n = 0;
      return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1;
    });
    return WaitChild(pid, 60'000) == 0;
  }();
  return visible;
}

#define SKIP_WITHOUT_GPU() \
  if (!GpuVisible()) GTEST_SKIP() << "no CUDA device visible: GPU tests need one (run them on a GPU machine)"

#define CUDA_CHECK(call)                                                                                   \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    CHILD_CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                               \
  } while (0)

// Fills a device tensor with rank `rank`'s inputs, allreduces it in the daemon, checks every element.
int GpuAllreduceChecked(syncd_client* c, int rank, int n, syncd_dtype dt, syncd_reduce_op op, size_t count,
                        const std::string& name, void* dev = nullptr) {
  const size_t bytes = count * syncd_dtype_size(dt);
  std::vector<char> host(bytes);
  for (size_t i = 0; i < count; ++i) SetValue(host.data(), dt, i, InputFor(dt, rank, i));
  const bool own = dev == nullptr;
  if (own) CUDA_CHECK(cudaMalloc(&dev, bytes));
  CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
  int64_t shape[1] = {int64_t(count)};
  syncd_tensor t{name.c_str(), dev, dt, 1, shape, 0};
  syncd_handle h;
  CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, op, 1.0, 1.0, nullptr, &h) == SYNCD_OK, "%s", syncd_last_error());
  CHILD_CHECK(syncd_wait(c, h, 60'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
  CUDA_CHECK(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) {
    const double want = Expected(dt, op, n, i), got = GetValue(host.data(), dt, i);
    CHILD_CHECK(got == want, "%s element %zu of %zu: got %g want %g", name.c_str(), i, count, got, want);
  }
  if (own) CUDA_CHECK(cudaFree(dev));
  return 0;
}

TEST(Gpu, AllreduceEveryDtypeAndOpIsExactFromOneElementTo256MiB) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt) {
      if (!Allreducible(syncd_dtype(dt), SYNCD_SUM, true)) continue;
      const size_t esize = syncd_dtype_size(syncd_dtype(dt));
      for (int op = 0; op <= SYNCD_PRODUCT; ++op)
        for (size_t count : {size_t(1), size_t(4099), (size_t(1) << 20) / esize + 1}) {
          if (!Allreducible(syncd_dtype(dt), syncd_reduce_op(op), true)) continue;
          const std::string name = "g." + std::to_string(dt) + "." + std::to_string(op) + "." + std::to_string(count);
          if (GpuAllreduceChecked(c, rank, n, syncd_dtype(dt), syncd_reduce_op(op), count, name)) return 1;
        }
      for (size_t mib : {size_t(64), size_t(256)}) {
        const std::string name = "big." + std::to_string(dt) + "." + std::to_string(mib);
        if (GpuAllreduceChecked(c, rank, n, syncd_dtype(dt), SYNCD_SUM, (mib << 20) / esize, name)) return 1;
      }
    }
    return 0;
  }, 400'000);
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  EXPECT_GE(JsonNumber(json, "allreduces"), uint64_t(8 * 17)) << json;  // 8 dtypes (int16: no NCCL type)
  EXPECT_TRUE(Contains(json, "\"devices\"")) << json;
}

TEST(Gpu, PrescalePostscaleAndAverageFollowTheHostSemantics) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    const size_t count = 1000;
    float* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, count * sizeof(float)));
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = float(i % 10 + rank);
    CUDA_CHECK(cudaMemcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    int64_t shape[1] = {int64_t(count)};
    syncd_tensor t{"scaled", dev, SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, SYNCD_AVERAGE, 0.5, 4.0, nullptr, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK, "%s", syncd_last_error());
    CUDA_CHECK(cudaMemcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      const float want = 4.0f * (0.5f * float(i % 10) + 0.5f * float(i % 10 + 1)) / 2.0f;
      CHILD_CHECK(std::fabs(host[i] - want) < 1e-5f, "element %zu: got %g want %g", i, host[i], want);
    }
    cudaFree(dev);
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Gpu, BroadcastEveryDtypeFromEveryRoot) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    for (int dt = 0; dt < SYNCD_DTYPE_COUNT; ++dt)
      for (int root = 0; root < n; ++root) {
        const syncd_dtype dtype = syncd_dtype(dt);
        const size_t count = 3001, bytes = count * syncd_dtype_size(dtype);
        std::vector<char> host(bytes);
        for (size_t i = 0; i < count; ++i) SetValue(host.data(), dtype, i, double((i + size_t(rank) * 5) % 100));
        void* dev = nullptr;
        CUDA_CHECK(cudaMalloc(&dev, bytes));
        CUDA_CHECK(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice));
        const std::string name = "b." + std::to_string(dt) + "." + std::to_string(root);
        int64_t shape[1] = {int64_t(count)};
        syncd_tensor t{name.c_str(), dev, dtype, 1, shape, 0};
        syncd_handle h;
        CHILD_CHECK(syncd_broadcast_gpu_async(c, &t, root, nullptr, &h) == SYNCD_OK, "%s", syncd_last_error());
        CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK, "%s: %s", name.c_str(), syncd_last_error());
        CUDA_CHECK(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; ++i) {
          const double want = Representable(dtype, double((i + size_t(root) * 5) % 100));
          CHILD_CHECK(GetValue(host.data(), dtype, i) == want, "%s element %zu: got %g want %g", name.c_str(), i,
                      GetValue(host.data(), dtype, i), want);
        }
        cudaFree(dev);
      }
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Gpu, ManySmallTensorsFuseIntoFewAllreducesAndStayExact) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    constexpr int kTensors = 64;
    constexpr size_t kCount = 1000;
    float* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, kTensors * kCount * sizeof(float)));  // one allocation, many tensors
    std::vector<float> host(kTensors * kCount);
    for (size_t i = 0; i < host.size(); ++i) host[i] = float(Input(rank, i));
    CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<syncd_handle> hs(kTensors);
    std::vector<std::string> names(kTensors);
    int64_t shape[1] = {int64_t(kCount)};
    for (int k = 0; k < kTensors; ++k) {
      names[k] = "layer." + std::to_string(k);
      syncd_tensor t{names[k].c_str(), dev + k * kCount, SYNCD_FLOAT32, 1, shape, 0};
      CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &hs[k]) == SYNCD_OK, "%s",
                  syncd_last_error());
    }
    for (int k = 0; k < kTensors; ++k)
      CHILD_CHECK(syncd_wait(c, hs[k], 30'000) == SYNCD_OK, "%s", syncd_last_error());
    CUDA_CHECK(cudaMemcpy(host.data(), dev, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < host.size(); ++i)
      CHILD_CHECK(host[i] == float(Input(0, i) + Input(1, i)), "element %zu: got %g", i, host[i]);
    cudaFree(dev);
    return 0;
  });
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  EXPECT_LT(JsonNumber(json, "allreduces"), uint64_t(64)) << "no fusion happened: " << json;
  EXPECT_EQ(JsonNumber(json, "ipc_handle_opens"), uint64_t(2)) << "one allocation per rank: " << json;
}

// The caller's stream signals the daemon's through a flag it writes (stream memory operations),
// or, with SYNCD_GPU_WAIT=event (and on drivers without 64-bit stream memory operations), through
// an interprocess event. Either way the daemon reads the tensor only after the caller's work.
class GpuWait : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuWait, TheDaemonWaitsForWorkQueuedOnTheCallersStream) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  const std::string mode = GetParam();
  auto st = RunRanks(d.run_dir(), 2, [&](syncd_client* c, int rank, int n) {
    setenv("SYNCD_GPU_WAIT", mode.c_str(), 1);  // read when the client first loads the CUDA driver
    const size_t count = size_t(64) << 20;  // int32: 256 MiB, long enough to race with
    std::vector<int32_t> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = int32_t(i % 1000) + rank;
    int32_t *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, count * 4));
    CUDA_CHECK(cudaMalloc(&dst, count * 4));
    CUDA_CHECK(cudaMemcpy(src, host.data(), count * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dst, 0, count * 4));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int round = 0; round < 3; ++round) {
      // Queue the producer and submit at once: no host synchronisation in between.
      CUDA_CHECK(cudaMemcpyAsync(dst, src, count * 4, cudaMemcpyDeviceToDevice, s));
      const std::string name = "streamed." + std::to_string(round);
      int64_t shape[1] = {int64_t(count)};
      syncd_tensor t{name.c_str(), dst, SYNCD_INT32, 1, shape, 0};
      syncd_handle h;
      CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, s, &h) == SYNCD_OK, "%s", syncd_last_error());
      CHILD_CHECK(syncd_wait(c, h, 30'000) == SYNCD_OK, "%s", syncd_last_error());
      CUDA_CHECK(cudaMemcpy(host.data(), dst, count * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; i += 997)
        CHILD_CHECK(host[i] == 2 * int32_t(i % 1000) + 1, "round %d element %zu: got %d (the daemon read the tensor "
                    "before the caller's stream wrote it)", round, i, host[i]);
    }
    cudaStreamDestroy(s);
    return 0;
  });
  ExpectAllSucceeded(st);
  const std::string json = d.StatusJson();
  const uint64_t flags = JsonNumber(json, "flag_waits"), events = JsonNumber(json, "event_waits");
  if (mode == "flag") {
    EXPECT_TRUE(flags >= 1 && flags != UINT64_MAX && events == 0) << "flag waits " << flags << ", event waits "
                                                                   << events << ": " << json;
  } else {
    EXPECT_TRUE(events >= 1 && events != UINT64_MAX && flags == 0) << "flag waits " << flags << ", event waits "
                                                                    << events << ": " << json;
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuWait, ::testing::Values("flag", "event"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Gpu, IpcHandlesAreCachedUntilTheAllocationIsFreed) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  const std::string run_dir = d.run_dir();
  auto st = RunRanks(run_dir, 2, [run_dir](syncd_client* c, int rank, int n) {
    const size_t count = 4096;
    void* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, count * 4));
    for (int k = 0; k < 10; ++k)
      if (GpuAllreduceChecked(c, rank, n, SYNCD_INT32, SYNCD_SUM, count, "cached." + std::to_string(k), dev)) return 1;
    std::string json = SyncctlStatusJson(run_dir);
    CHILD_CHECK(JsonNumber(json, "ipc_handle_opens") == 2 && JsonNumber(json, "ipc_handle_hits") == 18,
                "10 allreduces of one allocation on 2 ranks: want 2 opens and 18 hits: %s", json.c_str());
    // Free it and allocate again (often at the same address): the daemon must not use the stale mapping.
    CUDA_CHECK(cudaFree(dev));
    dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, count * 8));
    if (GpuAllreduceChecked(c, rank, n, SYNCD_INT64, SYNCD_SUM, count, "reallocated", dev)) return 1;
    syncd_handle h;
    CHILD_CHECK(syncd_barrier_async(c, &h) == SYNCD_OK && syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    json = SyncctlStatusJson(run_dir);
    CHILD_CHECK(JsonNumber(json, "ipc_handle_opens") == 4, "a new allocation is opened again: %s", json.c_str());
    cudaFree(dev);
    return 0;
  });
  ExpectAllSucceeded(st);
}

TEST(Gpu, HostAndGpuTensorsOfOneNameFailOnEveryRank) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    const size_t count = 100;
    std::vector<float> host(count, 1.0f);
    float* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, count * 4));
    int64_t shape[1] = {int64_t(count)};
    syncd_tensor t{"where", rank == 0 ? static_cast<void*>(dev) : host.data(), SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    const int rc = rank == 0 ? syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h)
                             : syncd_allreduce_async(c, &t, SYNCD_SUM, 1.0, 1.0, &h);
    CHILD_CHECK(rc == SYNCD_OK, "%s", syncd_last_error());
    const int w = syncd_wait(c, h, 10'000);
    CHILD_CHECK(w == SYNCD_ERR_MISMATCH, "got %s: %s", syncd_status_name(w), syncd_last_error());
    CHILD_CHECK(Contains(syncd_last_error(), "mismatched memory") && Contains(syncd_last_error(), "GPU on rank 0"),
                "%s", syncd_last_error());
    cudaFree(dev);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// NCCL has no 16-bit integer type: an int16 GPU allreduce fails on every rank saying so (as
// Horovod's NCCL path does), and the job goes on; bool reduces as a logical or.
TEST(Gpu, Int16AllreduceFailsClearlyAndBoolIsLogical) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    int16_t* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, 100 * sizeof(int16_t)));
    int64_t shape[1] = {100};
    syncd_tensor t{"short", dev, SYNCD_INT16, 1, shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h) == SYNCD_OK, "%s", syncd_last_error());
    const int w = syncd_wait(c, h, 10'000);
    CHILD_CHECK(w == SYNCD_ERR_INVALID && Contains(syncd_last_error(), "NCCL has no 16-bit integer type"),
                "got %s: %s", syncd_status_name(w), syncd_last_error());
    cudaFree(dev);
    return GpuAllreduceChecked(c, rank, n, SYNCD_BOOL, SYNCD_SUM, 4099, "flags");
  });
  ExpectAllSucceeded(st);
}

TEST(Gpu, AClientThatDiesFailsItsPeersAndTheDaemonServesTheNextJob) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  auto st = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    if (GpuAllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1 << 16, "before")) return 1;
    if (rank == 1) _exit(0);  // dies holding IPC mappings in the daemon
    void* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, 4096));
    int64_t shape[1] = {1024};
    syncd_tensor t{"after", dev, SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    int rc = syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h);
    if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
    CHILD_CHECK(rc == SYNCD_ERR_RANK_LOST && Contains(syncd_last_error(), "rank 1"), "got %s: %s",
                syncd_status_name(rc), syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
  auto next = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    return GpuAllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1 << 16, "next.job");
  });
  ExpectAllSucceeded(next);
}

// A rank dies while its stream still holds back its part of a GPU allreduce, so its flag or its
// interprocess event will never be signalled. The other rank gets an error naming the lost rank
// instead of waiting for ever, and the next job on the same daemon runs on the GPU again. Flag:
// the allreduce was queued behind a wait for the flag; the daemon aborts the GPU path, raises the
// flag itself (its stream goes on; no stream synchronisation without a bound) and rebuilds the
// NCCL communicator for the next job. Event: an event cannot be released, so the daemon never
// queued anything behind it; the request waited in the engine for the event to fire.
class GpuLost : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuLost, ARankDyingBeforeItsStreamSignalsFailsItsPeerAndTheNextJobRunsOnTheGpu) {
  SKIP_WITHOUT_GPU();
  Daemon d(2);
  const std::string mode = GetParam();
  auto st = RunRanks(d.run_dir(), 2, [&](syncd_client* c, int rank, int n) {
    setenv("SYNCD_GPU_WAIT", mode.c_str(), 1);
    if (GpuAllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1 << 16, "before")) return 1;
    const size_t count = 1 << 20;
    float* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, count * 4));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Rank 1's stream is held by a host function that never returns.
    if (rank == 1) CUDA_CHECK(cudaLaunchHostFunc(s, [](void*) { for (;;) pause(); }, nullptr));
    int64_t shape[1] = {int64_t(count)};
    syncd_tensor t{"held", dev, SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, s, &h) == SYNCD_OK, "%s", syncd_last_error());
    if (rank == 1) {
      usleep(500'000);  // both ranks' requests are in: the daemon has queued the allreduce behind the wait
      _exit(0);
    }
    const uint64_t t0 = abi::MonotonicNs();
    const int rc = syncd_wait(c, h, 15'000);
    const double waited_s = double(abi::MonotonicNs() - t0) / 1e9;
    CHILD_CHECK(rc != SYNCD_OK && rc != SYNCD_ERR_TIMEOUT && Contains(syncd_last_error(), "rank 1"),
                "got %s after %.1f s: %s", syncd_status_name(rc), waited_s, syncd_last_error());
    CHILD_CHECK(waited_s < 10, "the error took %.1f s", waited_s);
    return 0;
  });
  ExpectAllSucceeded(st);
  auto next = RunRanks(d.run_dir(), 2, [](syncd_client* c, int rank, int n) {
    for (int k = 0; k < 3; ++k)
      if (GpuAllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1 << 20, "next.job." + std::to_string(k))) return 1;
    return 0;
  }, 30'000);
  ExpectAllSucceeded(next);
  const std::string json = d.StatusJson();
  const uint64_t aborts = mode == "flag" ? 1 : 0;
  EXPECT_EQ(JsonNumber(json, "aborts"), aborts) << json;
  EXPECT_EQ(JsonNumber(json, "rebuilds"), aborts) << json;
  if (mode == "flag") {
    EXPECT_GE(JsonNumber(json, "flags_released"), uint64_t(1)) << json;
  }
  EXPECT_FALSE(Contains(json, "GPU collectives aborted")) << "the GPU path is down: " << json;
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuLost, ::testing::Values("flag", "event"),
                         [](const auto& info) { return std::string(info.param); });

// The 16 bytes of the daemon's first GPU's UUID, read from `syncctl status` ("… (GPU-xxxxxxxx-…)").
bool FirstGpuUuid(const Daemon& d, uint8_t uuid[16]) {
  const std::string json = d.StatusJson();
  const size_t at = json.find("(GPU-");
  if (at == std::string::npos) return false;
  std::string hex;
  for (size_t i = at + 5; i < json.size() && hex.size() < 32; ++i)
    if (json[i] != '-') hex += json[i];
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) uuid[i] = uint8_t(std::stoul(hex.substr(size_t(2 * i), 2), nullptr, 16));
  return true;
}

TEST(Gpu, ForgedGpuDescriptorsFailTheirTensorAndTheDaemonServesOn) {
  // What a broken client could hand the daemon: CUDA's refusals become that tensor's error.
  SKIP_WITHOUT_GPU();
  Daemon d(1);
  uint8_t uuid[16];
  ASSERT_TRUE(FirstGpuUuid(d, uuid)) << d.StatusJson();
  {
    RawClient raw(d.run_dir());
    struct Case {
      const char* what;
      std::function<void(abi::GpuDescriptor&)> forge;
      const char* expect;
    };
    std::vector<Case> cases = {
        {"another machine's GPU", [](auto& g) { memset(g.device_uuid, 0xab, 16); }, "is not one this syncd sees"},
        {"beyond its allocation", [](auto& g) { g.offset = g.alloc_bytes - 8; }, "lies outside its allocation"},
        {"a garbage IPC handle", [](auto& g) { memset(g.mem_handle, 0x5a, sizeof(g.mem_handle)); },
         "cudaIpcOpenMemHandle of its allocation failed"},
        {"an unknown ready kind", [](auto& g) { g.ready = 7; }, "ready kind 7 is unknown"},
        {"a flag beyond its allocation",
         [](auto& g) {
           g.ready = abi::kReadyFlag;
           g.flag_bytes = 4096;
           g.flag_offset = 4092;
         },
         "is not an aligned 8 bytes inside its allocation"},
    };
    uint64_t handle = 1;
    for (const Case& c : cases) {
      abi::GpuDescriptor g{};
      memcpy(g.device_uuid, uuid, 16);
      g.alloc_base = 0x7f0000000000ull + (handle << 24);
      g.alloc_bytes = 1 << 20;
      c.forge(g);
      memcpy(raw.arena(), &g, sizeof(g));
      abi::SubmitEntry e = raw.Valid(handle);
      e.flags = abi::kSubmitGpu;
      raw.Push(e);
      auto [status, msg] = raw.Await(handle, 20);
      EXPECT_NE(status, SYNCD_OK) << c.what;
      EXPECT_TRUE(Contains(msg, "tensor 'raw." + std::to_string(handle) + "'") && Contains(msg, c.expect))
          << c.what << ": " << msg;
      ++handle;
    }
  }
  auto st = RunRanks(d.run_dir(), 1, [](syncd_client* c, int rank, int n) {
    return GpuAllreduceChecked(c, rank, n, SYNCD_FLOAT32, SYNCD_SUM, 1 << 16, "after.forgeries");
  });
  ExpectAllSucceeded(st);
}

TEST(Gpu, DaemonsThatShareAGpuRefuseGpuTensorsClearlyAndServeHostTensors) {
  // Two simulated nodes on one GPU machine: NCCL cannot put one GPU twice into the job's
  // communicator, so the daemons start without GPU collectives and say why.
  SKIP_WITHOUT_GPU();
  Cluster cluster(2, 1);
  auto st = RunClusterRanks(cluster, [](syncd_client* c, int rank, int n) {
    void* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, 64));
    int64_t shape[1] = {16};
    syncd_tensor t{"on.a.shared.gpu", dev, SYNCD_FLOAT32, 1, shape, 0};
    syncd_handle h;
    // The client cannot know the daemon's GPUs: the daemon refuses the request, and the refusal
    // arrives as its completion (as every asynchronous error does).
    int rc = syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h);
    if (rc == SYNCD_OK) rc = syncd_wait(c, h, 20'000);
    CHILD_CHECK(rc == SYNCD_ERR_INVALID, "got %s: %s", syncd_status_name(rc), syncd_last_error());
    const std::string why = syncd_last_error();
    CHILD_CHECK(Contains(why, "tensor 'on.a.shared.gpu'") && Contains(why, "is driven by the daemons of node 0") &&
                    Contains(why, "node 1") && Contains(why, "CUDA_VISIBLE_DEVICES"),
                "%s", why.c_str());
    cudaFree(dev);
    std::vector<int32_t> host(1024);
    for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(rank * 1000 + int(i));
    int64_t hshape[1] = {int64_t(host.size())};
    syncd_tensor ht{"host.after", host.data(), SYNCD_INT32, 1, hshape, 0};
    CHILD_CHECK(syncd_allreduce_async(c, &ht, SYNCD_SUM, 1.0, 1.0, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 20'000) == SYNCD_OK, "%s", syncd_last_error());
    for (size_t i = 0; i < host.size(); ++i)
      CHILD_CHECK(host[i] == int32_t(1000 * (n * (n - 1) / 2) + n * int(i)), "element %zu: %d", i, host[i]);
    return 0;
  });
  ExpectAllSucceeded(st);
}

// NCCL's own rendezvous waits forever for a rank that never comes: the daemon's executor gives up
// after its timeout (syncd takes --join-timeout), naming its ranks, and is left unconnected.
TEST(Gpu, NcclCommunicatorCreationGivesUpNamingItsRanksWhenANodeNeverComes) {
  SKIP_WITHOUT_GPU();
  const pid_t pid = Spawn([] {  // CUDA in a child: the test process forks ranks in other tests
    std::string why;
    std::unique_ptr<GpuExecutor> gpu = GpuExecutor::Probe(true, &why);
    CHILD_CHECK(gpu != nullptr, "%s", why.c_str());
    StatusOr<std::string> id = gpu->MakeNcclId();
    CHILD_CHECK(id.ok(), "%s", id.status().message().c_str());
    const uint32_t mine = gpu->devices();
    const uint64_t t0 = abi::MonotonicNs();
    const Status st = gpu->Connect(*id, {mine, 1}, 0, 2);  // node 1 never creates its rank
    const double took_s = double(abi::MonotonicNs() - t0) / 1e9;
    const std::string& msg = st.message();
    CHILD_CHECK(st.code() == SYNCD_ERR_TIMEOUT, "%s: %s", syncd_status_name(st.code()), msg.c_str());
    const std::string ranks = "NCCL ranks 0.." + std::to_string(mine - 1) + " of " + std::to_string(mine + 1);
    CHILD_CHECK(Contains(msg, ranks) && Contains(msg, "did not finish within 2 s") && Contains(msg, "NCCL_SOCKET_IFNAME"),
                "%s", msg.c_str());
    CHILD_CHECK(took_s >= 1.9 && took_s < 10, "gave up after %.1f s", took_s);
    CHILD_CHECK(!gpu->connected(), "connected after a failed creation");
    return 0;
  });
  EXPECT_EQ(WaitChild(pid, 60'000), 0);
}

#else

TEST(Gpu, GpuSuiteNeedsACudaBuild) { GTEST_SKIP() << "built without CUDA (SYNCD_WITH_CUDA=OFF)"; }

#endif  // SYNCD_TEST_CUDA

}  // namespace
}  // namespace syncd::testing
