// syncd-gpu-bench: GPU collectives through syncd, against the same work done directly in one
// process. Run by every rank under syncrun (all ranks of the node share its GPUs):
//   syncrun -n 2 -- syncd-gpu-bench allreduce [--sizes 4,64K,1M,64M] [--iters N] [--json]
//   syncrun -n 2 --syncd-arg=--gpu-ipc-cache=off -- syncd-gpu-bench latency --json   (see bench/gpu.sh)
//
// allreduce: float32 SUM of each size, in place, on every rank's own device buffer.
//   serial:    submit, wait, repeat (what a framework does for one tensor);
//   pipelined: `--depth` allreduces in flight (different names), as gradients of several layers.
//   direct:    rank 0 alone, afterwards, in its own process: the same device work the daemon
//              does for one tensor of these ranks (reduce kernel of the ranks' buffers in place
//              into the first, ncclAllReduce over this node's GPUs, copy into the others), timed
//              the same way (serial: the host waits for each; pipelined: only at the end).
//   Bandwidth as nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n over the n ranks.
// latency: serial float32 SUM of small sizes (--queued: work still queued on the stream, so the
//   daemon's stream waits for the client's: its flag, or its event); bench/gpu.sh runs it with the daemon's IPC
//   pointer cache on and off and reports the ratio.
#include <cuda_runtime.h>
#include <nccl.h>
#include <syncd/client.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "daemon/exec/gpu_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;
double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

[[noreturn]] void Die(const std::string& what, const std::string& why) {
  fprintf(stderr, "syncd-gpu-bench: %s: %s\n", what.c_str(), why.c_str());
  exit(1);
}
void Check(int rc, const std::string& what) {
  if (rc != SYNCD_OK) Die(what, syncd_last_error());
}
void CheckCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) Die(what, cudaGetErrorString(e));
}
void CheckNccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) Die(what, ncclGetErrorString(r));
}

uint64_t ParseSize(const std::string& s) {
  char* end = nullptr;
  const double v = strtod(s.c_str(), &end);
  const std::string unit(end);
  const uint64_t mult = unit.empty() ? 1 : unit[0] == 'K' ? 1ull << 10 : unit[0] == 'M' ? 1ull << 20 : unit[0] == 'G' ? 1ull << 30 : 0;
  if (mult == 0 || v <= 0) Die("bad size", s);
  return uint64_t(v * double(mult));
}

std::string SizeText(uint64_t b) {
  char s[32];
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) snprintf(s, sizeof(s), "%lluM", (unsigned long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0) snprintf(s, sizeof(s), "%lluK", (unsigned long long)(b >> 10));
  else snprintf(s, sizeof(s), "%llu", (unsigned long long)b);
  return s;
}

void Barrier(syncd_client* c) {
  syncd_handle h;
  Check(syncd_barrier_async(c, &h), "barrier");
  Check(syncd_wait(c, h, 60'000), "barrier");
}

// Seconds per allreduce through syncd, the mean over `iters` after warm-up. *submit_s: of which
// the submitting call itself (describing the tensor: IPC handle, event record).
bool g_queued = false;  // --queued: work is still queued on the stream at each submission

double ThroughSyncd(syncd_client* c, float* buf, uint64_t count, int iters, int depth, const std::string& tag,
                    double* submit_s = nullptr) {
  double in_submit = 0;
  int64_t shape[1] = {int64_t(count)};
  std::vector<std::string> names(size_t(std::max(depth, 1)));
  for (size_t k = 0; k < names.size(); ++k) names[k] = tag + "." + std::to_string(k);
  auto run = [&](int n) {
    std::vector<syncd_handle> hs;
    for (int i = 0; i < n; i += depth) {
      hs.clear();
      for (int k = 0; k < depth && i + k < n; ++k) {
        syncd_tensor t{names[size_t(k)].c_str(), buf, SYNCD_FLOAT32, 1, shape, 0};
        syncd_handle h;
        if (g_queued) CheckCuda(cudaMemsetAsync(buf, 0, sizeof(float), nullptr), "cudaMemsetAsync");
        const double s0 = Now();
        Check(syncd_allreduce_gpu_async(c, &t, SYNCD_SUM, 1.0, 1.0, nullptr, &h), "allreduce " + names[size_t(k)]);
        in_submit += Now() - s0;
        hs.push_back(h);
      }
      for (syncd_handle h : hs) Check(syncd_wait(c, h, 60'000), "wait");
    }
  };
  run(std::max(depth, 5));
  Barrier(c);
  in_submit = 0;
  const double t0 = Now();
  run(iters);
  const double t = (Now() - t0) / iters;
  if (submit_s) *submit_s = in_submit / iters;
  Barrier(c);
  return t;
}

// The same device work, done directly by one process for `ranks` buffers on its GPU.
double Direct(uint64_t count, int ranks, int iters, bool serial) {
  const uint64_t bytes = count * sizeof(float);
  std::vector<float*> bufs(static_cast<size_t>(ranks));
  for (float*& b : bufs) CheckCuda(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaStream_t s;
  CheckCuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  int dev = 0;
  cudaGetDevice(&dev);
  ncclComm_t comm;
  CheckNccl(ncclCommInitAll(&comm, 1, &dev), "ncclCommInitAll");
  auto once = [&] {
    syncd::gpu::ReduceLaunch l;
    for (int r = 0; r < ranks && r < syncd::gpu::kMaxReduceInputs; ++r) l.inputs[l.n++] = bufs[size_t(r)];
    l.output = bufs[0];  // in place, as the daemon does for a group of one tensor
    l.count = count;
    l.dtype = SYNCD_FLOAT32;
    l.op = SYNCD_SUM;
    if (syncd::gpu::LaunchReduce(l, s) != 0) Die("reduce kernel", "launch failed");
    CheckNccl(ncclAllReduce(bufs[0], bufs[0], count, ncclFloat32, ncclSum, comm, s), "ncclAllReduce");
    for (size_t r = 1; r < bufs.size(); ++r)
      CheckCuda(cudaMemcpyAsync(bufs[r], bufs[0], bytes, cudaMemcpyDeviceToDevice, s), "copy");
    if (serial) CheckCuda(cudaStreamSynchronize(s), "sync");
  };
  for (int i = 0; i < 5; ++i) once();
  cudaStreamSynchronize(s);
  const double t0 = Now();
  for (int i = 0; i < iters; ++i) once();
  CheckCuda(cudaStreamSynchronize(s), "sync");
  const double t = (Now() - t0) / iters;
  ncclCommDestroy(comm);
  cudaStreamDestroy(s);
  for (float* b : bufs) cudaFree(b);
  return t;
}

struct Row {
  uint64_t bytes;
  double serial, pipelined, direct_serial = 0, direct_pipelined = 0, submit = 0;
};

// Rank 0's table (and JSON lines): syncd's times and bandwidths beside the direct runs'.
void PrintRows(const std::vector<Row>& rows, const std::string& mode, const char* device, int size, bool json) {
  const double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  if (mode == "latency") {
    printf("%10s %12s %12s\n", "size", "time_us", "submit_us");
    for (const Row& r : rows) printf("%10s %12.2f %12.2f\n", SizeText(r.bytes).c_str(), r.serial * 1e6, r.submit * 1e6);
  } else {
    printf("%10s %12s %10s %10s %12s %10s %10s %9s %9s\n", "size", "serial_us", "busbw", "direct", "pipelined_us", "busbw",
           "direct", "ser/dir", "pipe/dir");
    for (const Row& r : rows)
      printf("%10s %12.1f %10.1f %10.1f %12.1f %10.1f %10.1f %9.3f %9.3f\n", SizeText(r.bytes).c_str(), r.serial * 1e6,
             r.bytes / r.serial / 1e9 * bus, r.bytes / r.direct_serial / 1e9 * bus, r.pipelined * 1e6,
             r.bytes / r.pipelined / 1e9 * bus, r.bytes / r.direct_pipelined / 1e9 * bus, r.direct_serial / r.serial,
             r.direct_pipelined / r.pipelined);
    printf("# busbw in GB/s; ser/dir and pipe/dir: syncd's bandwidth as a share of the direct run's\n");
  }
  if (json)
    for (const Row& r : rows)
      printf("{\"bench\":\"gpu_%s\",\"device\":\"%s\",\"ranks\":%d,\"bytes\":%llu,\"serial_us\":%.3f,\"pipelined_us\":%.3f,"
             "\"direct_serial_us\":%.3f,\"direct_pipelined_us\":%.3f,\"serial_busbw_gbs\":%.3f,\"serial_ratio\":%.4f,"
             "\"pipelined_ratio\":%.4f,\"submit_us\":%.3f}\n",
             mode.c_str(), device, size, (unsigned long long)r.bytes, r.serial * 1e6, r.pipelined * 1e6,
             r.direct_serial * 1e6, r.direct_pipelined * 1e6, r.bytes / r.serial / 1e9 * bus,
             r.direct_serial > 0 ? r.direct_serial / r.serial : 0.0,
             r.direct_pipelined > 0 ? r.direct_pipelined / r.pipelined : 0.0, r.submit * 1e6);
}

void PrintDaemonStatus() {
  // Where the daemon's time went (map, issue, device), from its own status.
  if (const char* dir = getenv("SYNCD_RUN_DIR")) {
    char exe[4096] = {};
    if (readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0) {
      std::string bin(exe);
      bin = bin.substr(0, bin.rfind('/'));
      const std::string cmd = bin + "/syncctl --run-dir " + dir + " status | sed 's/^/# /' >&2";
      if (system(cmd.c_str()) != 0) fprintf(stderr, "# syncctl status failed\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncd-gpu-bench: GPU collectives through syncd against the same work done directly"};
  std::string mode = "allreduce";
  std::string sizes_text;
  int iters = 0, depth = 4;
  bool json = false;
  app.add_option("mode", mode, "allreduce or latency")->check(CLI::IsMember({"allreduce", "latency"}));
  app.add_option("--sizes", sizes_text, "comma-separated sizes in bytes (K, M suffixes)");
  app.add_option("--iters", iters, "timed iterations per size (default: by size)");
  app.add_option("--depth", depth, "allreduces in flight in the pipelined runs")->check(CLI::Range(1, 64));
  app.add_flag("--json", json, "also print one JSON line per row");
  app.add_flag("--queued", g_queued,
               "queue a small memset on the stream before each submission, so the daemon waits on an IPC event");
  CLI11_PARSE(app, argc, argv);
  if (sizes_text.empty()) sizes_text = mode == "latency" ? "4,1K,64K" : "4,64K,1M,16M,64M,256M";
  std::vector<uint64_t> sizes;
  for (size_t at = 0; at <= sizes_text.size();) {
    const size_t comma = std::min(sizes_text.find(',', at), sizes_text.size());
    sizes.push_back(ParseSize(sizes_text.substr(at, comma - at)));
    at = comma + 1;
  }

  syncd_client* c = nullptr;
  Check(syncd_init(nullptr, &c), "syncd_init");
  const int rank = syncd_rank(c), size = syncd_size(c), local_rank = syncd_local_rank(c);
  int devices = 0;
  CheckCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  CheckCuda(cudaSetDevice(local_rank % devices), "cudaSetDevice");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, local_rank % devices);
  if (rank == 0)
    printf("# %s, %d ranks of %d on this node (%d GPU%s), float32 sum\n", prop.name, size, syncd_local_size(c), devices,
           devices == 1 ? "" : "s");

  std::vector<Row> rows;
  for (uint64_t bytes : sizes) {
    const uint64_t count = std::max<uint64_t>(1, bytes / sizeof(float));
    const int n = iters > 0 ? iters : bytes >= (64u << 20) ? 40 : bytes >= (1u << 20) ? 200 : 1000;
    float* buf = nullptr;
    CheckCuda(cudaMalloc(&buf, count * sizeof(float)), "cudaMalloc");
    CheckCuda(cudaMemset(buf, 0, count * sizeof(float)), "cudaMemset");
    CheckCuda(cudaDeviceSynchronize(), "sync");
    Row r{count * sizeof(float), 0, 0};
    r.serial = ThroughSyncd(c, buf, count, n, 1, "s" + SizeText(bytes), &r.submit);
    if (mode != "latency") r.pipelined = ThroughSyncd(c, buf, count, n, depth, "p" + SizeText(bytes));
    cudaFree(buf);
    rows.push_back(r);
  }
  // The direct runs, by rank 0 alone while the others wait: nothing else uses the GPU.
  if (rank == 0 && mode == "allreduce")
    for (Row& r : rows) {
      const uint64_t count = r.bytes / sizeof(float);
      const int n = iters > 0 ? iters : r.bytes >= (64u << 20) ? 40 : r.bytes >= (1u << 20) ? 200 : 1000;
      r.direct_serial = Direct(count, syncd_local_size(c), n, true);
      r.direct_pipelined = Direct(count, syncd_local_size(c), n, false);
    }
  Barrier(c);
  if (rank == 0) {
    PrintRows(rows, mode, prop.name, size, json);
    PrintDaemonStatus();
  }
  syncd_shutdown(c);
  return 0;
}
