#include "bench/training_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench/bench_util.h"

namespace syncd::bench {
namespace {

// Element counts of torchvision's ResNet-`depth` parameters (one tensor each), in
// registration order: conv1, bn1, the bottleneck stages, fc. ResNet-101: 314 tensors, 44.5 M.
std::vector<int64_t> ResNetParameterSizes(int depth) {
  const std::vector<int> blocks = depth == 50 ? std::vector<int>{3, 4, 6, 3}
                                : depth == 152 ? std::vector<int>{3, 8, 36, 3}
                                               : std::vector<int>{3, 4, 23, 3};
  std::vector<int64_t> sizes = {64 * 3 * 7 * 7, 64, 64};
  int64_t in = 64;
  const int64_t planes_of[] = {64, 128, 256, 512};
  for (size_t stage = 0; stage < 4; ++stage) {
    const int64_t planes = planes_of[stage];
    for (int b = 0; b < blocks[stage]; ++b) {
      for (int64_t v : {planes * in, planes, planes, planes * planes * 9, planes, planes, planes * 4 * planes,
                        planes * 4, planes * 4})
        sizes.push_back(v);
      if (b == 0)
        for (int64_t v : {planes * 4 * in, planes * 4, planes * 4}) sizes.push_back(v);
      in = planes * 4;
    }
  }
  sizes.push_back(1000 * 2048);
  sizes.push_back(1000);
  return sizes;
}

// Arithmetic the optimiser cannot remove, for about `ms` of CPU time.
void Work(double ms) {
  static volatile double sink = 0;
  const double until = Now() + ms / 1e3;
  double x = 1.0;
  while (Now() < until)
    for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
  sink = sink + x;
}

// One number from syncctl's JSON (0 when absent).
double JsonField(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  size_t p = at + key.size() + 3;
  while (p < json.size() && (json[p] == ' ' || json[p] == '"')) ++p;
  return strtod(json.c_str() + p, nullptr);
}

std::string DaemonStatusJson(const char* argv0) {
  const char* dir = getenv("SYNCD_RUN_DIR");
  std::string self(argv0);
  const size_t slash = self.rfind('/');
  const std::string syncctl = (slash == std::string::npos ? std::string() : self.substr(0, slash + 1)) + "syncctl";
  if (dir == nullptr) return "";
  FILE* f = popen((syncctl + " --run-dir " + dir + " status --json 2>/dev/null").c_str(), "r");
  if (f == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// Registers the training graph of the imbalance step: a forward chain over the parameters, the
// loss, the backward chain in reverse (each backward op also needs its forward op), then per
// parameter an allreduce of its gradient and the optimizer's update; the updates are fetched.
void RegisterStepGraph(syncd_client* c, const std::vector<int64_t>& sizes, const std::vector<std::string>& names) {
  const uint32_t n = uint32_t(sizes.size());
  const uint32_t loss = n, backward = n + 1, allreduce = 2 * n + 1, update = 3 * n + 1;
  std::vector<syncd_graph_op> ops(4 * n + 1, syncd_graph_op{nullptr, nullptr, SYNCD_FLOAT32, 0, SYNCD_AVERAGE, SYNCD_MEMORY_HOST,
                                                                      SYNCD_COMPRESSION_DEFAULT, 0});
  std::vector<uint32_t> edges, fetches;
  auto edge = [&](uint32_t a, uint32_t b) { edges.insert(edges.end(), {a, b}); };
  for (uint32_t i = 0; i < n; ++i) {
    ops[allreduce + i].tensor = names[i].c_str();
    ops[allreduce + i].count = uint64_t(sizes[i]);
    if (i > 0) edge(i - 1, i);
    edge(i, backward + i);
    if (i + 1 < n) edge(backward + i + 1, backward + i);
    edge(backward + i, allreduce + i);
    edge(allreduce + i, update + i);
    fetches.push_back(update + i);
  }
  edge(n - 1, loss);
  edge(loss, backward + n - 1);
  const syncd_graph g{ops.data(), ops.size(), edges.data(), edges.size() / 2, fetches.data(), fetches.size()};
  Check(syncd_register_graph(c, &g, -1, nullptr), "registering the step's graph");
}

// Node 0's line: the median step, and its engine's time per timed step from syncctl's status
// before and after them.
void ReportImbalance(syncd_client* c, const ImbalanceOptions& o, size_t n, std::vector<double> times,
                     const std::string& before, const std::string& after) {
  std::sort(times.begin(), times.end());
  const double step_ms = times[times.size() / 2] * 1e3;
  // Node 0's engine over the timed steps, per step.
  auto delta = [&](const char* key) { return (JsonField(after, key) - JsonField(before, key)) / o.steps; };
  const double sleep_ms = delta("idle_ms_total"), coord_ms = delta("coordination_ms_total");
  const double exec_ms = delta("execution_ms_total") + delta("topo_execution_ms_total"), blocked_ms = delta("blocked_ms_total");
  const double cpu_ms = delta("engine_cpu_s") * 1e3;
  // Each timed step also has the bench's own barrier and step-time allreduce (negotiated).
  const double messages = delta("coordination_messages");
  if (o.json)
    printf("{\"bench\":\"imbalance\",\"mode\":\"%s\",\"ranks\":%d,\"nodes\":%d,\"tensors\":%zu,\"step_ms\":%.3f,"
           "\"engine_sleep_ms\":%.3f,\"engine_coord_ms\":%.3f,\"engine_exec_ms\":%.3f,\"engine_blocked_ms\":%.3f,"
           "\"engine_cpu_ms\":%.3f,\"coord_messages_per_step\":%.1f}\n",
           o.label.c_str(), syncd_size(c), syncd_cross_size(c), n, step_ms, sleep_ms, coord_ms, exec_ms, blocked_ms,
           cpu_ms, messages);
  else
    printf("imbalance [%s]: %d ranks on %d nodes, median step %.2f ms; engine per step: sleeping %.2f ms, "
           "coordinating %.2f ms, executing %.2f ms, blocked %.2f ms, cpu %.2f ms\n",
           o.label.c_str(), syncd_size(c), syncd_cross_size(c), step_ms, sleep_ms, coord_ms, exec_ms, blocked_ms,
           cpu_ms);
}

}  // namespace

// One data-parallel step's gradient synchronisation: every parameter's gradient submitted in
// backward order (last layer first), then all waited for.
void RunResNet(syncd_client* c, int depth, int steps, int warmup, bool json, const std::string& label, bool one_buffer) {
  std::vector<int64_t> sizes = ResNetParameterSizes(depth);
  // The limit for fusion: the same bytes as one allreduce per step.
  if (one_buffer) sizes = {std::accumulate(sizes.begin(), sizes.end(), int64_t{0})};
  const size_t n = sizes.size();
  std::vector<float*> grads(n);
  std::vector<std::string> names(n);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    grads[i] = static_cast<float*>(syncd_alloc(c, size_t(sizes[i]) * 4));
    if (grads[i] == nullptr) Die("allocating gradients (raise --arena-size)");
    std::fill(grads[i], grads[i] + sizes[i], 1.0f);
    names[i] = "resnet" + std::to_string(depth) + (one_buffer ? ".all" : ".param" + std::to_string(i)) + ".grad";
    bytes += uint64_t(sizes[i]) * 4;
  }
  std::vector<syncd_handle> hs(n);
  auto step = [&] {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = n - 1 - k;
      syncd_tensor t{names[i].c_str(), grads[i], SYNCD_FLOAT32, 1, &sizes[i], 0};
      Check(syncd_allreduce_async(c, &t, SYNCD_AVERAGE, 1.0, 1.0, &hs[i]), "submit " + names[i]);
    }
    for (size_t i = 0; i < n; ++i) Check(syncd_wait(c, hs[i], -1), "wait " + names[i]);
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    syncd_handle h;
    Check(syncd_barrier_async(c, &h), "barrier");
    Check(syncd_wait(c, h, -1), "barrier");
    const double t0 = Now();
    step();
    times.push_back(Now() - t0);
  }
  for (size_t i = 0; i < n; ++i)
    if (grads[i][0] != 1.0f) Die("wrong average in " + names[i]);
  std::sort(times.begin(), times.end());
  double v = times[times.size() / 2];
  syncd_tensor t{"bench.stat", &v, SYNCD_FLOAT64, 0, nullptr, 0};
  syncd_handle h;
  Check(syncd_allreduce_async(c, &t, SYNCD_AVERAGE, 1.0, 1.0, &h), "stat");
  Check(syncd_wait(c, h, -1), "stat");
  if (syncd_rank(c) == 0) {
    if (json)
      printf("{\"bench\":\"resnet_gradients\",\"model\":\"resnet%d\",\"tensors\":%zu,\"bytes\":%lu,\"ranks\":%d,"
             "\"nodes\":%d,\"label\":\"%s\",\"step_ms\":%.3f}\n",
             depth, n, (unsigned long)bytes, syncd_size(c), syncd_cross_size(c), label.c_str(), v * 1e3);
    else
      printf("resnet%d gradients: %zu tensors, %.1f MiB, %d ranks on %d nodes [%s]: median step %.2f ms\n", depth, n,
             double(bytes) / (1 << 20), syncd_size(c), syncd_cross_size(c), label.c_str(), v * 1e3);
  }
  for (float* g : grads) syncd_free(c, g);
}

// ---- imbalance: the paper's scenario, scaled to one machine ----

void RunImbalance(syncd_client* c, const ImbalanceOptions& o, const char* argv0) {
  std::vector<int64_t> sizes = ResNetParameterSizes(50);
  for (int64_t& s : sizes) s = std::max<int64_t>(1, s / std::max(1, o.size_divisor));
  const size_t n = sizes.size();
  std::vector<float*> grads(n);
  std::vector<std::string> names(n);
  for (size_t i = 0; i < n; ++i) {
    grads[i] = static_cast<float*>(syncd_alloc(c, size_t(sizes[i]) * 4));
    if (grads[i] == nullptr) Die("allocating gradients (raise --arena-size)");
    std::fill(grads[i], grads[i] + sizes[i], 1.0f);
    names[i] = "resnet50.param" + std::to_string(i) + ".grad";
  }
  // The input pipeline: a thread that competes for the cores the whole time.
  std::atomic<bool> stop{false};
  std::thread input;
  if (o.input_busy_pct > 0)
    input = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        Work(o.input_busy_pct / 100.0);
        std::this_thread::sleep_for(std::chrono::microseconds(int(1000 * (100 - o.input_busy_pct) / 100)));
      }
    });
  std::mt19937 rng(uint32_t(syncd_rank(c)) * 7919u + 1);
  std::vector<syncd_handle> hs(n);
  auto step = [&] {
    // Backward pass: gradients become ready last layer first, work in between.
    const double per = (o.compute_ms + std::uniform_real_distribution<double>(0, o.jitter_ms)(rng)) / double(n);
    for (size_t k = 0; k < n; ++k) {
      Work(per);
      if (o.ideal) continue;
      const size_t i = n - 1 - k;
      syncd_tensor t{names[i].c_str(), grads[i], SYNCD_FLOAT32, 1, &sizes[i], 0};
      Check(syncd_allreduce_async(c, &t, SYNCD_AVERAGE, 1.0, 1.0, &hs[i]), "submit " + names[i]);
    }
    if (!o.ideal)
      for (size_t i = 0; i < n; ++i) Check(syncd_wait(c, hs[i], -1), "wait " + names[i]);
  };
  auto barrier = [&] {
    syncd_handle h;
    Check(syncd_barrier_async(c, &h), "barrier");
    Check(syncd_wait(c, h, -1), "barrier");
  };
  if (o.register_graph) RegisterStepGraph(c, sizes, names);
  for (int i = 0; i < o.warmup; ++i) step();
  barrier();
  const std::string before = syncd_rank(c) == 0 ? DaemonStatusJson(argv0) : "";
  std::vector<double> times;
  for (int i = 0; i < o.steps; ++i) {
    barrier();
    const double t0 = Now();
    step();
    double t = Now() - t0;
    // A step lasts as long as its slowest rank.
    syncd_tensor st{"bench.step", &t, SYNCD_FLOAT64, 0, nullptr, 0};
    syncd_handle h;
    Check(syncd_allreduce_async(c, &st, SYNCD_MAX, 1.0, 1.0, &h), "step time");
    Check(syncd_wait(c, h, -1), "step time");
    times.push_back(t);
  }
  const std::string after = syncd_rank(c) == 0 ? DaemonStatusJson(argv0) : "";
  stop = true;
  if (input.joinable()) input.join();
  if (syncd_rank(c) == 0) ReportImbalance(c, o, n, std::move(times), before, after);
  for (float* g : grads) syncd_free(c, g);
}

}  // namespace syncd::bench
