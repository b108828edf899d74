// syncd-bench: collective benchmarks run by every rank under syncrun.
//   syncrun -n 4 -- syncd-bench allreduce [--sizes 8,1K,64M] [--iters N] [--warmup N] [--dtype float32] [--json]
// Definitions follow nccl-tests: time_us is the mean of back-to-back iterations after warm-up,
// averaged across ranks; algbw = bytes / time; busbw = algbw * 2(n-1)/n. lat_p50_us follows OSU:
// the median of individually timed operations with a barrier outside the timed region.
#include <syncd/client.h>

#include "bench/bench_util.h"
#include "bench/daemon_status.h"
#include "bench/engine_cost_bench.h"
#include "bench/memcpy_bench.h"
#include "bench/partial_bench.h"
#include "bench/plan_bench.h"
#include "bench/scaling_bench.h"
#include "bench/training_bench.h"

#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using syncd::bench::Check;
using syncd::bench::Die;
using syncd::bench::Now;

struct Options {
  std::vector<std::string> sizes;
  int iters = 200;
  int warmup = 10;
  double seconds_per_size = 1.0;
  std::string dtype = "float32";
  bool json = false;
  bool staged = false;
  int submit_batch = 512;
};

uint64_t ParseSize(const std::string& s) {
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  std::string unit(end);
  uint64_t mult = unit.empty() || unit == "B" ? 1 : unit[0] == 'K' ? 1ull << 10 : unit[0] == 'M' ? 1ull << 20
                                                   : unit[0] == 'G' ? 1ull << 30 : 0;
  if (mult == 0 || v < 0) {
    fprintf(stderr, "syncd-bench: bad size '%s'\n", s.c_str());
    exit(2);
  }
  return uint64_t(v * double(mult));
}

syncd_dtype ParseDtype(const std::string& s) {
  const char* names[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  for (int i = 0; i < SYNCD_DTYPE_COUNT; ++i)
    if (s == names[i]) return syncd_dtype(i);
  fprintf(stderr, "syncd-bench: unknown dtype '%s'\n", s.c_str());
  exit(2);
}

class Bench {
 public:
  Bench(syncd_client* c, const Options& o) : c_(c), o_(o), dtype_(ParseDtype(o.dtype)) {}

  void SetOp(const std::string& op) { op_ = op; }

  void Barrier() {
    syncd_handle h;
    Check(syncd_barrier_async(c_, &h), "barrier");
    Check(syncd_wait(c_, h, -1), "barrier");
  }

  // One collective of `op_` (allreduce, allgather, alltoall, reducescatter, broadcast, reduce,
  // gather, scatter; the rooted ones to or from rank 0) on `count` elements of this rank's buffer; a result the
  // daemon placed is given back at once.
  void Collective(const char* name, void* data, int64_t count) {
    if (op_ == "allreduce") return Allreduce(name, data, count, dtype_, SYNCD_SUM);
    const int64_t rows = op_ == "scatter" && syncd_rank(c_) != 0 ? 0 : count;  // only the root sends
    syncd_tensor t{name, data, dtype_, 1, &rows, 0};
    syncd_handle h;
    syncd_result res{};
    if (op_ == "allgather") Check(syncd_allgather_async(c_, &t, &res, &h), "allgather");
    else if (op_ == "alltoall") Check(syncd_alltoall_async(c_, &t, nullptr, 0, &res, &h), "alltoall");
    else if (op_ == "reduce") Check(syncd_reduce_async(c_, &t, SYNCD_SUM, 0, 1.0, 1.0, &h), "reduce");
    else if (op_ == "broadcast") Check(syncd_broadcast_async(c_, &t, 0, &h), "broadcast");
    else if (op_ == "gather") Check(syncd_gather_async(c_, &t, 0, &res, &h), "gather");
    else if (op_ == "scatter") Check(syncd_scatter_async(c_, &t, 0, &res, &h), "scatter");
    else Check(syncd_reducescatter_async(c_, &t, SYNCD_SUM, 1.0, 1.0, &h), "reducescatter");
    Check(syncd_wait(c_, h, -1), op_ + " " + name);
    // The result is read where it lies (as a C user can); only validation keeps a copy.
    if (keep_result_ && res.bytes > 0) last_result_.assign(static_cast<const char*>(res.data), res.bytes);
    syncd_release_result(c_, &res);
  }

  void Allreduce(const char* name, void* data, int64_t count, syncd_dtype dt, syncd_reduce_op op) {
    syncd_tensor t{name, data, dt, 1, &count, 0};
    syncd_handle h;
    Check(syncd_allreduce_async(c_, &t, op, 1.0, 1.0, &h), std::string("allreduce ") + name);
    Check(syncd_wait(c_, h, -1), std::string("allreduce ") + name);
  }

  // Mean of `v` over all ranks, computed through syncd itself.
  double MeanAcrossRanks(double v) {
    Allreduce("bench.stat", &v, 1, SYNCD_FLOAT64, SYNCD_AVERAGE);
    return v;
  }

  // nccl-tests' conventions: `size` is the allreduce's, the broadcast's and the reduce's buffer, the allgather's and
  // the gather's output (each rank sends size/n), the alltoall's buffer per rank, the
  // reducescatter's input, the scatter's input at the root; busbw is algbw * 2(n-1)/n for
  // allreduce, algbw for broadcast and reduce, algbw * (n-1)/n for the others.
  void Run(const std::string& op) {
    op_ = op;
    const int n = syncd_size(c_), rank = syncd_rank(c_);
    const size_t esize = syncd_dtype_size(dtype_);
    std::vector<uint64_t> sizes;
    if (o_.sizes.empty())
      for (uint64_t b = 8; b <= (64ull << 20); b *= 2) sizes.push_back(b);
    else
      for (const auto& s : o_.sizes) sizes.push_back(ParseSize(s));
    if (rank == 0 && !o_.json) {
      printf("# syncd-bench %s: %d ranks, dtype %s, %s buffers\n", op_.c_str(), n, o_.dtype.c_str(),
             o_.staged ? "staged (user memory)" : "zero-copy (arena)");
      printf("# %12s %12s %9s %12s %10s %10s %12s %6s\n", "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
             "busbw(GB/s)", "p50(us)", "wrong");
    }
    // Warm the whole job up once (page faults, caches, the daemon's spin state) so the first
    // size is not measured cold.
    {
      float w[2] = {};
      const double until = Now() + 0.2;
      while (MeanAcrossRanks(Now() < until ? 1.0 : 0.0) > 0.0) Allreduce("bench.warmup", w, 2, SYNCD_FLOAT32, SYNCD_SUM);
    }
    for (uint64_t bytes : sizes) {
      // Elements in this rank's buffer: allgather sends size/n, alltoall and reducescatter need a
      // multiple of n.
      const bool gathers = op_ == "allgather" || op_ == "gather";
      const int64_t unit = op_ == "allreduce" || op_ == "reduce" || op_ == "broadcast" ? 1 : n;
      int64_t count = int64_t(std::max<uint64_t>(1, bytes / esize));
      count = std::max<int64_t>(unit, count / unit * unit);
      if (gathers) count /= n;
      bytes = uint64_t(gathers ? count * n : count) * esize;
      const uint64_t buf_bytes = uint64_t(count) * esize;
      void* buf = o_.staged ? malloc(buf_bytes) : syncd_alloc(c_, buf_bytes);
      if (buf == nullptr) Die("allocating " + std::to_string(buf_bytes) + " bytes");
      const std::string name = "bench." + op_ + "." + std::to_string(bytes);
      // Correctness: every rank contributes rank+1 (exact in every dtype for small rank counts).
      const long wrong = Validate(buf, count, name, n, rank);
      memset(buf, 0, buf_bytes);
      const double t_one = [&] {
        const double t0 = Now();
        Collective(name.c_str(), buf, count);
        return Now() - t0;
      }();
      // Every rank must run the same number of iterations: derive it from the mean across ranks.
      const double t_est = MeanAcrossRanks(t_one);
      const int iters = std::clamp(int(o_.seconds_per_size / 2 / std::max(t_est, 1e-7)), 5, o_.iters);
      for (int i = 0; i < o_.warmup; ++i) Collective(name.c_str(), buf, count);
      Barrier();
      const double t0 = Now();
      for (int i = 0; i < iters; ++i) Collective(name.c_str(), buf, count);
      const double mean_s = (Now() - t0) / iters;
      std::vector<double> lat;
      for (int i = 0; i < iters; ++i) {
        Barrier();
        const double s = Now();
        Collective(name.c_str(), buf, count);
        lat.push_back(Now() - s);
      }
      std::nth_element(lat.begin(), lat.begin() + lat.size() / 2, lat.end());
      const double time_us = MeanAcrossRanks(mean_s) * 1e6;
      const double p50_us = MeanAcrossRanks(lat[lat.size() / 2]) * 1e6;
      const double algbw = double(bytes) / (time_us * 1e-6) / 1e9;
      const double busbw = op_ == "reduce" || op_ == "broadcast" ? algbw : algbw * (op_ == "allreduce" ? 2.0 : 1.0) * (n - 1) / n;
      if (rank == 0) {
        if (o_.json)
          printf("{\"op\":\"%s\",\"bytes\":%lu,\"ranks\":%d,\"dtype\":\"%s\",\"time_us\":%.3f,\"lat_p50_us\":%.3f,"
                 "\"algbw_GBps\":%.7f,\"busbw_GBps\":%.7f,\"iters\":%d,\"wrong\":%ld,\"zero_copy\":%s}\n",
                 op_.c_str(), (unsigned long)bytes, n, o_.dtype.c_str(), time_us, p50_us, algbw, busbw, iters, wrong,
                 o_.staged ? "false" : "true");
        else
          printf("  %12lu %12ld %9s %12.2f %10.3f %10.3f %12.2f %6ld\n", (unsigned long)bytes, (long)count,
                 o_.dtype.c_str(), time_us, algbw, busbw, p50_us, wrong);
        fflush(stdout);
      }
      if (o_.staged) free(buf);
      else syncd_free(c_, buf);
    }
    if (op_ == "allreduce") SubmitCost();
  }

 private:
  long Validate(void* buf, int64_t count, const std::string& name, int n, int rank) {
    Fill(buf, count, rank + 1);
    if (op_ == "scatter")  // the root's share for rank k holds k + 1
      for (int64_t i = 0; i < count; ++i) Set(buf, i, double(i / (count / n) + 1));
    last_result_.clear();
    keep_result_ = true;
    Collective(name.c_str(), buf, count);
    keep_result_ = false;
    long wrong = 0;
    if (op_ == "broadcast") {
      for (int64_t i = 0; i < count; ++i) wrong += Get(buf, i) != 1;  // rank 0's
    } else if (op_ == "allreduce" || op_ == "reducescatter" || op_ == "reduce") {
      const int64_t mine = op_ == "reducescatter" ? count / n : count;
      // A reduce leaves every rank but the root as it was.
      const double want = op_ == "reduce" && rank != 0 ? rank + 1 : n * (n + 1) / 2.0;
      for (int64_t i = 0; i < mine; ++i) wrong += Get(buf, i) != want;
    } else if (op_ == "scatter") {
      const int64_t share = int64_t(last_result_.size() / syncd_dtype_size(dtype_));
      wrong += share != count / n;
      for (int64_t i = 0; i < share; ++i) wrong += Get(last_result_.data(), i) != rank + 1;
    } else if (op_ == "gather" && rank != 0) {
      wrong += !last_result_.empty();
    } else {
      // Rank s's part of the result holds s + 1.
      const int64_t part = int64_t(last_result_.size() / syncd_dtype_size(dtype_)) / n;
      for (int64_t i = 0; i < part * n; ++i) wrong += Get(last_result_.data(), i) != double(i / part + 1);
    }
    double total = double(wrong);
    Allreduce("bench.wrong", &total, 1, SYNCD_FLOAT64, SYNCD_SUM);
    return long(total);
  }

  void Fill(void* buf, int64_t count, int v) {
    for (int64_t i = 0; i < count; ++i) Set(buf, i, v);
  }
  void Set(void* b, int64_t i, double v) {
    switch (dtype_) {
      case SYNCD_INT8: static_cast<int8_t*>(b)[i] = int8_t(v); break;
      case SYNCD_UINT8: static_cast<uint8_t*>(b)[i] = uint8_t(v); break;
      case SYNCD_INT32: static_cast<int32_t*>(b)[i] = int32_t(v); break;
      case SYNCD_INT64: static_cast<int64_t*>(b)[i] = int64_t(v); break;
      case SYNCD_FLOAT16: static_cast<uint16_t*>(b)[i] = HalfOfSmallInt(int(v)); break;
      case SYNCD_BFLOAT16: { float f = float(v); uint32_t x; memcpy(&x, &f, 4); static_cast<uint16_t*>(b)[i] = uint16_t(x >> 16); break; }
      case SYNCD_FLOAT32: static_cast<float*>(b)[i] = float(v); break;
      case SYNCD_FLOAT64: static_cast<double*>(b)[i] = v; break;
      default: break;
    }
  }
  double Get(void* b, int64_t i) {
    switch (dtype_) {
      case SYNCD_INT8: return static_cast<int8_t*>(b)[i];
      case SYNCD_UINT8: return static_cast<uint8_t*>(b)[i];
      case SYNCD_INT32: return static_cast<int32_t*>(b)[i];
      case SYNCD_INT64: return double(static_cast<int64_t*>(b)[i]);
      case SYNCD_FLOAT16: return SmallIntOfHalf(static_cast<uint16_t*>(b)[i]);
      case SYNCD_BFLOAT16: { uint32_t x = uint32_t(static_cast<uint16_t*>(b)[i]) << 16; float f; memcpy(&f, &x, 4); return f; }
      case SYNCD_FLOAT32: return static_cast<float*>(b)[i];
      case SYNCD_FLOAT64: return static_cast<double*>(b)[i];
      default: return 0;
    }
  }
  // Small non-negative integers are exact in half precision.
  static uint16_t HalfOfSmallInt(int v) {
    if (v == 0) return 0;
    int e = 0;
    while ((1 << (e + 1)) <= v) ++e;
    return uint16_t(((e + 15) << 10) | (((v << 10) >> e) & 0x3ff));
  }
  static double SmallIntOfHalf(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    return e == 0 ? m / 16777216.0 : std::ldexp(1.0 + m / 1024.0, e - 15);
  }

  // Client cost of one submission: the caller's time inside syncd_allreduce_async.
  void SubmitCost() {
    const int batch = o_.submit_batch;
    std::vector<float*> bufs;
    std::vector<std::string> names;
    for (int i = 0; i < batch; ++i) {
      bufs.push_back(static_cast<float*>(syncd_alloc(c_, sizeof(float) * 2)));
      names.push_back("bench.submit." + std::to_string(i));
    }
    std::vector<syncd_handle> handles(batch);
    double total = 0;
    const int rounds = 20;
    for (int r = 0; r < rounds; ++r) {
      Barrier();
      const double t0 = Now();
      for (int i = 0; i < batch; ++i) {
        int64_t n = 2;
        syncd_tensor t{names[i].c_str(), bufs[i], SYNCD_FLOAT32, 1, &n, 0};
        Check(syncd_allreduce_async(c_, &t, SYNCD_SUM, 1.0, 1.0, &handles[i]), "submit");
      }
      total += Now() - t0;
      for (int i = 0; i < batch; ++i) Check(syncd_wait(c_, handles[i], -1), "submit wait");
    }
    const double ns = MeanAcrossRanks(total / (rounds * batch)) * 1e9;
    if (syncd_rank(c_) == 0) {
      if (o_.json) printf("{\"op\":\"submit\",\"ranks\":%d,\"ns_per_request\":%.1f}\n", syncd_size(c_), ns);
      else printf("# client submit cost: %.1f ns per request (zero-copy, %d in flight)\n", ns, batch);
    }
    for (float* b : bufs) syncd_free(c_, b);
  }

  syncd_client* c_;
  std::string op_ = "allreduce";
  std::string last_result_;  // the last placed result (allgather, alltoall), for validation
  bool keep_result_ = false;
  const Options& o_;
  syncd_dtype dtype_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncd-bench: collective benchmarks (run every rank under syncrun)"};
  Options o;
  CLI::App* ar = app.add_subcommand("allreduce", "Allreduce time, bandwidth and latency per size");
  ar->add_option("--sizes", o.sizes, "Sizes in bytes (8,1K,64M); default 8 B .. 64 MiB doubling")->delimiter(',');
  ar->add_option("--iters", o.iters, "Maximum timed iterations per size");
  ar->add_option("--warmup", o.warmup, "Warm-up iterations per size");
  ar->add_option("--seconds", o.seconds_per_size, "Time budget per size (iterations shrink for large sizes)");
  ar->add_option("--dtype", o.dtype, "int8 uint8 int32 int64 float16 bfloat16 float32 float64");
  ar->add_flag("--json", o.json, "One JSON object per size");
  ar->add_flag("--staged", o.staged, "Use ordinary memory (one staging copy each way) instead of the arena");
  // The same measurement for the other kinds (nccl-tests' size and busbw conventions).
  CLI::App* ag = app.add_subcommand("allgather", "Allgather time and bandwidth per size (size: the output)");
  CLI::App* a2a = app.add_subcommand("alltoall", "Alltoall time and bandwidth per size (size: each rank's buffer)");
  CLI::App* rs = app.add_subcommand("reducescatter", "Reducescatter time and bandwidth per size (size: the input)");
  CLI::App* bc = app.add_subcommand("broadcast", "Broadcast from rank 0: time and bandwidth per size (size: the buffer)");
  CLI::App* rd = app.add_subcommand("reduce", "Reduce to rank 0: time and bandwidth per size (size: the buffer)");
  CLI::App* ga = app.add_subcommand("gather", "Gather at rank 0: time and bandwidth per size (size: the output)");
  CLI::App* sc = app.add_subcommand("scatter", "Scatter from rank 0: time and bandwidth per size (size: the input)");
  for (CLI::App* sub : {ag, a2a, rs, bc, rd, ga, sc}) {
    sub->add_option("--sizes", o.sizes, "Sizes in bytes (8,1K,64M); default 8 B .. 64 MiB doubling")->delimiter(',');
    sub->add_option("--iters", o.iters, "Maximum timed iterations per size");
    sub->add_option("--warmup", o.warmup, "Warm-up iterations per size");
    sub->add_option("--seconds", o.seconds_per_size, "Time budget per size");
    sub->add_option("--dtype", o.dtype, "int8 uint8 int32 int64 float16 bfloat16 float32 float64");
    sub->add_flag("--json", o.json, "One JSON object per size");
    sub->add_flag("--staged", o.staged, "Use ordinary memory instead of the arena");
  }
  CLI::App* rn = app.add_subcommand("resnet", "Allreduce a ResNet's gradient set once per step (one tensor per parameter)");
  int depth = 101, steps = 10, rn_warmup = 2;
  std::string label;
  rn->add_option("--depth", depth, "50, 101 or 152")->check(CLI::IsMember({50, 101, 152}));
  rn->add_option("--steps", steps, "Timed steps");
  rn->add_option("--warmup", rn_warmup, "Warm-up steps");
  rn->add_option("--label", label, "Free text carried into the output (e.g. the daemon settings)");
  rn->add_flag("--json", o.json, "One JSON object");
  bool one_buffer = false;
  rn->add_flag("--one-buffer", one_buffer, "All the gradient bytes as one tensor per step (the limit for fusion)");
  CLI::App* pl = app.add_subcommand("plan", "Time TOPO's plan for a synthetic layered graph (no daemon needed)");
  syncd::bench::PlanBenchOptions po;
  uint32_t plan_nodes = 0, plan_edges = 0;
  pl->add_option("--nodes", plan_nodes, "Operations in the graph (with --edges; default: ResNet-50 and ResNet-152 sizes)");
  pl->add_option("--edges", plan_edges, "Dependency edges in the graph");
  pl->add_option("--repeats", po.repeats, "Timed runs per graph (the median is reported)");
  pl->add_flag("--json", po.json, "One JSON object per graph");
  CLI::App* im = app.add_subcommand("imbalance", "Training steps with CPU work, an input-pipeline thread and ResNet-50 gradients");
  syncd::bench::ImbalanceOptions io;
  im->add_option("--steps", io.steps, "Timed steps");
  im->add_option("--warmup", io.warmup, "Warm-up steps");
  im->add_option("--compute-ms", io.compute_ms, "Backward-pass CPU work per step");
  im->add_option("--jitter-ms", io.jitter_ms, "Random extra work per rank and step");
  im->add_option("--input-busy-pct", io.input_busy_pct, "Duty cycle of the input-pipeline thread (0: none)");
  im->add_flag("--ideal", io.ideal, "No communication: the ideal step time");
  im->add_option("--size-divisor", io.size_divisor, "Divide every gradient's element count by this (same tensors)");
  im->add_flag("--register-graph", io.register_graph, "Register the step's graph (used under --coord topo)");
  im->add_option("--label", io.label, "The mode, carried into the output");
  im->add_flag("--json", io.json, "One JSON object");
  CLI::App* pa = app.add_subcommand("partial", "Eager-SGD's benchmark: full, solo and majority allreduce under linear skew");
  syncd::bench::PartialBenchOptions pbo;
  std::string pa_size = "64K";
  pa->add_option("--rounds", pbo.rounds, "Timed rounds per mode");
  pa->add_option("--warmup", pbo.warmup, "Warm-up rounds per mode");
  pa->add_option("--skew-ms", pbo.skew_ms, "Rank r waits r times this before each call");
  pa->add_option("--size", pa_size, "Bytes per allreduce (float32)");
  pa->add_option("--modes", pbo.modes, "full, solo, majority")->delimiter(',');
  pa->add_flag("--json", pbo.json, "One JSON object");
  CLI::App* sg = app.add_subcommand("scaling", "Job start, then 8-byte allreduce steps with each daemon's coordination cost (one rank per daemon)");
  syncd::bench::ScalingOptions so;
  sg->add_option("--steps", so.steps, "Steps in the first window (the second has twice as many)");
  sg->add_option("--label", so.label, "Free text carried into the output (the coordination mode)");
  sg->add_option("--idle-s", so.idle_s, "The idle window after the steps (health reports per daemon per second)");
  sg->add_option("--partial-names", so.partial_names,
                 "Steps of this many partial allreduces (solo, quorum: every rank) instead of one allreduce");
  sg->add_flag("--json", so.json, "One JSON object");
  CLI::App* co = app.add_subcommand("cost", "Allreduces back to back with each daemon's engine CPU, wake-ups, turns, "
                                    "messages and client wakes per collective, and the ranks' CPU");
  syncd::bench::EngineCostOptions eo;
  co->add_option("--sizes", o.sizes, "Bytes per collective (8,64K)")->delimiter(',');
  co->add_option("--ops", eo.ops, "Kinds, each in turn (allreduce,allgather,alltoall,reducescatter,broadcast,reduce,"
                                  "gather,scatter)")->delimiter(',');
  co->add_option("--iters", eo.iters, "Timed allreduces per size");
  co->add_option("--warmup", eo.warmup, "Warm-up allreduces per size");
  co->add_option("--label", eo.label, "Free text carried into the output");
  co->add_flag("--json", eo.json, "One JSON object per size");
  CLI::App* mc = app.add_subcommand("memcpy", "The machine's memory-copy bandwidth per size (no daemon needed)");
  syncd::bench::MemcpyBenchOptions mo;
  mc->add_option("--sizes", o.sizes, "Bytes each thread copies per call (8,1K,64M)")->delimiter(',');
  mc->add_option("--threads", mo.threads, "Copying threads (default: one per core this process may use)");
  mc->add_option("--seconds", mo.seconds_per_size, "Time per size");
  mc->add_flag("--json", mo.json, "One JSON object per size");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("syncd-bench ") + syncd_version() + " (shared-memory ABI " +
                                        std::to_string(syncd_shm_abi_version()) + ")",
                       "Print the version and exit");
  CLI11_PARSE(app, argc, argv);
  pbo.bytes = ParseSize(pa_size);
  if (mc->parsed()) {
    for (const auto& sz : o.sizes) mo.sizes.push_back(ParseSize(sz));
    if (mo.sizes.empty())
      for (uint64_t b = 8; b <= (64ull << 20); b *= 2) mo.sizes.push_back(b);
    syncd::bench::RunMemcpyBench(mo);
    return 0;
  }
  if (pl->parsed()) {
    if (plan_nodes > 0) po.graphs = {{plan_nodes, plan_edges ? plan_edges : plan_nodes * 3 / 2}};
    return syncd::bench::RunPlanBench(po);
  }
  timespec init_start;
  clock_gettime(CLOCK_MONOTONIC, &init_start);
  syncd_client* c = nullptr;
  Check(syncd_init(nullptr, &c), "attach");
  if (sg->parsed()) {
    so.syncctl = syncd::bench::SyncctlBeside(argv[0]);
    syncd::bench::RunScaling(c, so, uint64_t(init_start.tv_sec) * 1'000'000'000ull + uint64_t(init_start.tv_nsec));
    syncd_shutdown(c);
    return 0;
  }
  if (co->parsed()) {
    for (const auto& sz : o.sizes) eo.sizes.push_back(ParseSize(sz));
    if (eo.sizes.empty()) eo.sizes = {8, 64 << 10};
    eo.syncctl = syncd::bench::SyncctlBeside(argv[0]);
    Bench b(c, o);
    syncd::bench::RunEngineCost(c, eo, [&b](const std::string& op, const char* name, void* data, int64_t count) {
      b.SetOp(op);
      b.Collective(name, data, count);
    });
    syncd_shutdown(c);
    return 0;
  }
  if (pa->parsed()) {
    syncd::bench::RunPartialBench(c, pbo);
    syncd_shutdown(c);
    return 0;
  }
  if (im->parsed()) {
    syncd::bench::RunImbalance(c, io, argv[0]);
    syncd_shutdown(c);
    return 0;
  }
  if (rn->parsed()) {
    syncd::bench::RunResNet(c, depth, steps, rn_warmup, o.json, label, one_buffer);
    syncd_shutdown(c);
    return 0;
  }
  Bench b(c, o);
  for (const auto* sub : {ar, ag, a2a, rs, bc, rd, ga, sc})
    if (sub->parsed()) b.Run(sub->get_name());
  syncd_shutdown(c);
  return 0;
}
