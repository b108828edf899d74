#include "tests/integration/harness.h"

#include "daemon/base/net.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace syncd::testing {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string BinDir() {
  // SYNCD_BIN_DIR: binaries copied elsewhere (a GPU machine) than where they were built.
  const char* dir = getenv("SYNCD_BIN_DIR");
  return dir && *dir ? dir : SYNCD_TEST_BIN_DIR;
}

namespace {
uint64_t g_job_id = 0;
uint64_t g_jobs = 0;
}  // namespace
uint64_t CurrentJobId() { return g_job_id; }
void NextJob() { g_job_id = (uint64_t(getpid()) << 20) | ++g_jobs; }

bool Contains(const std::string& h, const std::string& n) { return h.find(n) != std::string::npos; }

void ExpectAllSucceeded(const std::vector<int>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r] != -1 && WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << "rank " << r << " status " << statuses[r];
}

double ExpectDaemonServes(const Daemon& d, int n) {
  const double t0 = NowS();
  auto st = RunRanks(d.run_dir(), n, [](syncd_client* c, int rank, int) {
    int32_t v = rank + 1;
    int64_t shape = 1;
    syncd_tensor t{"alive", &v, SYNCD_INT32, 1, &shape, 0};
    syncd_handle h;
    CHILD_CHECK(syncd_allreduce_async(c, &t, SYNCD_SUM, 1, 1, &h) == SYNCD_OK, "%s", syncd_last_error());
    CHILD_CHECK(syncd_wait(c, h, 10'000) == SYNCD_OK, "%s", syncd_last_error());
    return 0;
  });
  ExpectAllSucceeded(st);
  return NowS() - t0;
}

uint64_t JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return UINT64_MAX;
  size_t p = at + key.size() + 3;
  while (p < json.size() && (json[p] == ' ' || json[p] == '"')) ++p;
  return std::stoull(json.substr(p));
}

uint64_t KindOps(const std::string& json, const std::string& kind) {
  const size_t at = json.find("\"kind\":\"" + kind + "\"");
  if (at == std::string::npos) return UINT64_MAX;
  const size_t end = json.find('}', at);
  return JsonNumber(json.substr(at, end == std::string::npos ? std::string::npos : end - at), "ops");
}

double JsonDouble(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  size_t p = at + key.size() + 3;
  while (p < json.size() && (json[p] == ' ' || json[p] == '"')) ++p;
  return std::stod(json.substr(p));
}

namespace {

// Forks one process per rank: it attaches to run_dirs[rank] with the given identity, runs body,
// detaches and exits with body's result. Returns the exit statuses in rank order.
std::vector<int> SpawnRanks(const std::vector<std::string>& run_dirs, int local_size, const RankBody& body,
                            int timeout_ms) {
  NextJob();
  const int size = int(run_dirs.size());
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pids.push_back(Spawn([&, r] {
      syncd_client* c = AttachAs(run_dirs[size_t(r)], r, size, r % local_size, local_size);
      if (c == nullptr) return 100;
      int rc = body(c, r, size);
      syncd_shutdown(c);
      return rc;
    }));
  }
  std::vector<int> statuses;
  const int64_t end = NowMs() + timeout_ms;
  for (pid_t p : pids) statuses.push_back(WaitChild(p, int(std::max<int64_t>(1, end - NowMs()))));
  return statuses;
}

}  // namespace

Daemon::Daemon(int local_size, std::vector<std::string> args, bool wait_ready) {
  char templ[] = "/tmp/syncd-test-XXXXXX";
  run_dir_ = mkdtemp(templ);
  const std::string notify = run_dir_ + "/notify.sock";
  notify_fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", notify.c_str());
  EXPECT_EQ(bind(notify_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  argv_ = {BinDir() + "/syncd", "--run-dir", run_dir_, "--local-size", std::to_string(local_size),
           "--log-level", "warn", "--cores", "none"};
  argv_.insert(argv_.end(), args.begin(), args.end());
  log_path_ = run_dir_ + ".log";
  Start(notify, O_TRUNC);
  if (wait_ready) {
    EXPECT_TRUE(WaitReady(30'000)) << "syncd did not become ready in " << run_dir_;
  }
}

void Daemon::Start(const std::string& notify, int log_flags) {
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setenv("NOTIFY_SOCKET", notify.c_str(), 1);
    const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | log_flags | O_CLOEXEC, 0600);
    if (log >= 0) dup2(log, STDERR_FILENO);
    std::vector<char*> a;
    for (auto& s : argv_) a.push_back(s.data());
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
}

bool Daemon::Restart(int timeout_ms) {
  Kill(SIGKILL);
  if (Wait(5000) == -1) return false;
  Start(run_dir_ + "/notify.sock", O_APPEND);
  return WaitReady(timeout_ms);
}

bool Daemon::WaitReady(int timeout_ms) {
  pollfd p{notify_fd_, POLLIN, 0};
  char buf[512] = {};
  for (int64_t end = NowMs() + timeout_ms; NowMs() < end;) {
    if (poll(&p, 1, 100) > 0 && recv(notify_fd_, buf, sizeof(buf) - 1, 0) > 0 && Contains(buf, "READY=1")) return true;
    int status;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
  }
  return false;
}

Daemon::~Daemon() {
  if (notify_fd_ >= 0) close(notify_fd_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    if (Wait(5000) == -1) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Every request completes exactly once (daemon/core/request_ledger.h), whatever the test checks:
  // a second completion, refused and logged, fails it.
  const std::string log = Log();
  if (log.find("completed a second time") != std::string::npos)
    ADD_FAILURE() << "syncd (" << run_dir_ << ") refused a second completion of a request";
  if (::testing::Test::HasFailure()) fprintf(stderr, "---- syncd log (%s) ----\n%s", run_dir_.c_str(), log.c_str());
  std::error_code ec;
  std::filesystem::remove_all(run_dir_, ec);
  std::filesystem::remove(log_path_, ec);
}

std::string Daemon::Log() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void Daemon::Kill(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int Daemon::Wait(int timeout_ms) {
  if (pid_ <= 0) return -1;
  int status = WaitChild(pid_, timeout_ms);
  if (status != -1) pid_ = -1;
  return status;
}

std::string Daemon::StatusJson() const { return SyncctlStatusJson(run_dir_); }

std::string SyncctlStatusJson(const std::string& run_dir) { return SyncctlStatus(run_dir, " --json"); }

std::string SyncctlStatus(const std::string& run_dir, const std::string& flags) {
  const std::string cmd = BinDir() + "/syncctl --run-dir " + run_dir + " status" + flags;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "";
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  return pclose(f) == 0 ? out : "";
}

long long PlanGroupsRun(const std::string& table) {
  static const std::regex kGroupsRun("([0-9]+) groups run");
  std::smatch m;
  return std::regex_search(table, m, kGroupsRun) ? std::stoll(m[1].str()) : -1;
}

syncd_client* Attach(const std::string& run_dir, int rank, int size) {
  return AttachAs(run_dir, rank, size, rank, size);
}

syncd_client* AttachAs(const std::string& run_dir, int rank, int size, int local_rank, int local_size) {
  syncd_client* c = AttachToJob(run_dir, CurrentJobId(), rank, size, local_rank, local_size);
  if (c == nullptr) fprintf(stderr, "[rank %d] attach failed: %s\n", rank, syncd_last_error());
  return c;
}

syncd_client* AttachToJob(const std::string& run_dir, uint64_t job, int rank, int size, int local_rank, int local_size) {
  syncd_init_options o;
  syncd_init_options_default(&o);
  o.run_dir = run_dir.c_str();
  o.rank = rank;
  o.size = size;
  o.local_rank = local_rank;
  o.local_size = local_size;
  o.attach_timeout_ms = 5000;
  o.job_id = job;
  syncd_client* c = nullptr;
  return syncd_init(&o, &c) == SYNCD_OK ? c : nullptr;
}

pid_t Spawn(const std::function<int()>& fn) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int rc = fn();
    fflush(stderr);
    _exit(rc);
  }
  return pid;
}

int WaitChild(pid_t pid, int timeout_ms) {
  int status = 0;
  for (int64_t end = NowMs() + timeout_ms; NowMs() < end;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

std::vector<int> RunRanks(const std::string& run_dir, int size, const RankBody& body, int timeout_ms) {
  return SpawnRanks(std::vector<std::string>(size_t(size), run_dir), size, body, timeout_ms);
}

}  // namespace syncd::testing

namespace syncd::testing {

int FreePort() { return FreeTcpPort(); }

SharedFlag::SharedFlag()
    : page_(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) {
  if (page_ == MAP_FAILED) abort();
  new (page_) std::atomic<int>(0);
}
SharedFlag::~SharedFlag() { munmap(page_, 4096); }
void SharedFlag::Set() { static_cast<std::atomic<int>*>(page_)->store(1); }
bool SharedFlag::Wait(int timeout_ms) const {
  const double give_up = NowS() + timeout_ms / 1000.0;
  while (static_cast<std::atomic<int>*>(page_)->load() == 0) {
    if (NowS() > give_up) return false;
    usleep(5'000);
  }
  return true;
}

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Cluster::Cluster(int nodes, int local_size, std::vector<std::string> args) : local_size_(local_size) {
  rendezvous_ = "127.0.0.1:" + std::to_string(FreePort());
  for (int i = 0; i < nodes; ++i) {
    std::vector<std::string> a = {"--nodes", std::to_string(nodes), "--node-rank", std::to_string(i),
                                  "--rendezvous", rendezvous_, "--job-token", "test-token-" + rendezvous_, "--join-timeout", "20"};
    a.insert(a.end(), args.begin(), args.end());
    daemons_.push_back(std::make_unique<Daemon>(local_size, a, false));
  }
  for (auto& d : daemons_) EXPECT_TRUE(d->WaitReady(30'000)) << "daemon in " << d->run_dir() << " not ready";
}

std::vector<int> RunClusterRanks(Cluster& cluster, const RankBody& body, int timeout_ms) {
  std::vector<std::string> dirs;
  for (int r = 0; r < cluster.nodes() * cluster.local_size(); ++r) dirs.push_back(cluster.node(r / cluster.local_size()).run_dir());
  return SpawnRanks(dirs, cluster.local_size(), body, timeout_ms);
}

// GET http://127.0.0.1:port/path over a plain socket (HTTP/1.0: the server closes when done):
// the status line and the body, or "" when nothing answers.
std::pair<std::string, std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, req.data(), req.size()) == ssize_t(req.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) reply.append(buf, size_t(n));
    }
  }
  close(fd);
  const size_t head = reply.find("\r\n\r\n");
  if (head == std::string::npos) return {};
  return {reply.substr(0, reply.find("\r\n")), reply.substr(head + 4)};
}

// The value of the sample that starts with `prefix` (name and leading labels) and has `suffix`
// right before its value, or -1.
double Sample(const std::string& page, const std::string& prefix, const std::string& suffix) {
  size_t at = 0;
  while ((at = page.find(prefix, at)) != std::string::npos) {
    const size_t end = page.find('\n', at);
    const std::string line = page.substr(at, end - at);
    const size_t brace = line.rfind("} ");
    if (brace != std::string::npos && line.compare(0, prefix.size(), prefix) == 0 &&
        brace >= suffix.size() && line.compare(brace - suffix.size(), suffix.size(), suffix) == 0)
      return std::stod(line.substr(brace + 2));
    at = end;
  }
  return -1;
}

std::string MetricsPage(const std::string& run_dir) {
  std::string url;
  std::ifstream(run_dir + "/metrics.url") >> url;
  const std::string prefix = "http://127.0.0.1:";
  if (url.rfind(prefix, 0) != 0) return "";
  return HttpGet(std::stoi(url.substr(prefix.size())), "/metrics").second;
}

}  // namespace syncd::testing
