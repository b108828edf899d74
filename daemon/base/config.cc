#include "daemon/base/config.h"

#include "daemon/base/affinity.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "proto/status_names.h"

namespace syncd {
namespace {

StatusOr<uint64_t> ParseUnsigned(const std::string& name, const std::string& text, uint64_t max) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), ::isdigit))
    return InvalidArgument(name + ": expected a non-negative integer, got '" + text + "'");
  errno = 0;
  unsigned long long v = strtoull(text.c_str(), nullptr, 10);
  if (errno != 0 || v > max)
    return InvalidArgument(name + ": " + text + " is out of range (max " + std::to_string(max) + ")");
  return uint64_t(v);
}

template <typename T>
std::function<Status(Config&, const std::string&)> Unsigned(T Config::*field, const std::string& name,
                                                             uint64_t min = 0,
                                                             uint64_t max = std::numeric_limits<T>::max()) {
  return [field, name, min, max](Config& c, const std::string& text) -> Status {
    auto v = ParseUnsigned(name, text, max);
    if (!v.ok()) return v.status();
    if (*v < min) return InvalidArgument(name + ": must be at least " + std::to_string(min));
    c.*field = T(*v);
    return Status::Ok();
  };
}

// A ratio in (0, 1], kept in parts per million.
std::function<Status(Config&, const std::string&)> Ratio(uint32_t Config::*field, const std::string& name) {
  return [field, name](Config& c, const std::string& text) -> Status {
    char* end = nullptr;
    const double v = strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(v > 0 && v <= 1))
      return InvalidArgument(name + ": expected a ratio in (0, 1], got '" + text + "'");
    c.*field = std::max(1u, uint32_t(std::lround(v * 1e6)));
    return Status::Ok();
  };
}

std::function<Status(Config&, const std::string&)> Bytes(uint64_t Config::*field, const std::string& name) {
  return [field, name](Config& c, const std::string& text) -> Status {
    auto v = ParseBytes(text);
    if (!v.ok()) return InvalidArgument(name + ": " + v.status().message());
    c.*field = *v;
    return Status::Ok();
  };
}

// One of a few words, each standing for a value of the field; the error lists them ("name:
// expected a, b or c, got 'x'").
template <typename T>
std::function<Status(Config&, const std::string&)> OneOf(T Config::*field, const std::string& name,
                                                         std::vector<std::pair<std::string, T>> allowed) {
  return [field, name, allowed](Config& c, const std::string& text) -> Status {
    for (const auto& [word, value] : allowed)
      if (word == text) return c.*field = value, Status::Ok();
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i)
      list += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + allowed[i].first;
    return InvalidArgument(name + ": expected " + list + ", got '" + text + "'");
  };
}

// --compression: the methods offered; a withdrawn one is refused saying why.
Status CompressionMethod(Config& c, const std::string& text) {
  if (text == "randomk")
    return InvalidArgument(std::string("compression: ") + abi::CompressionWithdrawn(SYNCD_COMPRESSION_RANDOMK));
  return OneOf<syncd_compression>(&Config::compression, "compression",
                                  {{"none", SYNCD_COMPRESSION_NONE}, {"fp16", SYNCD_COMPRESSION_FP16},
                                   {"bf16", SYNCD_COMPRESSION_BF16}, {"topk", SYNCD_COMPRESSION_TOPK},
                                   {"onebit", SYNCD_COMPRESSION_ONEBIT}, {"powersgd", SYNCD_COMPRESSION_POWERSGD}})(c, text);
}

std::function<Status(Config&, const std::string&)> Text(std::string Config::*field) {
  return [field](Config& c, const std::string& text) -> Status {
    c.*field = text;
    return Status::Ok();
  };
}

std::string DefaultRunDir() {
  const char* tmp = getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/syncd-" + std::to_string(getuid());
}

}  // namespace

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return InvalidArgument("expected a size like 4096, 64K, 64M or 1G, got '" + text + "'");
  auto number = ParseUnsigned("size", text.substr(0, i), std::numeric_limits<uint64_t>::max());
  if (!number.ok()) return number.status();
  std::string unit = text.substr(i);
  for (auto& ch : unit) ch = char(toupper(static_cast<unsigned char>(ch)));
  uint64_t mult = 1;
  if (unit == "" || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1ull << 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1ull << 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1ull << 30;
  else return InvalidArgument("unknown size unit '" + text.substr(i) + "' in '" + text + "'");
  if (*number > std::numeric_limits<uint64_t>::max() / mult) return InvalidArgument("size '" + text + "' overflows");
  return *number * mult;
}

namespace {

// The configuration table in parts, in the order of `syncd --help` and the configuration page's table (docs/pages/configuration.md).

// This node: where the daemon listens, its cores, its clients' memory.
std::vector<ConfigEntry> NodeEntries() {
  return {
    {"run-dir", "SYNCD_RUN_DIR", "$TMPDIR/syncd-$UID",
     "Directory for attach.sock and control.sock (created 0700; 0755 with --node-service on)", Text(&Config::run_dir)},
    {"node-service", "SYNCD_NODE_SERVICE", "off",
     "on: serve the jobs an administrator registers (syncctl job add, the Slurm prolog), of any user: the run "
     "directory and attach.sock are open to all, a client attaches only to a registered job of its own uid, and "
     "control.sock is the administrators' (root, or --admin-group). off: serve the daemon's own user",
     OneOf<bool>(&Config::node_service, "node-service", {{"on", true}, {"off", false}})},
    {"admin-group", "SYNCD_ADMIN_GROUP", "none",
     "With --node-service on: the group whose members may use control.sock (syncctl job add, drain, status) "
     "besides root. none: root only",
     [](Config& c, const std::string& t) -> Status {
       c.admin_group = t == "none" ? "" : t;
       return Status::Ok();
     }},
    {"local-size", "SYNCD_LOCAL_SIZE", "0",
     "Client processes on this node; 0 takes it from the first client", Unsigned(&Config::local_size, "local-size")},
    {"cores", "SYNCD_CORES", "auto",
     "Dedicated cores for the daemon: auto (last core), none (no pinning) or a list like 1,3-4",
     Text(&Config::cores)},
    {"fusion-threshold", "SYNCD_FUSION_THRESHOLD", "64M",
     "Largest fused allreduce in bytes; 0 disables fusion", Bytes(&Config::fusion_threshold, "fusion-threshold")},
    {"arena-size", "SYNCD_ARENA_SIZE", "512M",
     "Shared data arena per client (zero-copy tensors and staging)", Bytes(&Config::arena_bytes, "arena-size")},
    {"result-area-size", "SYNCD_RESULT_AREA_SIZE", "512M",
     "Shared area per client for results whose size only the daemon knows (allgather, alltoall)",
     Bytes(&Config::result_bytes, "result-area-size")},
    {"ring-entries", "SYNCD_RING_ENTRIES", "1024",
     "Submission/completion ring slots per client (power of two): the in-flight request limit",
     [](Config& c, const std::string& t) -> Status {
       SYNCD_RETURN_IF_ERROR(Unsigned(&Config::ring_entries, "ring-entries", 2)(c, t));
       if ((c.ring_entries & (c.ring_entries - 1)) != 0 || c.ring_entries > (1u << 16))
         return InvalidArgument("ring-entries: must be a power of two up to 65536, got " + t);
       return Status::Ok();
     }},
    {"spin-us", "SYNCD_SPIN_US", "200",
     "Microseconds the engine keeps polling after its last work before it sleeps on its doorbell and the network",
     Unsigned(&Config::spin_us, "spin-us")},
    {"network-wait", "SYNCD_NETWORK_WAIT", "auto",
     "auto: the engine counts the other syncd daemons that may run on its cores (at start, every second for 10 s, "
     "then every 10 s; shown by syncctl status): with none it spins --spin-us after its last work and polls a non-blocking cycle (nbcs) "
     "waiting on other nodes, yielding the core between looks; with one or more it sleeps on the network until its "
     "next event instead; with two or more it also yields the core at each look while it spins. poll and sleep fix the network's "
     "choice (--spin-us then holds). Data on the move is polled either way",
     OneOf<NetworkWait>(&Config::network_wait, "network-wait",
                        {{"auto", NetworkWait::kAuto}, {"poll", NetworkWait::kPoll}, {"sleep", NetworkWait::kSleep}})},
    {"host-allreduce", "SYNCD_HOST_ALLREDUCE", "auto",
     "The inter-node algorithm of a host allreduce: auto (up to 64 KiB rd below 16 nodes and tree from 16; above, "
     "halving on a power of two nodes and ring otherwise), rd (recursive doubling), halving (recursive halving and "
     "doubling), ring or tree (binomial: reduce to node 0, broadcast back)",
     OneOf<HostAllreduce>(&Config::host_allreduce, "host-allreduce",
                          {{"auto", HostAllreduce::kAuto}, {"rd", HostAllreduce::kRecursiveDoubling},
                           {"halving", HostAllreduce::kRecursiveHalving}, {"ring", HostAllreduce::kRing},
                           {"tree", HostAllreduce::kTree}})},
    {"compression", "SYNCD_COMPRESSION", "none",
     "How an allreduce's inter-node hop travels when its ranks leave the choice to the daemon (the default of "
     "syncd_allreduce_async and hvd.allreduce): none, fp16 or bf16 (cast by the daemon after the node's exact "
     "reduction, summed in that type between nodes, cast back), or with error feedback topk (at "
     "--compression-ratio), onebit or powersgd (at --compression-rank); float32 and float64 host tensors only "
     "(randomk is withdrawn: refused, naming why). Every daemon of the job must have the same",
     CompressionMethod},
    {"compression-ratio", "SYNCD_COMPRESSION_RATIO", "0.01",
     "Top-k's share of the elements that cross the nodes, when the ranks do not say (0 < ratio <= 1)",
     Ratio(&Config::compression_ppm, "compression-ratio")},
    {"compression-rank", "SYNCD_COMPRESSION_RANK", "4",
     "PowerSGD's rank when the ranks do not say: the columns of the two factors a matrix travels as (1..1024)",
     Unsigned(&Config::compression_rank, "compression-rank", 1, 1024)},
    {"compression-residual-bytes", "SYNCD_COMPRESSION_RESIDUAL_BYTES", "1G",
     "The most memory the error-feedback residuals of top-k, 1-bit and PowerSGD take (per tensor, what "
     "compression left out so far, and PowerSGD's factor for the next step's warm start); beyond it the least "
     "recently used are dropped",
     Bytes(&Config::compression_residual_bytes, "compression-residual-bytes")},
    {"compression-min-bytes", "SYNCD_COMPRESSION_MIN_BYTES", "64K",
     "Tensors smaller than this go uncompressed under --compression (a rank's explicit choice always applies)",
     Bytes(&Config::compression_min_bytes, "compression-min-bytes")},
  };
}

// --vacant-ranks: ranks are below this.
constexpr uint64_t kMaxVacantRank = 1u << 24;

// The job: its nodes, how they meet, how they stop.
std::vector<ConfigEntry> JobEntries() {
  return {
    {"nodes", "SYNCD_NODES", "1", "Daemons in the job, one per node", Unsigned(&Config::nodes, "nodes", 1)},
    {"node-rank", "SYNCD_NODE_RANK", "0", "This daemon's node rank (0 serves the rendezvous)",
     Unsigned(&Config::node_rank, "node-rank")},
    {"rendezvous", "SYNCD_RENDEZVOUS", "127.0.0.1:29500", "HOST:PORT where node 0 serves the rendezvous",
     Text(&Config::rendezvous)},
    {"job-token", "SYNCD_JOB_TOKEN", "syncd", "Shared secret of the job's daemons; joins with another token are refused",
     Text(&Config::job_token)},
    {"join-timeout", "SYNCD_JOIN_TIMEOUT", "60",
     "Seconds to wait for every node to join the rendezvous, and for the job's NCCL communicator to be created",
     Unsigned(&Config::join_timeout_s, "join-timeout", 1)},
    {"drain-timeout", "SYNCD_DRAIN_TIMEOUT", "30",
     "Graceful drain (SIGTERM, syncctl drain): seconds in-flight collectives get to finish before they fail",
     Unsigned(&Config::drain_timeout_s, "drain-timeout", 0)},
    {"on-loss", "SYNCD_ON_LOSS", "fail",
     "What the job does when a rank dies: fail (every rank gets an error naming it, the job ends), continue (the "
     "survivors go on: collectives sum over them, Average divides by the tensors summed; ranks keep their numbers "
     "and hvd.size() stays) or restore (as continue, but the first collective that goes without it fails on every "
     "survivor, so that hvd.elastic.run rolls back to the last commit, as Horovod elastic). Every daemon of the job "
     "must have the same",
     OneOf<OnLoss>(&Config::on_loss, "on-loss",
                   {{"fail", OnLoss::kFail}, {"continue", OnLoss::kContinue}, {"restore", OnLoss::kRestore}})},
    {"vacant-ranks", "SYNCD_VACANT_RANKS", "none",
     "Ranks of the job (a list like 3,6-7) that no process holds when it starts, slots for ranks that come later "
     "(syncrun --max-np): the job goes on without them, as --on-loss says, until a rank attaches in their place and "
     "joins the others at their next commit. Needs --on-loss continue or restore. A node whose every rank is vacant "
     "joins the job's collectives once a rank attaches there; its daemon starts the job without a rank, so it needs "
     "--job-id. Every daemon of the job must have the same",
     [](Config& c, const std::string& text) -> Status {
       c.vacant_ranks.clear();
       if (text == "none" || text.empty()) return Status::Ok();
       auto ranks = ParseNumberList(text, "vacant-ranks", kMaxVacantRank);
       if (!ranks.ok()) return ranks.status();
       c.vacant_ranks = std::move(*ranks);
       return Status::Ok();
     }},
    {"job-id", "SYNCD_JOB_ID", "0",
     "The id of the job this daemon's ranks belong to (what they carry as SYNCD_JOB_ID, or Slurm's job id). Needed "
     "only where --vacant-ranks leaves every rank of this node vacant: the daemon then starts the job before any "
     "rank attaches. 0: none",
     [](Config& c, const std::string& text) -> Status {
       char* end = nullptr;
       errno = 0;
       c.job_id = strtoull(text.c_str(), &end, 0);
       if (text.empty() || text[0] == '-' || errno != 0 || *end != '\0')
         return InvalidArgument("job-id: '" + text + "' is not a job id (a number, decimal or 0x hex)");
       return Status::Ok();
     }},
  };
}

// How the daemons agree on what to reduce, and when.
std::vector<ConfigEntry> CoordinationEntries() {
  return {
    {"coord", "SYNCD_COORD", "negotiate",
     "How daemons agree on what to reduce: negotiate (Horovod's cycle, blocking collectives), gs (negotiate with a "
     "globally agreed sleep), nbcs (non-blocking cache sync), topo (the registered graph's plan, no negotiation; "
     "other names negotiated on demand)",
     [](Config& c, const std::string& t) -> Status {
       for (uint32_t m = 0; m < std::size(abi::kCoordModeNames); ++m)
         if (t == abi::kCoordModeNames[m]) {
           c.coord = abi::CoordMode(m);
           return Status::Ok();
         }
       return InvalidArgument("coord: unknown mode '" + t + "' (available: negotiate, gs, nbcs, topo)");
     }},
    {"gs-period", "SYNCD_GS_PERIOD", "1", "gs: agree on the global sleep every this many cycles",
     Unsigned(&Config::gs_period, "gs-period", 1)},
    {"cycle-time-us", "SYNCD_CYCLE_TIME_US", "1000", "Negotiation cycle in microseconds (Horovod 0.16 used 5000)",
     Unsigned(&Config::cycle_time_us, "cycle-time-us", 1)},
    {"cycle-start", "SYNCD_CYCLE_START", "work",
     "work: a cycle starts as soon as new tensors are ready, else cycle-time after the previous one; timer: only "
     "cycle-time after the previous one (Horovod's exact timing)",
     OneOf<CycleStart>(&Config::cycle_start, "cycle-start", {{"timer", CycleStart::kTimer}, {"work", CycleStart::kWork}})},
    {"cache-capacity", "SYNCD_CACHE_CAPACITY", "1024", "Response cache entries (tensor names agreed without the coordinator)",
     Unsigned(&Config::cache_capacity, "cache-capacity", 1)},
    {"ucx-peer-errors", "SYNCD_UCX_PEER_ERRORS", "auto",
     "How lost peer daemons are noticed. auto: UCX error handling for other hosts, pidfds for this host (allows shared "
     "memory; under --on-loss continue|restore UCX error handling too, so TCP: a daemon killed mid-message would wedge "
     "shared memory); on: UCX everywhere (TCP even on one host); off: not at all",
     OneOf<PeerErrors>(&Config::ucx_peer_errors, "ucx-peer-errors",
                       {{"auto", PeerErrors::kAuto}, {"on", PeerErrors::kOn}, {"off", PeerErrors::kOff}})},
  };
}

// GPUs, stalls, logging.
std::vector<ConfigEntry> DeviceAndHealthEntries() {
  return {
    {"gpus", "SYNCD_GPUS", "auto",
     "auto: drive every GPU the daemon sees (CUDA_VISIBLE_DEVICES) with one NCCL rank each, for GPU tensors; none: "
     "host tensors only",
     OneOf<bool>(&Config::gpus, "gpus", {{"auto", true}, {"none", false}})},
    {"gpu-ipc-cache", "SYNCD_GPU_IPC_CACHE", "on",
     "on: keep clients' CUDA IPC mappings open between requests (the pointer cache); off: open and close them for "
     "every request (only to measure what the cache saves)",
     OneOf<bool>(&Config::gpu_ipc_cache, "gpu-ipc-cache", {{"on", true}, {"off", false}})},
    {"stall-warning-s", "SYNCD_STALL_WARNING_S", "60",
     "Warn (log and syncctl status) about tensors some ranks submitted and others not after this many seconds",
     Unsigned(&Config::stall_warning_s, "stall-warning-s", 1)},
    {"stall-shutdown-s", "SYNCD_STALL_SHUTDOWN_S", "300",
     "Shut the job down (every pending request fails on every rank, naming the tensor and the ranks that never "
     "submitted it) once a tensor has stalled this many seconds; 0: never",
     Unsigned(&Config::stall_shutdown_s, "stall-shutdown-s")},
    {"metrics-port", "SYNCD_METRICS_PORT", "off",
     "Serve Prometheus metrics at http://ADDRESS:PORT/metrics (text exposition format); 0: any free port "
     "(syncctl status and RUN_DIR/metrics.url say which); off: no endpoint",
     [](Config& c, const std::string& t) -> Status {
       if (t == "off") return c.metrics_port = -1, Status::Ok();
       auto v = ParseUnsigned("metrics-port", t, 65535);
       if (!v.ok()) return InvalidArgument("metrics-port: expected off or a port number 0..65535, got '" + t + "'");
       return c.metrics_port = int32_t(*v), Status::Ok();
     }},
    {"metrics-address", "SYNCD_METRICS_ADDRESS", "127.0.0.1",
     "Address the metrics endpoint listens on (loopback by default; 0.0.0.0 lets a site's Prometheus reach it)",
     [](Config& c, const std::string& t) -> Status {
       if (t.empty()) return InvalidArgument("metrics-address: must not be empty");
       return c.metrics_address = t, Status::Ok();
     }},
    {"timeline", "SYNCD_TIMELINE", "off",
     "Write the job's timeline (Chrome trace JSON, every node's events; node 0 writes it) to this file from each "
     "job's start until its ranks leave; off: only when syncctl timeline start or hvd.start_timeline() asks",
     [](Config& c, const std::string& t) -> Status {
       if (t.empty()) return InvalidArgument("timeline: expected a file or off");
       return c.timeline = t == "off" ? "" : t, Status::Ok();
     }},
    {"timeline-max-mb", "SYNCD_TIMELINE_MAX_MB", "1024",
     "The timeline file stops growing at this size (a marker at its end says how many events were cut)",
     Unsigned(&Config::timeline_max_mb, "timeline-max-mb", 1)},
    {"log-level", "SYNCD_LOG_LEVEL", "info", "trace, debug, info, warn, error or off",
     [](Config& c, const std::string& t) -> Status {
       static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
       for (const char* l : kLevels)
         if (t == l) return c.log_level = t, Status::Ok();
       return InvalidArgument("log-level: unknown level '" + t + "'");
     }},
  };
}

}  // namespace

const std::vector<ConfigEntry>& ConfigTable() {
  static const std::vector<ConfigEntry> table = [] {
    std::vector<ConfigEntry> all;
    for (auto part : {NodeEntries, JobEntries, CoordinationEntries, DeviceAndHealthEntries})
      for (ConfigEntry& e : part()) all.push_back(std::move(e));
    return all;
  }();
  return table;
}

bool NodeStartsVacant(const Config& c) { return NodeWhollyVacant(c, c.node_rank); }

bool NodeWhollyVacant(const Config& c, uint32_t node) {
  if (c.vacant_ranks.empty() || c.local_size == 0) return false;
  const uint32_t first = node * c.local_size;
  const auto lo = std::lower_bound(c.vacant_ranks.begin(), c.vacant_ranks.end(), first);
  const auto hi = std::lower_bound(c.vacant_ranks.begin(), c.vacant_ranks.end(), first + c.local_size);
  return uint32_t(hi - lo) == c.local_size;
}

const char* OnLossName(OnLoss policy) {
  switch (policy) {
    case OnLoss::kContinue: return "continue";
    case OnLoss::kRestore: return "restore";
    default: return "fail";
  }
}

namespace {

// --vacant-ranks: only where the job can go on without ranks, within it, never every rank, and a
// node wholly vacant only with --job-id where it is this one (its daemon starts the job without a
// rank).
Status CheckVacantRanks(const Config& c) {
  if (c.vacant_ranks.empty()) return Status::Ok();
  if (c.on_loss == OnLoss::kFail)
    return InvalidArgument("vacant-ranks: needs --on-loss continue or restore (a job that fails on a loss cannot go on "
                           "without ranks)");
  if (c.local_size == 0) return Status::Ok();  // known at the first attach: the job checks then
  const uint64_t size = uint64_t(c.nodes) * c.local_size;
  if (c.vacant_ranks.back() >= size)
    return InvalidArgument("vacant-ranks: rank " + std::to_string(c.vacant_ranks.back()) + " is not in the job (" +
                           std::to_string(size) + " ranks: " + std::to_string(c.nodes) + " nodes of " +
                           std::to_string(c.local_size) + ")");
  if (c.vacant_ranks.size() == size)
    return InvalidArgument("vacant-ranks: every rank of the job is vacant; it needs a rank to start with");
  if (NodeStartsVacant(c) && c.job_id == 0)
    return InvalidArgument("vacant-ranks: every rank of node " + std::to_string(c.node_rank) +
                           " (this one) is vacant: its daemon starts the job before a rank attaches, which needs "
                           "--job-id (the SYNCD_JOB_ID its ranks will carry)");
  return Status::Ok();
}

}  // namespace

StatusOr<Config> BuildConfig(const std::map<std::string, std::string>& flags,
                             const std::map<std::string, std::string>& env) {
  Config c;
  for (const ConfigEntry& e : ConfigTable()) {
    if (e.default_text.front() != '$') {
      Status st = e.set(c, e.default_text);
      if (!st.ok()) return Status(SYNCD_ERR_INTERNAL, "bad default for " + e.name + ": " + st.message());
    }
    if (auto f = flags.find(e.name); f != flags.end()) {
      SYNCD_RETURN_IF_ERROR(e.set(c, f->second));
    } else if (auto v = env.find(e.env); v != env.end()) {
      Status st = e.set(c, v->second);
      if (!st.ok()) return InvalidArgument("from " + e.env + ": " + st.message());
    }
  }
  if (c.run_dir.empty()) c.run_dir = DefaultRunDir();
  if (c.node_rank >= c.nodes)
    return InvalidArgument("node-rank " + std::to_string(c.node_rank) + " is not below nodes " + std::to_string(c.nodes));
  if (c.nodes > 1 && c.local_size == 0)
    return InvalidArgument("local-size is required when nodes > 1 (every node must run the same number of ranks)");
  SYNCD_RETURN_IF_ERROR(CheckVacantRanks(c));
  return c;
}

StatusOr<Config> JobConfig(Config base, const std::map<std::string, std::string>& settings) {
  for (const auto& [name, value] : settings) {
    if (std::find(std::begin(kJobSettings), std::end(kJobSettings), name) == std::end(kJobSettings))
      return InvalidArgument(name + " is not a setting of one job (those are on-loss, coord, stall-warning-s, "
                                    "stall-shutdown-s)");
    for (const ConfigEntry& e : ConfigTable())
      if (e.name == name) SYNCD_RETURN_IF_ERROR(e.set(base, value));
  }
  return base;
}

std::map<std::string, std::string> ConfigEnvironment() {
  std::map<std::string, std::string> env;
  for (const ConfigEntry& e : ConfigTable())
    if (const char* v = getenv(e.env.c_str()); v != nullptr) env.emplace(e.env, v);
  return env;
}

std::string ConfigMarkdownTable() {
  std::string out = "| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n";
  for (const ConfigEntry& e : ConfigTable())
    out += "| `--" + e.name + "` | `" + e.env + "` | `" + e.default_text + "` | " + e.help + " |\n";
  return out;
}

}  // namespace syncd
