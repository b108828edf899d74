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
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "daemon/base/affinity.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

constexpr int kTermGraceMs = 3000;

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

[[noreturn]] void Exec(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fprintf(stderr, "syncrun: cannot run %s: %s\n", args[0], strerror(errno));
  _exit(127);
}

class Job {
 public:
  explicit Job(const LaunchOptions& o) : opts_(o) {}
  int Run();

 private:
  bool StartDaemon();
  bool WaitReady();
  void StartWorkers();
  void Supervise();
  void Terminate(pid_t pid, bool group);
  void StopAll();
  void Reap();

  const LaunchOptions& opts_;
  std::string run_dir_;
  bool own_run_dir_ = false;
  int notify_fd_ = -1, signal_fd_ = -1;
  sigset_t blocked_{};
  pid_t daemon_ = -1;
  bool daemon_alive_ = false;
  std::map<pid_t, int> workers_;  // pid -> rank
  CoreSet worker_cores_;
  int result_ = 0;
  bool failed_ = false;
};

bool Job::StartDaemon() {
  const std::string notify_path = run_dir_ + "/notify.sock";
  notify_fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", notify_path.c_str());
  if (notify_fd_ < 0 || bind(notify_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Say("cannot create " + notify_path + ": " + strerror(errno));
    return false;
  }
  std::vector<std::string> argv = {opts_.syncd_path, "--run-dir", run_dir_, "--local-size",
                                   std::to_string(opts_.ranks)};
  argv.insert(argv.end(), opts_.daemon_args.begin(), opts_.daemon_args.end());
  daemon_ = fork();
  if (daemon_ == 0) {
    PrepareChild(blocked_);
    setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    Exec(argv);
  }
  daemon_alive_ = daemon_ > 0;
  return daemon_alive_;
}

bool Job::WaitReady() {
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(opts_.ready_timeout_s) * 1'000'000'000ull;
  char buf[1024];
  while (abi::MonotonicNs() < deadline) {
    int status;
    if (waitpid(daemon_, &status, WNOHANG) == daemon_) {
      daemon_alive_ = false;
      Say("syncd " + Describe(status) + " before it was ready");
      return false;
    }
    pollfd p{notify_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(notify_fd_, buf, sizeof(buf) - 1, 0);
    if (n <= 0) continue;
    buf[n] = '\0';
    const std::string msg(buf);
    if (msg.find("READY=1") == std::string::npos) continue;
    const std::string key = "SYNCD_WORKER_CORES=";
    if (size_t at = msg.find(key); at != std::string::npos) {
      const std::string list = msg.substr(at + key.size(), msg.find('\n', at) - at - key.size());
      if (auto cores = ParseCoreList(list); cores.ok()) worker_cores_ = *cores;
    }
    return true;
  }
  Say("syncd was not ready within " + std::to_string(opts_.ready_timeout_s) + " s");
  return false;
}

void Job::StartWorkers() {
  for (int rank = 0; rank < opts_.ranks; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      PrepareChild(blocked_);
      setenv("SYNCD_RUN_DIR", run_dir_.c_str(), 1);
      setenv("SYNCD_RANK", std::to_string(rank).c_str(), 1);
      setenv("SYNCD_SIZE", std::to_string(opts_.ranks).c_str(), 1);
      setenv("SYNCD_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("SYNCD_LOCAL_SIZE", std::to_string(opts_.ranks).c_str(), 1);
      setenv("SYNCD_CROSS_RANK", "0", 1);
      setenv("SYNCD_CROSS_SIZE", "1", 1);
      if (opts_.bind_workers && !worker_cores_.empty()) (void)PinCurrentThread(worker_cores_);
      Exec(opts_.command);
    }
    if (pid < 0) {
      Say(std::string("fork failed: ") + strerror(errno));
      failed_ = true;
      result_ = 1;
      return;
    }
    workers_[pid] = rank;
  }
}

void Job::Terminate(pid_t pid, bool group) {
  if (pid > 0) kill(group ? -pid : pid, SIGTERM);
}

// Reaps whatever has exited and records the first failure.
void Job::Reap() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (pid == daemon_) {
      daemon_alive_ = false;
      if (!workers_.empty() && !failed_) {
        Say("syncd " + Describe(status) + " while the job was running");
        failed_ = true;
        result_ = 1;
      }
      continue;
    }
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;
    const int rank = it->second;
    workers_.erase(it);
    const int code = ExitCodeOf(status);
    if (code != 0 && !failed_) {
      Say("rank " + std::to_string(rank) + " " + Describe(status) + "; stopping the job");
      failed_ = true;
      result_ = code;
    }
  }
}

void Job::Supervise() {
  uint64_t term_sent = 0;
  while (!workers_.empty()) {
    if (failed_ && term_sent == 0) {
      for (auto& [pid, rank] : workers_) Terminate(pid, true);
      term_sent = abi::MonotonicNs();
    }
    if (term_sent != 0 && abi::MonotonicNs() - term_sent > uint64_t(kTermGraceMs) * 1'000'000ull)
      for (auto& [pid, rank] : workers_) kill(-pid, SIGKILL);
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

void Job::StopAll() {
  for (auto& [pid, rank] : workers_) kill(-pid, SIGKILL);
  if (daemon_alive_) {
    Terminate(daemon_, false);
    const uint64_t start = abi::MonotonicNs();
    while (daemon_alive_ && abi::MonotonicNs() - start < uint64_t(kTermGraceMs) * 1'000'000ull) {
      int status;
      if (waitpid(daemon_, &status, WNOHANG) == daemon_) daemon_alive_ = false;
      else usleep(10'000);
    }
    if (daemon_alive_) {
      kill(daemon_, SIGKILL);
      waitpid(daemon_, nullptr, 0);
    }
  }
  if (notify_fd_ >= 0) close(notify_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
  std::error_code ec;
  if (own_run_dir_) std::filesystem::remove_all(run_dir_, ec);
  else std::filesystem::remove(run_dir_ + "/notify.sock", ec);
}

int Job::Run() {
  sigemptyset(&blocked_);
  sigaddset(&blocked_, SIGINT);
  sigaddset(&blocked_, SIGTERM);
  sigaddset(&blocked_, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked_, nullptr);
  signal_fd_ = signalfd(-1, &blocked_, SFD_CLOEXEC | SFD_NONBLOCK);

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
  if (StartDaemon() && WaitReady()) {
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
