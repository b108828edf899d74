// What a stand-in adds to a reduction: nothing. A rank that joined (syncd_join), a rank lost for good
// (--on-loss continue, restore), a node whose daemon was lost and a slot that starts vacant
// (--vacant-ranks, syncrun --max-np) take part in the others' reductions, and every result must be
// the reduction over the ranks that contributed, as a user checks it with Min and Max: every dtype
// and op (bool's logical or/and), fused groups mixing ops, prescale and postscale applied to real
// contributions only, reduce to a root, fp16 and top-k on the inter-node hop; on 1 x 4, 2 x 2 and
// 3 x 1 in every coordination mode (under --coord topo the tensors are a registered plan's).
// Average divides by the tensors summed: a joined rank's count (its stand-in adds Sum's identity,
// as Horovod's zeros), a lost or vacant rank's not.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/integration/harness.h"
#include "tests/integration/values.h"

namespace syncd::testing {
namespace {

enum class StandIn { kJoin, kLostContinue, kLostRestore, kLostNode, kVacant };

struct IdentityCase {
  const char* coord;
  int nodes, local;
  StandIn kind;
  int ranks() const { return nodes * local; }
  bool topo() const { return std::string(coord) == "topo"; }
  // The rank that stands in (or the node whose daemon is lost, StandIn::kLostNode): on 1 x 4 one
  // beside ranks of its node, on 2 x 2 one beside a rank of its node on another node than the
  // coordinator's, on 3 x 1 a whole node.
  int victim() const { return kind == StandIn::kLostNode ? nodes - 1 : local == 4 ? 1 : ranks() - 1; }
  bool contributes(int rank) const {
    return kind == StandIn::kLostNode ? rank / local != victim() : rank != victim();
  }
  const char* policy() const {
    if (kind == StandIn::kLostRestore) return "restore";
    if (kind == StandIn::kJoin || kind == StandIn::kLostContinue) return "continue";
    return std::string(coord) == "negotiate" || std::string(coord) == "gs" ? "continue" : "restore";
  }
};

std::string IdentityCaseName(const ::testing::TestParamInfo<IdentityCase>& info) {
  const IdentityCase& k = info.param;
  static const char* const kKinds[] = {"join", "lost_rank_continue", "lost_rank_restore", "lost_node", "vacant"};
  return std::string(kKinds[int(k.kind)]) + "_" + k.coord + "_" + std::to_string(k.nodes) + "x" +
         std::to_string(k.local) + (k.kind == StandIn::kLostNode || k.kind == StandIn::kVacant ? "_" + std::string(k.policy()) : "");
}

bool Signed(syncd_dtype d) { return d != SYNCD_UINT8 && d != SYNCD_BOOL; }
bool Floating(syncd_dtype d) {
  return d == SYNCD_FLOAT16 || d == SYNCD_BFLOAT16 || d == SYNCD_FLOAT32 || d == SYNCD_FLOAT64;
}

// Rank r's element i: never 0 (a zero stand-in shows in Min, Max and Product), signs mixed where the
// dtype has them, small enough that every sum and product is exact in every dtype. bool: bit r of i.
double Value(syncd_dtype d, syncd_reduce_op op, int r, int64_t i) {
  if (d == SYNCD_BOOL) return double((i % 16 >> r) & 1);
  if (op == SYNCD_PRODUCT) {
    const double mag = 1 + (r + i) % 2;
    return Signed(d) && (r + i) % 3 == 0 ? -mag : mag;
  }
  const double mag = double(r + 1 + i % 3);
  return Signed(d) && i % 2 == 1 ? -mag : mag;
}

// One tensor of the burst: what it is, how it is reduced and where its result lands.
struct Member {
  std::string name;
  syncd_dtype dtype;
  syncd_reduce_op op;
  int64_t count;
  double prescale = 1, postscale = 1;
  syncd_compression compression = SYNCD_COMPRESSION_DEFAULT;  // the daemon's: none
  double ratio = 0;
  int root = -1;  // >= 0: a reduce to that rank
};

const syncd_dtype kDtypes[] = {SYNCD_INT8,    SYNCD_UINT8,    SYNCD_INT16,   SYNCD_INT32,   SYNCD_INT64,
                               SYNCD_FLOAT16, SYNCD_BFLOAT16, SYNCD_FLOAT32, SYNCD_FLOAT64, SYNCD_BOOL};
const syncd_reduce_op kOps[] = {SYNCD_SUM, SYNCD_AVERAGE, SYNCD_MIN, SYNCD_MAX, SYNCD_PRODUCT};

// Every dtype x op, two tensors each (one fused group per dtype and op: the plan's under TOPO), then
// what runs outside a plan: scale factors, reduces to rank 0 and, across nodes, compressed hops.
std::vector<Member> Burst(bool many_nodes) {
  std::vector<Member> burst;
  for (syncd_dtype d : kDtypes)
    for (syncd_reduce_op op : kOps) {
      if (d == SYNCD_BOOL && op == SYNCD_AVERAGE) continue;  // refused: a bool cannot average
      for (int64_t count : {16, 40})
        burst.push_back({"id." + std::to_string(d) + "." + std::to_string(op) + "." + std::to_string(count), d, op, count});
    }
  burst.push_back({"scaled.product", SYNCD_FLOAT32, SYNCD_PRODUCT, 24, 2.0, 0.5});
  burst.push_back({"scaled.sum", SYNCD_FLOAT64, SYNCD_SUM, 24, 0.5, 3.0});
  burst.push_back({"scaled.max", SYNCD_INT32, SYNCD_MAX, 24, 2.0, 1.0});
  burst.push_back({"scaled.average", SYNCD_FLOAT32, SYNCD_AVERAGE, 24, 2.0, 0.25});
  for (syncd_reduce_op op : kOps) {
    Member m{"reduced." + std::to_string(op), SYNCD_INT32, op, 24};
    m.root = 0;
    burst.push_back(m);
  }
  if (many_nodes) {
    for (syncd_reduce_op op : kOps) {
      Member m{"fp16." + std::to_string(op), SYNCD_FLOAT32, op, 24};
      m.compression = SYNCD_COMPRESSION_FP16;
      burst.push_back(m);
    }
    for (syncd_reduce_op op : {SYNCD_SUM, SYNCD_AVERAGE}) {
      Member m{"topk." + std::to_string(op), SYNCD_FLOAT32, op, 64};
      m.compression = SYNCD_COMPRESSION_TOPK;
      m.ratio = 1.0;  // every element: the sum is exact
      burst.push_back(m);
    }
  }
  return burst;
}

// The plan of the uncompressed, unscaled allreduces (under --coord topo): one collective per tensor,
// each a fetch; logically concurrent, so they fuse by dtype and op.
struct BurstGraph {
  std::vector<std::string> names;
  std::vector<syncd_graph_op> ops;
  std::vector<uint32_t> fetches;
  syncd_graph graph{};
  explicit BurstGraph(const std::vector<Member>& burst) {
    for (const Member& m : burst)
      if (m.name.rfind("id.", 0) == 0) names.push_back(m.name);
    size_t at = 0;
    for (const Member& m : burst) {
      if (m.name.rfind("id.", 0) != 0) continue;
      ops.push_back(syncd_graph_op{names[at].c_str(), names[at].c_str(), m.dtype, uint64_t(m.count), m.op,
                                   SYNCD_MEMORY_HOST, SYNCD_COMPRESSION_DEFAULT, 0});
      fetches.push_back(uint32_t(at++));
    }
    graph = syncd_graph{ops.data(), ops.size(), nullptr, 0, fetches.data(), fetches.size()};
  }
};

// What a user expects of member `m`'s element i: the reduction over the ranks that contributed,
// each prescaled; then Average's divisor and the postscale.
double Expected(const Member& m, const IdentityCase& k, int64_t i, int divisor) {
  const bool integral = !Floating(m.dtype);
  auto scale = [&](double v, double f) { return integral ? std::trunc(v * f) : v * f; };
  bool any = false;
  double acc = 0;
  for (int r = 0; r < k.ranks(); ++r) {
    if (!k.contributes(r)) continue;
    const double v = scale(Value(m.dtype, m.op, r, i), m.prescale);
    if (!any) {
      acc = v;
      any = true;
      continue;
    }
    const bool logical = m.dtype == SYNCD_BOOL;
    switch (m.op) {
      case SYNCD_SUM: case SYNCD_AVERAGE: acc = logical ? std::max(acc, v) : acc + v; break;
      case SYNCD_MIN: acc = std::min(acc, v); break;
      case SYNCD_MAX: acc = std::max(acc, v); break;
      default: acc = logical ? std::min(acc, v) : acc * v; break;
    }
  }
  if (m.op == SYNCD_AVERAGE) acc = integral ? std::trunc(acc / divisor) : acc / divisor;
  return scale(acc, m.postscale);
}

double Tolerance(syncd_dtype d) {
  switch (d) {
    case SYNCD_FLOAT16: return 2e-3;
    case SYNCD_BFLOAT16: return 1.6e-2;
    case SYNCD_FLOAT32: return 2e-6;
    case SYNCD_FLOAT64: return 1e-12;
    default: return 0;
  }
}

int Submit(syncd_client* c, const Member& m, void* data, syncd_handle* h) {
  const syncd_tensor t{m.name.c_str(), data, m.dtype, 1, &m.count, 0};
  if (m.root >= 0) return syncd_reduce_async(c, &t, m.op, m.root, m.prescale, m.postscale, h);
  if (m.compression != SYNCD_COMPRESSION_DEFAULT)
    return syncd_allreduce_compressed_ratio_async(c, &t, m.op, m.prescale, m.postscale, m.compression, m.ratio, h);
  return syncd_allreduce_async(c, &t, m.op, m.prescale, m.postscale, h);
}

// Sums 1 from every rank until exactly the contributing ranks do (the loss has been seen
// everywhere): a collective the loss fails is the cue to acknowledge the new membership, as
// hvd.elastic.run does.
int WaitForTheContributors(syncd_client* c, int rank, int want) {
  const double give_up = NowS() + 60;
  for (int32_t got = -1; got != want;) {
    CHILD_CHECK(NowS() < give_up, "rank %d: the sum of the ranks left is still %d, not %d, after 60 s", rank, got, want);
    int32_t one = 1;
    int64_t count = 1;
    syncd_tensor t{"alive", &one, SYNCD_INT32, 1, &count, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
    const int rc = syncd_wait(c, h, 30'000);
    if (rc == SYNCD_ERR_RANK_LOST) {
      usleep(1000);
      uint32_t membership = 0;
      CHILD_CHECK(syncd_acknowledge_membership(c, &membership) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
      continue;
    }
    CHILD_CHECK(rc == SYNCD_OK, "rank %d: alive: %s: %s", rank, syncd_status_name(rc), syncd_last_error());
    got = one;
  }
  return 0;
}

// Two steps of the burst; every result checked element by element. After a loss the first step may
// fail for it (restore, or a node's loss: once per stream of agreed work); the second may not.
int ReduceTheBurst(syncd_client* c, const IdentityCase& k, int rank) {
  const std::vector<Member> burst = Burst(k.nodes > 1);
  int divisor = 0;
  for (int r = 0; r < k.ranks(); ++r) divisor += k.contributes(r) || k.kind == StandIn::kJoin;
  const bool may_fail_first = k.kind != StandIn::kJoin && k.kind != StandIn::kVacant;
  std::vector<std::vector<char>> data(burst.size());
  for (int step = 0; step < 2; ++step) {
    std::vector<syncd_handle> hs(burst.size());
    for (size_t j = 0; j < burst.size(); ++j) {
      const Member& m = burst[j];
      data[j].assign(size_t(m.count) * syncd_dtype_size(m.dtype), 0);
      for (int64_t i = 0; i < m.count; ++i) SetValue(data[j].data(), m.dtype, size_t(i), Value(m.dtype, m.op, rank, i));
      CHILD_CHECK(Submit(c, m, data[j].data(), &hs[j]) == SYNCD_OK, "rank %d: %s: %s", rank, m.name.c_str(),
                  syncd_last_error());
    }
    bool failed = false;
    for (size_t j = 0; j < burst.size(); ++j) {
      const Member& m = burst[j];
      const int rc = syncd_wait(c, hs[j], 30'000);
      if (rc == SYNCD_ERR_RANK_LOST && step == 0 && may_fail_first) {
        failed = true;
        continue;
      }
      CHILD_CHECK(rc == SYNCD_OK, "rank %d step %d: %s: %s: %s", rank, step, m.name.c_str(), syncd_status_name(rc),
                  syncd_last_error());
      if (m.root >= 0 && m.root != rank) continue;  // a reduce leaves the others' tensors alone
      for (int64_t i = 0; i < m.count; ++i) {
        const double want = Expected(m, k, i, divisor), got = GetValue(data[j].data(), m.dtype, size_t(i));
        CHILD_CHECK(std::fabs(got - want) <= Tolerance(m.dtype) * std::max(1.0, std::fabs(want)),
                    "rank %d step %d: %s (dtype %d, op %d) [%lld] = %.9g, the reduction over the ranks that "
                    "contributed is %.9g", rank, step, m.name.c_str(), int(m.dtype), int(m.op),
                    static_cast<long long>(i), got, want);
      }
    }
    if (failed) {
      uint32_t membership = 0;
      CHILD_CHECK(syncd_acknowledge_membership(c, &membership) == SYNCD_OK, "rank %d: %s", rank, syncd_last_error());
    }
  }
  return 0;
}

struct Shared {
  std::atomic<int> ready{0};  // ranks attached (and registered under TOPO)
};

int RunRank(const std::string& dir, const IdentityCase& k, int rank, Shared* shared) {
  syncd_client* c = AttachAs(dir, rank, k.ranks(), rank % k.local, k.local);
  CHILD_CHECK(c != nullptr, "rank %d: attach: %s", rank, syncd_last_error());
  const std::vector<Member> burst = Burst(k.nodes > 1);
  const BurstGraph graph(burst);
  if (k.topo())
    CHILD_CHECK(syncd_register_graph(c, &graph.graph, 30'000, nullptr) == SYNCD_OK, "rank %d: register: %s", rank,
                syncd_last_error());
  shared->ready.fetch_add(1);
  int contributors = 0;
  for (int r = 0; r < k.ranks(); ++r) contributors += k.contributes(r);
  if (!k.contributes(rank)) {
    if (k.kind == StandIn::kLostContinue || k.kind == StandIn::kLostRestore) raise(SIGKILL);
    if (k.kind == StandIn::kJoin) {
      int last = -1;
      CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK, "rank %d: join: %s", rank, syncd_last_error());
      syncd_shutdown(c);
      return 0;
    }
    // kLostNode: wait for the daemon's end (the test kills it once every rank is ready).
    int32_t x = 0;
    int64_t one = 1;
    syncd_tensor t{"until.the.daemon.is.gone", &x, SYNCD_INT32, 1, &one, 0};
    syncd_handle h;
    int rc = syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h);
    if (rc == SYNCD_OK) rc = syncd_wait(c, h, 60'000);
    CHILD_CHECK(rc == SYNCD_ERR_DAEMON_LOST, "rank %d on the lost node: %s: %s", rank, syncd_status_name(rc),
                syncd_last_error());
    return 0;
  }
  if (k.kind != StandIn::kJoin && WaitForTheContributors(c, rank, contributors) != 0) return 1;
  if (ReduceTheBurst(c, k, rank) != 0) return 1;
  if (k.kind == StandIn::kJoin) {
    int last = -1;
    CHILD_CHECK(syncd_join(c, 60'000, &last) == SYNCD_OK, "rank %d: join: %s", rank, syncd_last_error());
  }
  syncd_shutdown(c);
  return 0;
}

class StandInIdentity : public ::testing::TestWithParam<IdentityCase> {};

TEST_P(StandInIdentity, EveryResultIsTheReductionOverTheRanksThatContributed) {
  const IdentityCase k = GetParam();
  NextJob();
  std::vector<std::string> args = {"--coord", k.coord, "--on-loss", k.policy(), "--log-level", "error"};
  if (k.kind == StandIn::kVacant) {
    char job[32];
    snprintf(job, sizeof(job), "%#llx", (unsigned long long)CurrentJobId());
    args.insert(args.end(), {"--vacant-ranks", std::to_string(k.victim()), "--job-id", job});
  }
  Cluster cluster(k.nodes, k.local, args);
  auto* shared = new (mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared();
  std::vector<pid_t> pids;
  for (int r = 0; r < k.ranks(); ++r) {
    if (k.kind == StandIn::kVacant && r == k.victim()) continue;
    const std::string dir = cluster.node(r / k.local).run_dir();
    pids.push_back(Spawn([=] { return RunRank(dir, k, r, shared); }));
  }
  if (k.kind == StandIn::kLostNode) {
    const double give_up = NowS() + 30;
    while (shared->ready.load() < k.ranks() && NowS() < give_up) usleep(1000);
    cluster.node(k.victim()).Kill(SIGKILL);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    const int rank = k.kind == StandIn::kVacant && int(i) >= k.victim() ? int(i) + 1 : int(i);
    const int s = WaitChild(pids[i], 90'000);
    const bool lost = (k.kind == StandIn::kLostContinue || k.kind == StandIn::kLostRestore) && rank == k.victim();
    if (lost) {
      EXPECT_TRUE(s != -1 && WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL) << "rank " << rank << " status " << s;
    } else {
      EXPECT_TRUE(s != -1 && WIFEXITED(s) && WEXITSTATUS(s) == 0) << "rank " << rank << " status " << s;
    }
  }
  munmap(shared, sizeof(Shared));
  // Every daemon drains at once, as syncrun and a Slurm epilog stop them (one at a time, a node left
  // alone whose every rank was lost waits out its drain: see the note in the closing notes).
  for (int node = 0; node < k.nodes; ++node)
    if (!(k.kind == StandIn::kLostNode && node == k.victim())) cluster.node(node).Kill(SIGTERM);
}

std::vector<IdentityCase> Cases() {
  std::vector<IdentityCase> cases;
  for (const char* coord : {"negotiate", "gs", "nbcs", "topo"})
    for (auto [nodes, local] : {std::pair{1, 4}, {2, 2}, {3, 1}}) {
      for (StandIn kind : {StandIn::kJoin, StandIn::kLostContinue, StandIn::kLostRestore, StandIn::kVacant})
        cases.push_back({coord, nodes, local, kind});
      if (nodes > 1) cases.push_back({coord, nodes, local, StandIn::kLostNode});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Stand, StandInIdentity, ::testing::ValuesIn(Cases()), IdentityCaseName);

}  // namespace
}  // namespace syncd::testing
