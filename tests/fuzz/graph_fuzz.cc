// The TOPO graph wire format (graph_codec.h) and the planner behind it: a client's graph is
// decoded and planned by the daemon.
#include "daemon/plan/graph_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncd::StatusOr<syncd::Graph> g = syncd::DecodeGraph(reinterpret_cast<const char*>(data), size);
  if (!g.ok()) return 0;
  syncd::StatusOr<syncd::TopoPlan> plan = syncd::PlanTopo(*g, 1 << 20);
  if (plan.ok()) (void)plan->groups();
  return 0;
}
