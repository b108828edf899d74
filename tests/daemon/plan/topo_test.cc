#include "daemon/plan/topo.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <random>

#include "proto/status_names.h"

namespace syncd {
namespace {

uint32_t AddOp(Graph& g, const std::string& name) {
  GraphOp op;
  op.name = name;
  g.ops.push_back(std::move(op));
  return uint32_t(g.ops.size() - 1);
}

uint32_t AddCollective(Graph& g, const std::string& tensor, uint64_t count = 100,
                       syncd_dtype dtype = SYNCD_FLOAT32, bool gpu = false) {
  g.ops.push_back(GraphOp{"allreduce." + tensor, true, tensor, dtype, count, SYNCD_SUM, gpu});
  return uint32_t(g.ops.size() - 1);
}

// A data-parallel step of an L-layer chain: forward, loss, backward (each layer's input gradient
// from the next one's), weight gradients, their allreduces, the optimizer's updates, and one
// train op fetching every update (inserted first layer first, as frameworks build them).
Graph Backprop(int layers) {
  Graph g;
  std::vector<uint32_t> act = {AddOp(g, "input")};
  for (int i = 1; i <= layers; ++i) {
    act.push_back(AddOp(g, "fwd" + std::to_string(i)));
    g.edges.emplace_back(act[size_t(i) - 1], act[size_t(i)]);
  }
  const uint32_t loss = AddOp(g, "loss");
  g.edges.emplace_back(act.back(), loss);
  std::vector<uint32_t> grad_in(size_t(layers) + 2);  // gradient w.r.t. layer i's output
  grad_in[size_t(layers)] = loss;
  std::vector<uint32_t> updates(size_t(layers) + 1);
  for (int i = layers; i >= 1; --i) {
    const uint32_t dw = AddOp(g, "dW" + std::to_string(i));
    g.edges.emplace_back(grad_in[size_t(i)], dw);
    g.edges.emplace_back(act[size_t(i) - 1], dw);
    const uint32_t ar = AddCollective(g, "grad" + std::to_string(i));
    g.edges.emplace_back(dw, ar);
    updates[size_t(i)] = AddOp(g, "apply" + std::to_string(i));
    g.edges.emplace_back(ar, updates[size_t(i)]);
    if (i > 1) {
      grad_in[size_t(i) - 1] = AddOp(g, "dX" + std::to_string(i));
      g.edges.emplace_back(grad_in[size_t(i)], grad_in[size_t(i) - 1]);
    }
  }
  const uint32_t train = AddOp(g, "train");
  for (int i = 1; i <= layers; ++i) g.edges.emplace_back(updates[size_t(i)], train);
  g.fetches = {train};
  return g;
}

std::vector<std::string> Names(const TopoPlan& p) {
  std::vector<std::string> out;
  for (const PlannedTensor& t : p.tensors) out.push_back(t.name);
  return out;
}

TEST(PlanTopo, GradientsComeInBackwardOrderAndConcurrentOnesFuse) {
  auto plan = PlanTopo(Backprop(4), 1 << 20);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(Names(*plan), (std::vector<std::string>{"grad4", "grad3", "grad2", "grad1"}));
  EXPECT_EQ(plan->groups(), 1u) << "the four gradients are logically concurrent";
  auto alone = PlanTopo(Backprop(4), 0);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->groups(), 4u) << "threshold 0: every tensor alone";
  EXPECT_NE(alone->hash, plan->hash);
}

// a, b, d float32 of 40 B; d needs b's reduced value (through another op) unless `independent`.
Graph ThreeTensors(bool independent, syncd_dtype b_dtype = SYNCD_FLOAT32, bool b_gpu = false) {
  Graph g;
  const uint32_t a = AddCollective(g, "a", 10);
  const uint32_t b = AddCollective(g, "b", 10, b_dtype, b_gpu);
  const uint32_t mid = AddOp(g, "uses_b");
  const uint32_t d = AddCollective(g, "d", 10);
  g.edges = {{mid, d}};
  if (!independent) g.edges.emplace_back(b, mid);
  const uint32_t sink = AddOp(g, "sink");
  for (uint32_t v : {a, b, d}) g.edges.emplace_back(v, sink);
  g.fetches = {sink};
  return g;
}

TEST(PlanTopo, ADependencyCutsTheGroup) {
  auto dependent = PlanTopo(ThreeTensors(false), 1000);
  ASSERT_TRUE(dependent.ok()) << dependent.status().message();
  EXPECT_EQ(Names(*dependent), (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_EQ(dependent->group_begin, (std::vector<uint32_t>{0, 2})) << "d needs b: never in b's group";
  auto independent = PlanTopo(ThreeTensors(true), 1000);
  ASSERT_TRUE(independent.ok());
  EXPECT_EQ(independent->group_begin, (std::vector<uint32_t>{0})) << "nothing links them: one group";
}

TEST(PlanTopo, ThresholdAndDtypeCutGroups) {
  auto tight = PlanTopo(ThreeTensors(true), 80);
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->group_begin, (std::vector<uint32_t>{0, 2})) << "80 B hold a and b, not d";
  auto mixed = PlanTopo(ThreeTensors(true, SYNCD_FLOAT64), 1000);
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->group_begin, (std::vector<uint32_t>{0, 1, 2})) << "b is float64: alone, and d follows it";
}

// A tensor's memory is part of the plan: a GPU tensor never fuses with host tensors, and a plan
// whose tensor is in GPU memory differs (hash and description) from the one with it in host memory.
TEST(PlanTopo, MemoryCutsGroupsAndIsInTheHashAndTheDescription) {
  auto host = PlanTopo(ThreeTensors(true), 1000);
  auto gpu = PlanTopo(ThreeTensors(true, SYNCD_FLOAT32, /*b_gpu=*/true), 1000);
  ASSERT_TRUE(host.ok() && gpu.ok());
  EXPECT_EQ(host->group_begin, (std::vector<uint32_t>{0}));
  EXPECT_EQ(gpu->group_begin, (std::vector<uint32_t>{0, 1, 2})) << "b is on the GPU: alone, and d follows it";
  EXPECT_TRUE(gpu->tensors[1].gpu);
  EXPECT_FALSE(gpu->tensors[0].gpu || gpu->tensors[2].gpu);
  EXPECT_NE(host->hash, gpu->hash);
  // Only the memory differs: the same groups, another hash.
  auto gpu_alone = PlanTopo(ThreeTensors(true, SYNCD_FLOAT32, true), 0);
  auto host_alone = PlanTopo(ThreeTensors(true), 0);
  ASSERT_EQ(gpu_alone->group_begin, host_alone->group_begin);
  EXPECT_NE(gpu_alone->hash, host_alone->hash);

  EXPECT_EQ(PlanShape(*gpu), (std::vector<int64_t>{int64_t(gpu->hash), 3, 3, 1}));
  char hex[32];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)gpu->hash);
  EXPECT_EQ(DescribePlan(PlanShape(*gpu)), std::string("plan ") + hex + " (3 tensors, 3 groups, 1 in GPU memory)");
  EXPECT_EQ(DescribePlan(PlanShape(*host)).find("GPU"), std::string::npos) << DescribePlan(PlanShape(*host));
  EXPECT_EQ(DescribePlan({int64_t(gpu->hash)}), std::string("plan ") + hex);
}

// A group fuses one compression (the fusion key's): b compressed alone cuts it; the plan carries
// each tensor's, and the hash tells a compressed plan from an uncompressed one.
TEST(PlanTopo, CompressionCutsGroupsAndIsInTheHash) {
  Graph g = ThreeTensors(true);
  auto plain = PlanTopo(g, 1000);
  g.ops[1].compression = SYNCD_COMPRESSION_FP16;  // b
  auto fp16 = PlanTopo(g, 1000);
  ASSERT_TRUE(plain.ok() && fp16.ok());
  EXPECT_EQ(plain->group_begin, (std::vector<uint32_t>{0}));
  EXPECT_EQ(Names(*fp16), (std::vector<std::string>{"a", "b", "d"}));
  EXPECT_EQ(fp16->group_begin, (std::vector<uint32_t>{0, 1, 2})) << "b is compressed: alone, and d follows it";
  EXPECT_EQ(fp16->tensors[1].compression, SYNCD_COMPRESSION_FP16);
  EXPECT_EQ(fp16->tensors[0].compression, SYNCD_COMPRESSION_NONE);
  for (PlannedTensor& t : fp16->tensors) t.compression = SYNCD_COMPRESSION_NONE;
  fp16->group_begin = plain->group_begin;
  EXPECT_EQ(PlanHash(*fp16), plain->hash) << "the same plan but for b's compression";
  g.ops[0].compression = g.ops[1].compression = g.ops[3].compression = SYNCD_COMPRESSION_BF16;  // a, b, d
  auto bf16 = PlanTopo(g, 1000);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->group_begin, plain->group_begin) << "all alike: one group again";
  EXPECT_NE(bf16->hash, plain->hash);
}

// Top-k at two ratios cannot share a group (its blocks are cut at one ratio); the ratio (or
// PowerSGD's rank) is in the hash, so nodes whose graphs ask for another one hold different plans.
TEST(PlanTopo, TheRatioCutsGroupsAndIsInTheHash) {
  Graph g = ThreeTensors(true);
  for (GraphOp& op : g.ops) {
    op.compression = op.collective ? SYNCD_COMPRESSION_TOPK : SYNCD_COMPRESSION_NONE;
    op.compression_ppm = op.collective ? 10'000 : 0;
  }
  auto alike = PlanTopo(g, 1000);
  g.ops[1].compression_ppm = 20'000;  // b
  auto other = PlanTopo(g, 1000);
  ASSERT_TRUE(alike.ok() && other.ok());
  EXPECT_EQ(alike->group_begin, (std::vector<uint32_t>{0}));
  EXPECT_EQ(other->group_begin, (std::vector<uint32_t>{0, 1, 2})) << "b at another ratio: alone";
  EXPECT_EQ(other->tensors[1].compression_ppm, 20'000u);
  EXPECT_EQ(other->tensors[0].compression_ppm, 10'000u);
  other->group_begin = alike->group_begin;
  EXPECT_NE(PlanHash(*other), alike->hash) << "the same plan but for b's ratio";
  other->tensors[1].compression_ppm = 10'000;
  EXPECT_EQ(PlanHash(*other), alike->hash);
}

TEST(PlanTopo, OpsNoFetchNeedsAreLeftOut) {
  Graph g;
  const uint32_t used = AddCollective(g, "used");
  AddCollective(g, "unused");
  const uint32_t sink = AddOp(g, "sink");
  g.edges = {{used, sink}};
  g.fetches = {sink};
  auto order = ComputeLogicalOrder(g);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->id[1], -1);
  auto plan = PlanTopo(g, 1000);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Names(*plan), (std::vector<std::string>{"used"}));
}

TEST(PlanTopo, BadGraphsAreRefusedNamingTheOperation) {
  Graph cyc;
  const uint32_t x = AddOp(cyc, "x"), y = AddOp(cyc, "y"), z = AddOp(cyc, "z");
  cyc.edges = {{x, y}, {y, z}, {z, x}};
  cyc.fetches = {z};
  auto st = PlanTopo(cyc, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("cycle"), std::string::npos) << st.status().message();
  EXPECT_NE(st.status().message().find("'x'"), std::string::npos) << st.status().message();

  Graph range;
  AddOp(range, "only");
  range.edges = {{0, 5}};
  range.fetches = {0};
  EXPECT_NE(PlanTopo(range, 0).status().message().find("edge 0 -> 5"), std::string::npos);
  range.edges.clear();
  range.fetches = {3};
  EXPECT_NE(PlanTopo(range, 0).status().message().find("fetch 3"), std::string::npos);

  Graph dup;
  const uint32_t p = AddCollective(dup, "w"), q = AddCollective(dup, "w"), s = AddOp(dup, "s");
  dup.edges = {{p, s}, {q, s}};
  dup.fetches = {s};
  auto d = PlanTopo(dup, 0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tensor 'w' is reduced by both"), std::string::npos) << d.status().message();

  Graph self;
  AddOp(self, "loop");
  self.edges = {{0, 0}};
  self.fetches = {0};
  EXPECT_NE(PlanTopo(self, 0).status().message().find("depends on itself"), std::string::npos);

  // No collective: a plan that would run nothing (it crashed the daemons once registered).
  Graph none;
  AddOp(none, "forward");
  none.fetches = {0};
  EXPECT_NE(PlanTopo(none, 0).status().message().find("no operation is a collective"), std::string::npos);
  EXPECT_NE(PlanTopo(Graph{}, 0).status().message().find("no operation is a collective"), std::string::npos);
}

// ---- Properties on random DAGs ----

// A random DAG: a hidden order, edges only forward in it (indices shuffled so that insertion
// order tells nothing), some collectives of two dtypes, a few fetches.
Graph RandomDag(size_t n, size_t edges, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = uint32_t(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  Graph g;
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      g.ops.push_back(GraphOp{"op" + std::to_string(i), true, "t" + std::to_string(i),
                              rng() % 4 == 0 ? SYNCD_FLOAT64 : SYNCD_FLOAT32, 1 + rng() % 5000, SYNCD_SUM,
                              rng() % 8 == 0});
    } else {
      GraphOp op;
      op.name = "op" + std::to_string(i);
      g.ops.push_back(std::move(op));
    }
  }
  for (size_t k = 0; k < edges; ++k) {
    // Mostly short edges (layers), some long ones (skip connections).
    const size_t a = rng() % (n - 1);
    const size_t span = rng() % 8 == 0 ? 1 + rng() % (n - a - 1) : 1 + rng() % std::min<size_t>(20, n - a - 1);
    g.edges.emplace_back(perm[a], perm[a + span]);
  }
  for (size_t i = n - std::min<size_t>(n, 5); i < n; ++i) g.fetches.push_back(perm[i]);
  g.fetches.push_back(perm[n / 2]);
  return g;
}

void CheckProperties(const Graph& g, uint64_t threshold) {
  const size_t n = g.ops.size();
  auto order = ComputeLogicalOrder(g);
  ASSERT_TRUE(order.ok()) << order.status().message();
  auto plan = PlanTopo(g, threshold);
  if (!plan.ok() && plan.status().message().find("no operation is a collective") != std::string::npos) {
    for (size_t v = 0; v < n; ++v)  // refused only where no fetch needs a collective
      ASSERT_FALSE(g.ops[v].collective && order->id[v] >= 0) << "operation " << v << " is a needed collective";
    return;
  }
  ASSERT_TRUE(plan.ok()) << plan.status().message();

  // Exactly the ancestors of the fetches are ordered.
  std::vector<std::vector<uint32_t>> in(n), out(n);
  for (const auto& [u, v] : g.edges) {
    in[v].push_back(u);
    out[u].push_back(v);
  }
  std::vector<bool> needed(n, false);
  std::deque<uint32_t> q(g.fetches.begin(), g.fetches.end());
  for (uint32_t f : g.fetches) needed[f] = true;
  while (!q.empty()) {
    const uint32_t v = q.front();
    q.pop_front();
    for (uint32_t u : in[v])
      if (!needed[u]) needed[u] = true, q.push_back(u);
  }
  for (size_t v = 0; v < n; ++v) ASSERT_EQ(order->id[v] >= 0, bool(needed[v])) << "op " << v;

  // The order is a linear extension of the dependencies.
  for (const auto& [u, v] : g.edges)
    if (needed[v]) {
      ASSERT_LT(order->id[u], order->id[v]) << "edge " << u << " -> " << v;
    }

  // Every needed collective is planned once, in id order.
  std::unordered_map<std::string, uint32_t> op_of;
  for (size_t v = 0; v < n; ++v)
    if (g.ops[v].collective && needed[v]) op_of[g.ops[v].tensor] = uint32_t(v);
  ASSERT_EQ(plan->tensors.size(), op_of.size());
  for (size_t i = 1; i < plan->tensors.size(); ++i)
    ASSERT_LT(order->id[op_of[plan->tensors[i - 1].name]], order->id[op_of[plan->tensors[i].name]]);

  // Groups: same dtype, op and memory, within the threshold unless alone, and no member reachable from
  // another (a forward search from all members, bounded by the last member's id).
  std::vector<uint32_t> mark(n, UINT32_MAX);
  for (size_t gi = 0; gi < plan->groups(); ++gi) {
    const size_t b = plan->group_begin[gi], e = plan->group_end(gi);
    ASSERT_LT(b, e);
    uint64_t bytes = 0;
    for (size_t i = b; i < e; ++i) {
      ASSERT_EQ(plan->tensors[i].dtype, plan->tensors[b].dtype);
      ASSERT_EQ(plan->tensors[i].op, plan->tensors[b].op);
      ASSERT_EQ(plan->tensors[i].gpu, plan->tensors[b].gpu);
      bytes += plan->tensors[i].count * abi::DtypeSize(plan->tensors[i].dtype);
    }
    if (e - b > 1) {
      ASSERT_LE(bytes, threshold) << "group " << gi;
    }
    const int64_t last = order->id[op_of[plan->tensors[e - 1].name]];
    std::deque<uint32_t> frontier;
    for (size_t i = b; i < e; ++i)
      for (uint32_t v : out[op_of[plan->tensors[i].name]]) frontier.push_back(v);
    while (!frontier.empty()) {
      const uint32_t v = frontier.front();
      frontier.pop_front();
      if (mark[v] == gi || order->id[v] < 0 || order->id[v] > last) continue;
      mark[v] = uint32_t(gi);
      for (size_t i = b; i < e; ++i)
        ASSERT_NE(v, op_of[plan->tensors[i].name]) << "group " << gi << " holds '" << plan->tensors[i].name
                                                    << "', which depends on another member";
      for (uint32_t w : out[v]) frontier.push_back(w);
    }
  }
  EXPECT_EQ(plan->hash, PlanHash(*plan));
}

TEST(PlanTopoProperties, RandomDagsUpTo20000Nodes) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    for (size_t n : {size_t(2), size_t(10), size_t(300), size_t(3000)}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(n) + " nodes");
      CheckProperties(RandomDag(n, n * 3 / 2, seed), 64 * 1024);
    }
  }
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", 20000 nodes");
    CheckProperties(RandomDag(20000, 30000, seed), 1 << 20);
    CheckProperties(RandomDag(20000, 30000, seed), 0);
  }
}

// Every daemon computes the plan in its own process: the same graph must give the same plan.
TEST(PlanTopoProperties, SameGraphSamePlanInAnotherProcess) {
  const Graph g = RandomDag(20000, 30000, 42);
  auto here = PlanTopo(g, 1 << 20);
  ASSERT_TRUE(here.ok());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    auto there = PlanTopo(RandomDag(20000, 30000, 42), 1 << 20);
    const uint64_t h = there.ok() ? there->hash : 0;
    _exit(write(fds[1], &h, sizeof(h)) == sizeof(h) ? 0 : 1);
  }
  close(fds[1]);
  uint64_t theirs = 0;
  ASSERT_EQ(read(fds[0], &theirs, sizeof(theirs)), ssize_t(sizeof(theirs)));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(theirs, here->hash);
  EXPECT_GT(here->groups(), 1u);
  // And a different graph gives a different hash.
  auto other = PlanTopo(RandomDag(20000, 30000, 43), 1 << 20);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->hash, here->hash);
}

}  // namespace
}  // namespace syncd
