#include "daemon/launch/launcher.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "daemon/base/affinity.h"
#include "daemon/base/net.h"
#include "daemon/launch/discovery.h"
#include "daemon/launch/exec.h"
#include "daemon/launch/netns.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

constexpr int kTermGraceMs = 3000;
// --respawn: how many replacements one rank gets.
constexpr int kMaxRespawns = 3;
constexpr uint64_t kReplacementGraceNs = 10'000'000'000;
// --restart-daemons: how long a rank whose daemon died waits for it to come back (SYNCD_REATTACH_S).
constexpr int kReattachS = 30;
// --host-discovery-script: how long one run of it may take.
constexpr int kDiscoveryTimeoutMs = 10'000;

void Say(const std::string& msg) { fprintf(stderr, "syncrun: %s\n", msg.c_str()); }

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// Child side of fork: its own process group, dies with syncrun, default signal dispositions.
void PrepareChild(const sigset_t& blocked) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
}

[[noreturn]] void Exec(const std::vector<std::string>& argv) { ExecOrExit(argv, "syncrun: "); }

std::string RandomToken() {
  unsigned char b[16] = {};
  FILE* f = fopen("/dev/urandom", "rb");
  if (f) {
    if (fread(b, 1, sizeof(b), f) != sizeof(b)) { /* keep what we have */ }
    fclose(f);
  }
  char out[33];
  for (int i = 0; i < 16; ++i) snprintf(out + 2 * i, 3, "%02x", b[i]);
  return out;
}

class Job {
 public:
  explicit Job(const LaunchOptions& o) : opts_(o) {}
  int Run();

 private:
  struct Daemon {
    std::string run_dir;
    int notify_fd = -1;
    pid_t pid = -1;
    bool alive = false;
    bool ready = false;
    SimulatedNodeCores cores;  // several nodes on this machine: what the launcher gave this one
    CoreSet worker_cores;      // where its ranks run (empty: unbound)
  };
  bool StartDaemon(int node);
  void DaemonDied(int node, int status);
  bool Elastic() const { return opts_.on_loss == "continue" || opts_.on_loss == "restore"; }
  void StartNetworkCommand();
  bool WaitReady();
  void StartWorkers();
  void StartWorker(int rank);
  // --host-discovery-script: new ranks in the free slots the script offers (discovery.h).
  void Grow();
  void Supervise();
  void StopAll();
  void Reap();

  const LaunchOptions& opts_;
  SlotLayout layout_;  // where the ranks sit: opts_.ranks started in layout_.world slots
  uint64_t next_discovery_ns_ = 0;
  std::string discovery_error_;  // the script's last error, said once
  std::string run_dir_;
  bool own_run_dir_ = false;
  int signal_fd_ = -1;
  sigset_t blocked_{};
  std::vector<Daemon> daemons_;
  std::string rendezvous_, token_, job_id_;
  int master_port_ = 0;  // MASTER_PORT for torch.distributed's store (rank 0 binds it)
  std::map<pid_t, int> workers_;  // pid -> rank
  std::unique_ptr<EmulatedNetwork> net_;  // --netns
  int result_ = 0;
  bool failed_ = false;
  int finished_well_ = 0;  // ranks that exited 0
  int lost_code_ = 0;      // --on-loss continue or restore: the first lost rank's exit code
  std::map<int, int> respawns_;  // --respawn: replacements started, by rank
  std::map<int, int> restarts_;  // --restart-daemons: daemons started again, by node
  int resets_ = 0;               // --reset-limit: ranks lost and replacements started so far
  // --respawn: the replacements running, by pid (value 0 once stopped as late), and since when
  // they alone are left while other ranks have finished (StopLateReplacements).
  std::map<pid_t, int> replacements_;
  uint64_t replacements_alone_ns_ = 0;
  // --respawn: once every other rank has finished well, replacements still running have not
  // joined them (they were started too late): stopped after kReplacementGraceNs.
  void StopLateReplacements();
};

bool Job::StartDaemon(int node) {
  Daemon& d = daemons_[size_t(node)];
  d.run_dir = opts_.nodes == 1 ? run_dir_ : run_dir_ + "/node" + std::to_string(node);
  std::error_code ec;
  std::filesystem::create_directories(d.run_dir, ec);
  chmod(d.run_dir.c_str(), 0700);
  const std::string notify_path = d.run_dir + "/notify.sock";
  if (d.notify_fd >= 0) close(d.notify_fd);  // started again (--restart-daemons)
  d.notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", notify_path.c_str());
  unlink(notify_path.c_str());
  if (d.notify_fd < 0 || bind(d.notify_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Say("cannot create " + notify_path + ": " + strerror(errno));
    return false;
  }
  std::vector<std::string> argv = {opts_.syncd_path, "--run-dir", d.run_dir, "--local-size",
                                   std::to_string(layout_.slots_per_node)};
  if (!layout_.vacant.empty())
    argv.insert(argv.end(), {"--vacant-ranks", FormatRanks(layout_.vacant), "--job-id", job_id_});
  if (opts_.nodes > 1) {
    argv.insert(argv.end(), {"--nodes", std::to_string(opts_.nodes), "--node-rank", std::to_string(node),
                             "--rendezvous", rendezvous_, "--job-token", token_});
    bool cores_given = false;
    for (const auto& a : opts_.daemon_args) cores_given |= a.rfind("--cores", 0) == 0;
    if (!cores_given) {
      d.cores = PlanSimulatedNodes(AllowedCores(), opts_.nodes)[size_t(node)];
      if (!d.cores.daemon.empty()) argv.push_back("--cores=" + FormatCoreList(d.cores.daemon));
    }
    // More daemons than cores: each daemon measures that its core is contended and sleeps
    // (--network-wait auto), rather than poll the core the one it waits for needs.
  }
  if (!opts_.on_loss.empty()) argv.insert(argv.end(), {"--on-loss", opts_.on_loss});
  argv.insert(argv.end(), opts_.daemon_args.begin(), opts_.daemon_args.end());
  d.pid = fork();
  if (d.pid == 0) {
    PrepareChild(blocked_);
    setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    if (net_) {
      // The namespaces share a kernel and a boot id: without this UCX would take shared memory.
      setenv("UCX_TLS", "tcp", 1);
      setenv("UCX_NET_DEVICES", EmulatedNetwork::kDevice, 1);
      Exec(net_->Inside(node, argv));
    }
    Exec(argv);
  }
  d.alive = d.pid > 0;
  return d.alive;
}

bool Job::WaitReady() {
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(opts_.ready_timeout_s) * 1'000'000'000ull;
  char buf[1024];
  size_t ready = 0;
  while (ready < daemons_.size() && abi::MonotonicNs() < deadline) {
    Reap();
    for (size_t i = 0; i < daemons_.size(); ++i)
      if (!daemons_[i].alive) {
        Say("syncd of node " + std::to_string(i) + " exited before it was ready");
        return false;
      }
    std::vector<pollfd> fds;
    for (const Daemon& d : daemons_) fds.push_back(pollfd{d.notify_fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      const ssize_t n = recv(daemons_[i].notify_fd, buf, sizeof(buf) - 1, 0);
      if (n <= 0) continue;
      buf[n] = '\0';
      const std::string msg(buf);
      if (msg.find("READY=1") == std::string::npos || daemons_[i].ready) continue;
      daemons_[i].ready = true;
      ++ready;
      const std::string key = "SYNCD_WORKER_CORES=";
      if (size_t at = msg.find(key); at != std::string::npos) {
        const std::string list = msg.substr(at + key.size(), msg.find('\n', at) - at - key.size());
        if (auto cores = ParseCoreList(list); cores.ok()) daemons_[i].worker_cores = *cores;
        // The daemon offers every core but its own; a simulated node keeps its ranks on its own cores.
        if (!daemons_[i].cores.workers.empty()) daemons_[i].worker_cores = daemons_[i].cores.workers;
      }
    }
  }
  if (ready < daemons_.size()) Say("the daemons were not ready within " + std::to_string(opts_.ready_timeout_s) + " s");
  return ready == daemons_.size();
}

void Job::StartWorkers() {
  for (int rank : layout_.launched)
    if (!failed_) StartWorker(rank);
}

void Job::StartWorker(int rank) {
  const int local = layout_.slots_per_node;
  // A rank that shares a core with an engine (its own or, with several daemons on this machine,
  // another node's) sleeps on its doorbell at once: polling there only delays the engine. The
  // daemon decides this for its own cores; only the launcher sees the other daemons' cores.
  CoreSet engine_cores;
  for (const Daemon& d : daemons_) engine_cores.insert(engine_cores.end(), d.cores.daemon.begin(), d.cores.daemon.end());
  std::sort(engine_cores.begin(), engine_cores.end());
  auto shares_engine_core = [&](const CoreSet& cores) {
    if (cores.empty()) return !engine_cores.empty();
    for (uint32_t c : cores)
      if (std::binary_search(engine_cores.begin(), engine_cores.end(), c)) return true;
    return false;
  };
  const int node = rank / local;
  const Daemon& d = daemons_[size_t(node)];
  const pid_t pid = fork();
  if (pid == 0) {
    PrepareChild(blocked_);
    setenv("SYNCD_RUN_DIR", d.run_dir.c_str(), 1);
    setenv("SYNCD_RANK", std::to_string(rank).c_str(), 1);
    setenv("SYNCD_SIZE", std::to_string(layout_.world).c_str(), 1);
    // The ranks none held at launch: until the job's first change, hvd.size() and hvd.rank()
    // count the others only (syncd.torch.basics).
    if (!layout_.vacant.empty()) setenv("SYNCD_VACANT_RANKS", FormatRanks(layout_.vacant).c_str(), 1);
    setenv("SYNCD_LOCAL_RANK", std::to_string(rank % local).c_str(), 1);
    setenv("SYNCD_LOCAL_SIZE", std::to_string(local).c_str(), 1);
    setenv("SYNCD_CROSS_RANK", std::to_string(node).c_str(), 1);
    setenv("SYNCD_CROSS_SIZE", std::to_string(opts_.nodes).c_str(), 1);
    setenv("SYNCD_JOB_ID", job_id_.c_str(), 1);
    // torch.distributed's env:// variables, set as torchrun sets them (over whatever the
    // environment had, which may be an enclosing job's), for dist.init_process_group("syncd").
    // With vacant slots env:// cannot work (its store waits for every slot): they stay unset, so
    // that init_process_group says so at once; init_method="syncd://" takes the live ranks.
    if (layout_.vacant.empty()) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(opts_.ranks).c_str(), 1);
      setenv("MASTER_ADDR", net_ ? net_->Address(0).c_str() : "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(master_port_).c_str(), 1);
    } else {
      for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
    }
    setenv("LOCAL_RANK", std::to_string(rank % local).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(local).c_str(), 1);
    if (opts_.bind_workers && !d.worker_cores.empty()) (void)PinCurrentThread(d.worker_cores);
    const CoreSet& bound = opts_.bind_workers ? d.worker_cores : CoreSet{};
    if (opts_.nodes > 1 && shares_engine_core(bound)) setenv("SYNCD_CLIENT_SPIN_US", "0", 0);
    if (opts_.restart_daemons) setenv("SYNCD_REATTACH_S", std::to_string(kReattachS).c_str(), 0);
    Exec(net_ ? net_->Inside(node, opts_.command) : opts_.command);
  }
  if (pid < 0) {
    Say(std::string("fork failed: ") + strerror(errno));
    failed_ = true;
    result_ = 1;
    return;
  }
  workers_[pid] = rank;
}

void Job::StartNetworkCommand() {
  std::string names, addrs;
  for (int node = 0; node < opts_.nodes; ++node) {
    names += (node ? " " : "") + net_->namespaces()[size_t(node)];
    addrs += (node ? " " : "") + net_->Address(node);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    PrepareChild(blocked_);
    setenv("SYNCRUN_NETNS", names.c_str(), 1);
    setenv("SYNCRUN_NODE_ADDRS", addrs.c_str(), 1);
    setenv("SYNCRUN_DEVICE", EmulatedNetwork::kDevice, 1);
    Exec(opts_.command);
  }
  if (pid < 0) {
    Say(std::string("fork failed: ") + strerror(errno));
    result_ = 1;
    return;
  }
  workers_[pid] = 0;
}

// Reaps whatever has exited and records the first failure.
void Job::Reap() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    bool was_daemon = false;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i].pid != pid) continue;
      was_daemon = true;
      daemons_[i].alive = false;
      if (!workers_.empty() && !failed_) DaemonDied(int(i), status);
    }
    if (was_daemon) continue;
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;
    const int rank = it->second;
    workers_.erase(it);
    // A replacement stopped because the others had finished without it: not a failure.
    if (const auto r = replacements_.find(pid); r != replacements_.end()) {
      const bool stopped = r->second == 0;
      replacements_.erase(r);
      if (stopped) continue;
    }
    const int code = ExitCodeOf(status);
    if (code == 0) ++finished_well_;
    if (code != 0 && !failed_ && Elastic()) {
      // The daemons go on without it; the job fails only if no rank finishes well.
      if (lost_code_ == 0) lost_code_ = code;
      const int left = int(workers_.size()) + finished_well_;
      const Daemon& d = daemons_[size_t(rank / layout_.slots_per_node)];
      const bool respawn = opts_.respawn && d.alive && respawns_[rank] < kMaxRespawns;
      resets_ += respawn ? 2 : 1;  // the loss, and the replacement's arrival
      if (opts_.reset_limit >= 0 && resets_ > opts_.reset_limit) {
        Say("rank " + std::to_string(rank) + " " + Describe(status) + "; " + std::to_string(resets_) +
            " changes of the job's ranks, more than --reset-limit " + std::to_string(opts_.reset_limit) +
            " allows; stopping the job");
        failed_ = true;
        result_ = code;
      } else if (left < opts_.min_np) {
        Say("rank " + std::to_string(rank) + " " + Describe(status) + "; " + std::to_string(left) +
            " ranks are left, fewer than --min-np " + std::to_string(opts_.min_np) + "; stopping the job");
        failed_ = true;
        result_ = code;
      } else if (respawn) {
        // --respawn: a replacement takes its place (it joins the others at their next commit).
        ++respawns_[rank];
        Say("rank " + std::to_string(rank) + " " + Describe(status) + "; the job goes on without it and a replacement "
            "starts (--respawn, " + std::to_string(respawns_[rank]) + " of " + std::to_string(kMaxRespawns) + ")");
        StartWorker(rank);
        for (const auto& [pid, r] : workers_)
          if (r == rank) replacements_[pid] = 1;
      } else {
        Say("rank " + std::to_string(rank) + " " + Describe(status) + "; the job goes on without it (--on-loss " +
            opts_.on_loss + ")");
        if (workers_.empty() && finished_well_ == 0) {
          failed_ = true;
          result_ = lost_code_;
        }
      }
    } else if (code != 0 && !failed_) {
      Say((opts_.network_only ? std::string("the command") : "rank " + std::to_string(rank)) + " " + Describe(status) +
          "; stopping the job");
      failed_ = true;
      result_ = code;
    }
  }
}

// A node's daemon died while ranks run. Elastic: the other nodes go on without it; its ranks fail
// and count as lost ranks, or, with --restart-daemons, wait for it to come back and attach again.
void Job::DaemonDied(int node, int status) {
  const std::string what = "syncd of node " + std::to_string(node) + " " + Describe(status) + " while the job was running";
  if (!Elastic()) {
    Say(what);
    failed_ = true;
    result_ = 1;
    return;
  }
  std::string why_not;  // --restart-daemons: why it is not started again
  if (node == 0) why_not = "node 0's daemon serves the job's rendezvous, which a new daemon cannot take over";
  else if (restarts_[node] >= kMaxRespawns) why_not = "it was started again " + std::to_string(kMaxRespawns) + " times";
  if (!opts_.restart_daemons || !why_not.empty()) {
    Say(what + "; the job goes on without the node (--on-loss " + opts_.on_loss + ")" +
        (opts_.restart_daemons ? "; not started again: " + why_not + "; stopping its ranks" : ""));
    // Its ranks would wait SYNCD_REATTACH_S for a daemon that does not come.
    if (opts_.restart_daemons)
      for (const auto& [pid, rank] : workers_)
        if (rank / layout_.slots_per_node == node) kill(-pid, SIGKILL);
    return;
  }
  resets_ += 2;  // the node's ranks leave, and come back
  if (opts_.reset_limit >= 0 && resets_ > opts_.reset_limit) {
    Say(what + "; " + std::to_string(resets_) + " changes of the job's ranks, more than --reset-limit " +
        std::to_string(opts_.reset_limit) + " allows; stopping the job");
    failed_ = true;
    result_ = 1;
    return;
  }
  ++restarts_[node];
  Say(what + "; starting it again (--restart-daemons, " + std::to_string(restarts_[node]) + " of " +
      std::to_string(kMaxRespawns) + "); the node's ranks attach to it again");
  if (!StartDaemon(node)) Say("syncd of node " + std::to_string(node) + " could not be started again");
}

void Job::Supervise() {
  uint64_t term_sent = 0;
  while (!workers_.empty()) {
    if (failed_ && term_sent == 0) {
      for (auto& [pid, rank] : workers_) kill(-pid, SIGTERM);
      term_sent = abi::MonotonicNs();
    }
    if (term_sent != 0 && abi::MonotonicNs() - term_sent > uint64_t(kTermGraceMs) * 1'000'000ull)
      for (auto& [pid, rank] : workers_) kill(-pid, SIGKILL);
    StopLateReplacements();
    Grow();
    pollfd p{signal_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      signalfd_siginfo si;
      while (read(signal_fd_, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
          if (!failed_) Say(std::string("received ") + strsignal(int(si.ssi_signo)) + "; stopping the job");
          failed_ = true;
          result_ = 128 + int(si.ssi_signo);
        }
      }
    }
    Reap();
  }
}

void Job::Grow() {
  const uint64_t now = abi::MonotonicNs();
  if (opts_.discovery_script.empty() || failed_ || finished_well_ > 0 || now < next_discovery_ns_) return;
  next_discovery_ns_ = now + uint64_t(opts_.discovery_interval_s * 1e9);
  auto offered = RunDiscoveryScript(opts_.discovery_script, kDiscoveryTimeoutMs);
  auto slots = offered.ok() ? ParseDiscoveredHosts(*offered, opts_.nodes, layout_.slots_per_node)
                            : StatusOr<std::vector<int>>(offered.status());
  if (!slots.ok()) {
    if (slots.status().message() != discovery_error_) Say(slots.status().message() + "; the job keeps its ranks");
    discovery_error_ = slots.status().message();
    return;
  }
  discovery_error_.clear();
  std::vector<bool> held(size_t(layout_.world), false);
  for (const auto& [pid, rank] : workers_) held[size_t(rank)] = true;
  for (int rank : SlotsToFill(*slots, held, layout_.slots_per_node)) {
    const int node = rank / layout_.slots_per_node;
    if (!daemons_[size_t(node)].alive) continue;
    if (opts_.reset_limit >= 0 && resets_ + 1 > opts_.reset_limit) {
      Say("host discovery offers more slots, but a new rank would pass --reset-limit " +
          std::to_string(opts_.reset_limit) + "; not starting it");
      return;
    }
    ++resets_;
    Say("host discovery offers node " + std::to_string(node) + " " + std::to_string((*slots)[size_t(node)]) +
        " slots; starting rank " + std::to_string(rank) + " (it joins the others at their next commit)");
    StartWorker(rank);
    for (const auto& [pid, r] : workers_)
      if (r == rank) replacements_[pid] = 1;
  }
}

void Job::StopLateReplacements() {
  bool only_replacements = finished_well_ > 0 && !failed_;
  for (const auto& [pid, rank] : workers_) only_replacements = only_replacements && replacements_.count(pid) > 0;
  if (!only_replacements) {
    replacements_alone_ns_ = 0;
    return;
  }
  const uint64_t now = abi::MonotonicNs();
  if (replacements_alone_ns_ == 0) replacements_alone_ns_ = now;
  if (now - replacements_alone_ns_ < kReplacementGraceNs) return;
  for (const auto& [pid, rank] : workers_) {
    if (!replacements_.count(pid) || replacements_.at(pid) == 0) continue;
    Say("every other rank has finished; stopping the replacement of rank " + std::to_string(rank) +
        " (it had not joined them)");
    kill(-pid, SIGKILL);
    replacements_[pid] = 0;
  }
}

void Job::StopAll() {
  for (auto& [pid, rank] : workers_) kill(-pid, SIGKILL);
  for (Daemon& d : daemons_)
    if (d.alive) kill(d.pid, SIGTERM);
  const uint64_t start = abi::MonotonicNs();
  for (Daemon& d : daemons_) {
    while (d.alive && abi::MonotonicNs() - start < uint64_t(kTermGraceMs) * 1'000'000ull) {
      int status;
      if (waitpid(d.pid, &status, WNOHANG) == d.pid) d.alive = false;
      else usleep(10'000);
    }
    if (d.alive) {
      kill(d.pid, SIGKILL);
      waitpid(d.pid, nullptr, 0);
      d.alive = false;
    }
    if (d.notify_fd >= 0) close(d.notify_fd);
    std::error_code ec;
    std::filesystem::remove(d.run_dir + "/notify.sock", ec);
  }
  net_.reset();  // the namespaces and links go once nothing runs in them
  if (signal_fd_ >= 0) close(signal_fd_);
  std::error_code ec;
  if (own_run_dir_) std::filesystem::remove_all(run_dir_, ec);
}

int Job::Run() {
  if (!opts_.network_only) {
    auto layout = PlanSlots(opts_.nodes, opts_.ranks, opts_.max_np);
    if (!layout.ok()) {
      Say(layout.status().message());
      return 2;
    }
    layout_ = std::move(*layout);
  }
  sigemptyset(&blocked_);
  sigaddset(&blocked_, SIGINT);
  sigaddset(&blocked_, SIGTERM);
  sigaddset(&blocked_, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked_, nullptr);
  signal_fd_ = signalfd(-1, &blocked_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (opts_.link_gbit != 0 && !opts_.netns) {
    Say("--link-gbit needs --netns (the links are the namespaces')");
    return 2;
  }
  if (opts_.netns) {
    auto net = EmulatedNetwork::Create("syncrun-" + std::to_string(getpid()), opts_.nodes, opts_.link_gbit);
    if (!net.ok()) {
      Say(net.status().message());
      return 1;
    }
    net_ = std::move(*net);
  }
  if (opts_.network_only) {
    if (!net_) {
      Say("--network-only needs --netns (it runs a command while the nodes' network stands)");
      return 2;
    }
    StartNetworkCommand();
    Supervise();
    StopAll();
    return result_;
  }

  if (opts_.run_dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/syncrun-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      Say("cannot create a run directory: " + std::string(strerror(errno)));
      return 1;
    }
    run_dir_ = templ;
    own_run_dir_ = true;
  } else {
    run_dir_ = opts_.run_dir;
    std::error_code ec;
    if (std::filesystem::create_directories(run_dir_, ec); ec || chmod(run_dir_.c_str(), 0700) != 0) {
      Say("cannot create run directory " + run_dir_ + ": " + (ec ? ec.message() : strerror(errno)));
      return 1;
    }
  }
  daemons_.resize(size_t(opts_.nodes));
  rendezvous_ = (net_ ? net_->Address(0) : "127.0.0.1") + ":" + std::to_string(FreeTcpPort());
  token_ = RandomToken();
  job_id_ = "0x" + token_.substr(0, 15);  // 60 random bits, never 0
  bool started = true;
  for (int node = 0; node < opts_.nodes && started; ++node) started = StartDaemon(node);
  if (started && WaitReady()) {
    // Picked last, just before rank 0 binds it: a port picked before the daemons start stays
    // unbound for as long as they take, and another job on this machine may take it meanwhile.
    master_port_ = FreeTcpPort();
    StartWorkers();
    Supervise();
  } else {
    result_ = 1;
  }
  StopAll();
  return result_;
}

}  // namespace

int RunJob(const LaunchOptions& opts) {
  Job job(opts);
  return job.Run();
}

}  // namespace syncd
