// The timeline's costs in isolation: what the engine thread pays per recorded event and per
// completed tensor (its name looked up, its submissions and its life recorded: Engine::Trace),
// and how fast node 0's writer thread formats and writes them. Prints a table and a JSON line.
//   syncd-timeline-bench [--tensors N] [--ranks R] [--file PATH]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "daemon/obs/timeline_writer.h"

namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncd-timeline-bench: the timeline's recording and writing costs"};
  uint64_t tensors = 200'000;
  uint32_t ranks = 2;
  std::string file = "/tmp/syncd-timeline-bench-" + std::to_string(getpid()) + ".json";
  app.add_option("--tensors", tensors, "Tensors to record");
  app.add_option("--ranks", ranks, "Local ranks per tensor (a submission each)");
  app.add_option("--file", file, "Where the writer writes (removed afterwards)");
  CLI11_PARSE(app, argc, argv);

  // ResNet-50's 161 gradient names, as a training step submits them.
  std::vector<std::string> names;
  for (int i = 0; i < 161; ++i) names.push_back("allreduce.resnet50.layer" + std::to_string(i) + ".weight");

  // 1. The engine's side alone: chunks handed to a sink that takes them (as the writer's queue does).
  syncd::Timeline t;
  uint64_t chunks = 0;
  t.Start(0, [&chunks](std::shared_ptr<syncd::TraceChunk>) { return ++chunks, true; });
  syncd::TraceEvent e;
  e.kind = syncd::TraceKind::kSubmit;
  const uint64_t kEvents = 10'000'000;
  double t0 = Now();
  for (uint64_t i = 0; i < kEvents; ++i) {
    e.t0 = e.t1 = i;
    t.Record(e);
  }
  const double record_ns = (Now() - t0) / double(kEvents) * 1e9;
  t0 = Now();
  for (uint64_t i = 0; i < tensors; ++i) {  // what Engine::Trace does per completed tensor
    syncd::TraceEvent tensor;
    tensor.kind = syncd::TraceKind::kTensor;
    tensor.name = t.Name(names[i % names.size()]);
    for (uint32_t r = 0; r < ranks; ++r) {
      syncd::TraceEvent submit;
      submit.kind = syncd::TraceKind::kSubmit;
      submit.name = tensor.name;
      submit.rank = int32_t(r);
      submit.t0 = submit.t1 = i * 1000 + r;
      t.Record(submit);
    }
    tensor.t0 = i * 1000 + 1;
    tensor.t2 = tensor.t0 + 100;
    tensor.t3 = tensor.t0 + 200;
    tensor.t4 = tensor.t0 + 300;
    tensor.t1 = tensor.t0 + 400;
    t.Record(tensor);
  }
  const double tensor_ns = (Now() - t0) / double(tensors) * 1e9;
  t.Stop();

  // 2. The writer: the same tensors through a real TimelineWriter into a file.
  auto w = syncd::TimelineWriter::Open(file, uint64_t(1) << 40, 0);
  if (!w.ok()) {
    fprintf(stderr, "%s\n", w.status().message().c_str());
    return 1;
  }
  syncd::Timeline t2;
  t2.Start(0, [&w](std::shared_ptr<syncd::TraceChunk> c) {
    while (!(*w)->Push(c)) std::this_thread::sleep_for(std::chrono::microseconds(50));  // the bench waits; the engine would drop
    return true;
  });
  t0 = Now();
  for (uint64_t i = 0; i < tensors; ++i) {
    syncd::TraceEvent tensor;
    tensor.kind = syncd::TraceKind::kTensor;
    tensor.name = t2.Name(names[i % names.size()]);
    tensor.t0 = 1'000'000 + i * 1000;
    tensor.t2 = tensor.t0 + 100;
    tensor.t3 = tensor.t0 + 200;
    tensor.t4 = tensor.t0 + 300;
    tensor.t1 = tensor.t0 + 400;
    for (uint32_t r = 0; r < ranks; ++r) {
      syncd::TraceEvent submit;
      submit.kind = syncd::TraceKind::kSubmit;
      submit.name = tensor.name;
      submit.rank = int32_t(r);
      submit.t0 = submit.t1 = tensor.t0;
      t2.Record(submit);
    }
    t2.Record(tensor);
  }
  t2.Stop();
  (*w)->Finish();
  while (!(*w)->done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double write_s = Now() - t0;
  const syncd::TimelineWriter::Stats st = (*w)->stats();
  unlink(file.c_str());
  const double write_us = write_s / double(tensors) * 1e6;
  printf("# timeline costs: %lu tensors, %u local ranks each\n", (unsigned long)tensors, ranks);
  printf("# %-44s %12s\n", "what", "cost");
  printf("  %-44s %9.1f ns\n", "engine: one event recorded", record_ns);
  printf("  %-44s %9.1f ns\n", "engine: one completed tensor (name + events)", tensor_ns);
  printf("  %-44s %9.2f us\n", "writer: one tensor formatted and written", write_us);
  printf("  %-44s %9.0f B\n", "file: bytes per tensor", double(st.bytes) / double(tensors));
  printf("{\"bench\":\"timeline_costs\",\"tensors\":%lu,\"ranks\":%u,\"record_event_ns\":%.1f,\"record_tensor_ns\":%.1f,"
         "\"write_tensor_us\":%.3f,\"file_bytes_per_tensor\":%.0f,\"chunks\":%lu}\n",
         (unsigned long)tensors, ranks, record_ns, tensor_ns, write_us, double(st.bytes) / double(tensors),
         (unsigned long)chunks);
  return 0;
}
