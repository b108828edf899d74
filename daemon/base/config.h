// The daemon's settings, declared once. Each entry has a flag, an SYNCD_* environment variable, a
// default and help text; `syncd --help` prints the table and `syncd --config-markdown` prints the
// configuration page's table (docs/pages/configuration.md) from it (a test keeps the two equal). Precedence: flag > env > default.
#ifndef SYNCD_DAEMON_BASE_CONFIG_H_
#define SYNCD_DAEMON_BASE_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "proto/shm_abi.h"

namespace syncd {

// The settings that pick one of a few behaviours (parsed once, never compared as strings).
enum class CycleStart { kTimer, kWork };            // --cycle-start
enum class PeerErrors { kAuto, kOn, kOff };         // --ucx-peer-errors
enum class NetworkWait { kAuto, kPoll, kSleep };          // --network-wait
// --host-allreduce: the inter-node algorithm of a host allreduce (kAuto: by size and node count).
enum class HostAllreduce { kAuto, kRecursiveDoubling, kRecursiveHalving, kRing, kTree };
// --on-loss: what a job does when it loses a rank. kFail: the job ends with the error on every
// rank; kContinue: the survivors go on without it (Job::ContinueWithout); kRestore: as kContinue,
// but the first collective that goes without it fails on every survivor (Horovod elastic's
// HorovodInternalError: the script rolls back to its last commit).
enum class OnLoss { kFail, kContinue, kRestore };
// "fail", "continue", "restore": the word --on-loss takes, as syncrun, syncctl and the metrics say it.
const char* OnLossName(OnLoss policy);

// Field defaults live in ConfigTable() only; BuildConfig applies them.
struct Config {
  std::string run_dir;        // holds attach.sock and control.sock
  uint32_t local_size = 0;    // clients expected on this node (0: taken from the first client)
  bool node_service = false;  // --node-service: serve registered jobs of any user (control/job_registry.h)
  std::string admin_group;    // --admin-group: may use control.sock besides root (node service)
  std::string cores;          // dedicated cores: "auto", "none" or a list like "1,3-4"
  uint64_t fusion_threshold = 0;
  uint64_t arena_bytes = 0;
  uint64_t result_bytes = 0;
  uint32_t ring_entries = 0;
  uint32_t spin_us = 0;       // engine polls this long after its last work before sleeping
  NetworkWait network_wait = NetworkWait::kAuto;  // a cycle on the network: polled, slept on, or by the core
  HostAllreduce host_allreduce = HostAllreduce::kAuto;
  syncd_compression compression = SYNCD_COMPRESSION_NONE;  // --compression: the default for allreduces
  uint64_t compression_min_bytes = 0;                       // --compression-min-bytes
  uint32_t compression_ppm = 10'000;                        // --compression-ratio, parts per million
  uint32_t compression_rank = 4;                            // --compression-rank (PowerSGD)
  uint64_t compression_residual_bytes = 0;                  // --compression-residual-bytes
  std::string log_level;
  uint32_t nodes = 1;         // daemons in the job (one per node)
  uint32_t node_rank = 0;
  std::string rendezvous;     // HOST:PORT served by node 0
  std::string job_token;
  uint32_t join_timeout_s = 0;
  uint32_t drain_timeout_s = 0;
  OnLoss on_loss = OnLoss::kFail;  // --on-loss
  // --vacant-ranks: the job's slots no rank holds at its start (syncrun --max-np), ascending.
  std::vector<uint32_t> vacant_ranks;
  uint64_t job_id = 0;  // --job-id: the job its ranks belong to (0: unknown until one attaches)
  uint32_t cycle_time_us = 0;
  CycleStart cycle_start = CycleStart::kWork;  // kTimer: Horovod's timing
  uint32_t cache_capacity = 0;
  abi::CoordMode coord = abi::CoordMode::kNegotiate;  // --coord, by name in abi::kCoordModeNames
  bool gpus = true;             // --gpus auto (false: none)
  bool gpu_ipc_cache = true;    // --gpu-ipc-cache on
  uint32_t gs_period = 1;       // gs: cycles between sleep agreements
  PeerErrors ucx_peer_errors = PeerErrors::kAuto;
  uint32_t stall_warning_s = 0;  // warn about names some ranks submitted and others not, after this long
  uint32_t stall_shutdown_s = 0;  // then end the job after this long (0: never)
  int32_t metrics_port = -1;      // --metrics-port (-1: off, 0: any free port)
  std::string metrics_address;    // --metrics-address
  std::string timeline;           // --timeline FILE ("": none until syncctl or a rank starts one)
  uint32_t timeline_max_mb = 0;   // --timeline-max-mb: the file's cap
};

struct ConfigEntry {
  std::string name;          // flag without the leading dashes
  std::string env;           // environment variable
  std::string default_text;  // as shown to users
  std::string help;
  std::function<Status(Config&, const std::string&)> set;
};

const std::vector<ConfigEntry>& ConfigTable();

// Builds a Config from defaults, then `env`, then `flags` (name -> value). Errors name the setting.
StatusOr<Config> BuildConfig(const std::map<std::string, std::string>& flags,
                             const std::map<std::string, std::string>& env);

// The environment variables of the table that are set in this process.
std::map<std::string, std::string> ConfigEnvironment();

std::string ConfigMarkdownTable();

// The settings a node service's registration may give one job over the daemon's own (syncctl job
// add --on-loss, --coord, ...): how it coordinates and what a loss or a stall does to it.
inline constexpr const char* kJobSettings[] = {"on-loss", "coord", "stall-warning-s", "stall-shutdown-s"};
// `base` with a job's settings (name -> value, names of kJobSettings) over it. Errors name the
// setting.
StatusOr<Config> JobConfig(Config base, const std::map<std::string, std::string>& settings);

// Whether --vacant-ranks leaves every rank of this node vacant (its daemon starts the job itself,
// from --job-id, before a rank attaches).
bool NodeStartsVacant(const Config& c);
// Whether --vacant-ranks leaves every rank of node `node` vacant.
bool NodeWhollyVacant(const Config& c, uint32_t node);

// "64M", "64MiB", "1G", "4096" -> bytes.
StatusOr<uint64_t> ParseBytes(const std::string& text);

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_CONFIG_H_
