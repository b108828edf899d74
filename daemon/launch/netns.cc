#include "daemon/launch/netns.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "daemon/launch/exec.h"

namespace syncd {
namespace {

// Runs `argv` (ip or tc) and waits; its stderr, when it fails, becomes the error.
Status RunTool(const std::vector<std::string>& argv) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return Status(SYNCD_ERR_SYSTEM, std::string("pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(err[0]);
    close(err[1]);
    return Status(SYNCD_ERR_SYSTEM, std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    dup2(err[1], STDERR_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    ExecOrExit(argv, "");
  }
  close(err[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(err[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) text.append(buf, size_t(n));
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return Status(SYNCD_ERR_SYSTEM, "`" + cmd + "` failed: " + (text.empty() ? "exit status " + std::to_string(status) : text));
}

// Removes the namespaces (quietly: some may not exist yet, or any more).
void RemoveAll(const std::vector<std::string>& names) {
  for (const std::string& name : names) (void)RunTool({"ip", "netns", "del", name});
}

// The reaper's life: wait for syncrun's end of the pipe to close, however syncrun ends, then
// remove what it made. Its own session, so Ctrl-C at the terminal reaches syncrun only.
[[noreturn]] void Reap(int pipe_read, const std::vector<std::string>& names) {
  setsid();
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  char c;
  for (;;) {
    const ssize_t r = read(pipe_read, &c, 1);
    if (r == 0 || (r < 0 && errno != EINTR)) break;
  }
  RemoveAll(names);
  _exit(0);
}

}  // namespace

StatusOr<std::unique_ptr<EmulatedNetwork>> EmulatedNetwork::Create(const std::string& prefix, int nodes, double link_gbit) {
  if (nodes < 1 || nodes > 250) return Status(SYNCD_ERR_INVALID, "--netns: 1 to 250 nodes");
  if (link_gbit < 0 || !std::isfinite(link_gbit)) return Status(SYNCD_ERR_INVALID, "--link-gbit must be 0 or more");
  if (geteuid() != 0)
    return Status(SYNCD_ERR_REFUSED, "--netns needs root: it makes a network namespace per node (ip netns) and "
                                     "limits links with tc");
  std::unique_ptr<EmulatedNetwork> net(new EmulatedNetwork());
  for (int i = 0; i < nodes; ++i) net->names_.push_back(prefix + "-n" + std::to_string(i));
  net->names_.push_back(prefix + "-sw");
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return Status(SYNCD_ERR_SYSTEM, std::string("pipe: ") + strerror(errno));
  net->reaper_ = fork();
  if (net->reaper_ < 0) return Status(SYNCD_ERR_SYSTEM, std::string("fork: ") + strerror(errno));
  if (net->reaper_ == 0) {
    close(p[1]);
    Reap(p[0], net->names_);
  }
  close(p[0]);
  net->reaper_pipe_ = p[1];
  if (Status st = net->Build(nodes, link_gbit); !st.ok()) return st;  // the destructor removes what was made
  return net;
}

Status EmulatedNetwork::Build(int nodes, double link_gbit) {
  const std::string& sw = names_.back();
  SYNCD_RETURN_IF_ERROR(RunTool({"ip", "netns", "add", sw}));
  SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", sw, "link", "add", "br0", "type", "bridge"}));
  SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", sw, "link", "set", "br0", "up"}));
  // A token bucket per direction of each link: 1 ms of traffic, and never less than a
  // segmentation-offloaded packet (64 KiB) or tbf drops those.
  const uint64_t rate_bits = uint64_t(link_gbit * 1e9);
  const uint64_t burst = std::max<uint64_t>(rate_bits / 8 / 1000, 128 << 10);
  auto limit = [&](const std::string& ns, const std::string& dev) {
    return RunTool({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", std::to_string(rate_bits) + "bit",
                    "burst", std::to_string(burst), "latency", "10ms"});
  };
  for (int i = 0; i < nodes; ++i) {
    const std::string& ns = names_[size_t(i)];
    const std::string port = "p" + std::to_string(i);
    SYNCD_RETURN_IF_ERROR(RunTool({"ip", "netns", "add", ns}));
    SYNCD_RETURN_IF_ERROR(
        RunTool({"ip", "link", "add", kDevice, "netns", ns, "type", "veth", "peer", "name", port, "netns", sw}));
    SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", sw, "link", "set", port, "master", "br0", "up"}));
    SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", ns, "addr", "add", Address(i) + "/24", "dev", kDevice}));
    SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", ns, "link", "set", kDevice, "up"}));
    SYNCD_RETURN_IF_ERROR(RunTool({"ip", "-n", ns, "link", "set", "lo", "up"}));
    if (rate_bits > 0) {
      SYNCD_RETURN_IF_ERROR(limit(ns, kDevice));
      SYNCD_RETURN_IF_ERROR(limit(sw, port));
    }
  }
  return Status::Ok();
}

EmulatedNetwork::~EmulatedNetwork() { Remove(); }

void EmulatedNetwork::Remove() {
  RemoveAll(names_);
  if (reaper_pipe_ >= 0) close(reaper_pipe_);
  reaper_pipe_ = -1;
  if (reaper_ > 0)
    while (waitpid(reaper_, nullptr, 0) < 0 && errno == EINTR) {
    }
  reaper_ = -1;
}

std::string EmulatedNetwork::Address(int node) const { return "10.77.0." + std::to_string(node + 1); }

std::vector<std::string> EmulatedNetwork::Inside(int node, const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", names_.at(size_t(node))};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace syncd
