// Multi-process test harness: a real syncd binary in a fresh run directory and K real client
// processes forked from the test. Child bodies return 0 on success and print what went wrong;
// the parent asserts on exit codes. Fork before any thread exists in the test process.
#ifndef SYNCD_TESTS_INTEGRATION_HARNESS_H_
#define SYNCD_TESTS_INTEGRATION_HARNESS_H_

#include <sys/types.h>
#include <syncd/client.h>

#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

namespace syncd::testing {

std::string BinDir();

// Each RunRanks/RunClusterRanks call is one job (its own SYNCD job id); clients attached with
// Attach/AttachAs between calls belong to the current one (0 before the first call).
uint64_t CurrentJobId();
void NextJob();

using RankBody = std::function<int(syncd_client* c, int rank, int size)>;

class Daemon {
 public:
  // Starts syncd with `--run-dir <fresh dir> --local-size <local_size>` plus `args`, and waits
  // until it reports ready (NOTIFY_SOCKET). Fails the test if it does not come up.
  explicit Daemon(int local_size, std::vector<std::string> args = {}, bool wait_ready = true);
  // Waits for READY=1 (or the daemon's exit); returns whether it came.
  bool WaitReady(int timeout_ms);
  ~Daemon();

  const std::string& run_dir() const { return run_dir_; }
  pid_t pid() const { return pid_; }
  void Kill(int sig);
  // SIGKILLs it and starts it again as it was started (the same run directory and arguments, as
  // systemd's Restart= does); returns whether the new one became ready.
  bool Restart(int timeout_ms = 30'000);
  // Waits for exit; returns the exit status as from waitpid, or -1 on timeout.
  int Wait(int timeout_ms);
  // Output of `syncctl --run-dir <dir> status --json` (empty on failure).
  std::string StatusJson() const;
  // What the daemon logged (its stderr) so far. The log is printed when the test fails.
  std::string Log() const;

 private:
  void Start(const std::string& notify, int log_flags);

  std::vector<std::string> argv_;
  std::string run_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  int notify_fd_ = -1;
};

// N daemons on this machine forming one job (each its own run dir, all on loopback).
class Cluster {
 public:
  Cluster(int nodes, int local_size, std::vector<std::string> args = {});
  Daemon& node(int i) { return *daemons_[size_t(i)]; }
  int nodes() const { return int(daemons_.size()); }
  int local_size() const { return local_size_; }
  const std::string& rendezvous() const { return rendezvous_; }

 private:
  std::vector<std::unique_ptr<Daemon>> daemons_;
  int local_size_;
  std::string rendezvous_;
};

// Forks every rank of the cluster (node-major), each attached to its node's daemon.
std::vector<int> RunClusterRanks(Cluster& cluster, const RankBody& body, int timeout_ms = 120'000);
// A free TCP port on 127.0.0.1.
int FreePort();

// Attaches as `rank` of `size` (single node: local rank = rank).
syncd_client* Attach(const std::string& run_dir, int rank, int size);
syncd_client* AttachAs(const std::string& run_dir, int rank, int size, int local_rank, int local_size);
// The same for a rank of job `job` (AttachAs: the current one); nullptr, saying nothing, when refused.
syncd_client* AttachToJob(const std::string& run_dir, uint64_t job, int rank, int size, int local_rank, int local_size);



// Forks `size` children; each attaches, runs body, shuts down and exits with body's result.
// Returns the children's exit statuses (waitpid form), in rank order. Children still running
// after `timeout_ms` are killed and reported as -1.
std::vector<int> RunRanks(const std::string& run_dir, int size, const RankBody& body, int timeout_ms = 60'000);

// Forks one child running `fn` (no attach) and returns its pid.
pid_t Spawn(const std::function<int()>& fn);
// waitpid with a timeout; -1 on timeout (the child is then killed).
int WaitChild(pid_t pid, int timeout_ms);

// For child bodies: prints and returns 1 when `cond` is false.
#define CHILD_CHECK(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "[child %d] check failed: %s: ", getpid(), #cond);    \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      return 1;                                                             \
    }                                                                       \
  } while (0)

// GET http://127.0.0.1:port/path over a plain socket (HTTP/1.0: the server closes when done):
// the status line and the body, or "" when nothing answers.
std::pair<std::string, std::string> HttpGet(int port, const std::string& path);
// The daemon's /metrics page (it was started with --metrics-port), or "".
std::string MetricsPage(const std::string& run_dir);
// The value of the Prometheus sample that starts with `prefix` (name and leading labels) and has
// `suffix` right before its value, or -1.
double Sample(const std::string& page, const std::string& prefix, const std::string& suffix);
bool Contains(const std::string& haystack, const std::string& needle);
// Seconds on the monotonic clock.
double NowS();

// A flag shared by the forked ranks (made before they fork): one rank sets it when it has checked
// what it must while the others hold back, so a test does not race a fixed sleep against slow
// (sanitized) runs.
class SharedFlag {
 public:
  SharedFlag();
  ~SharedFlag();
  SharedFlag(const SharedFlag&) = delete;
  SharedFlag& operator=(const SharedFlag&) = delete;
  void Set();
  // Waits until set or `timeout_ms` passed; returns whether it was set.
  bool Wait(int timeout_ms) const;

 private:
  void* page_;
};

// Expects every status (as RunRanks returns them) to be a clean exit 0.
void ExpectAllSucceeded(const std::vector<int>& statuses);

// A job of `n` ranks on `d` whose allreduce must succeed: the daemon still serves. Returns how
// many seconds the job took (attach to exit).
double ExpectDaemonServes(const Daemon& d, int n);

// Output of `syncctl --run-dir <run_dir> status --json` ("" on failure). Usable from children.
std::string SyncctlStatusJson(const std::string& run_dir);
// `syncctl status` with `flags` (" --json", or "" for the table a user reads); "" on failure.
std::string SyncctlStatus(const std::string& run_dir, const std::string& flags = "");

// From `syncctl status`'s table: how many groups of the registered TOPO plan the first set that
// runs one ran ("N groups run"); -1 when no set runs a plan.
long long PlanGroupsRun(const std::string& table);

// A number field of `syncctl status --json` output (uint64 fields come quoted); UINT64_MAX if absent.
uint64_t JsonNumber(const std::string& json, const std::string& key);
// The same for a floating-point field (NaN when absent).
double JsonDouble(const std::string& json, const std::string& key);
// Tensors of collective kind `kind` ("allreduce") completed, from a status reply's ops.kinds;
// UINT64_MAX when the reply does not list the kind.
uint64_t KindOps(const std::string& json, const std::string& kind);

}  // namespace syncd::testing

#endif  // SYNCD_TESTS_INTEGRATION_HARNESS_H_
