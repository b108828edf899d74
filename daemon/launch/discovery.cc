#include "daemon/launch/discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "daemon/base/affinity.h"
#include "daemon/launch/exec.h"
#include "proto/doorbell.h"

namespace syncd {

StatusOr<SlotLayout> PlanSlots(int nodes, int ranks, int max_np) {
  const std::string given = std::to_string(ranks) + " ranks over " + std::to_string(nodes) + " nodes";
  // With --max-np a node may start without a rank: it joins once the discovery script offers it.
  if (nodes < 1 || ranks < 1 || (ranks < nodes && max_np <= 0))
    return InvalidArgument(given + ": every node needs a rank (or give --max-np: nodes without one join later)");
  SlotLayout l;
  l.world = max_np > 0 ? max_np : ranks;
  if (max_np > 0 && max_np < ranks)
    return InvalidArgument("--max-np " + std::to_string(max_np) + " is below -n " + std::to_string(ranks));
  if (l.world % nodes != 0)
    return InvalidArgument(max_np > 0 ? "--max-np " + std::to_string(max_np) + " slots do not spread evenly over " +
                                            std::to_string(nodes) + " nodes (make it a multiple of the nodes)"
                                      : given + " do not spread evenly (ranks must be a multiple of nodes)");
  l.slots_per_node = l.world / nodes;
  for (int node = 0; node < nodes; ++node) {
    const int here = ranks / nodes + (node < ranks % nodes ? 1 : 0);
    for (int i = 0; i < l.slots_per_node; ++i)
      (i < here ? l.launched : l.vacant).push_back(node * l.slots_per_node + i);
  }
  return l;
}

std::string FormatRanks(const std::vector<int>& ranks) {
  return FormatNumberList(std::vector<uint32_t>(ranks.begin(), ranks.end()));
}

StatusOr<std::vector<int>> ParseDiscoveredHosts(const std::string& output, int nodes, int slots_per_node) {
  std::vector<int> slots(size_t(std::max(nodes, 0)), 0);
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const std::string entry = line.substr(b, e - b + 1);
    const size_t colon = entry.find(':');
    std::string host = entry.substr(0, colon);
    if (host.rfind("node", 0) == 0) host = host.substr(4);
    char* end = nullptr;
    const long node = host.empty() ? -1 : strtol(host.c_str(), &end, 10);
    if (node < 0 || node >= nodes || *end != '\0')
      return InvalidArgument("host discovery: '" + entry + "' names no node of this job (node0 .. node" +
                             std::to_string(nodes - 1) + ")");
    long count = slots_per_node;
    if (colon != std::string::npos) {
      const std::string text = entry.substr(colon + 1);
      count = text.empty() ? -1 : strtol(text.c_str(), &end, 10);
      if (count < 0 || *end != '\0') return InvalidArgument("host discovery: '" + entry + "': bad slot count");
    }
    slots[size_t(node)] = int(std::min<long>(count, slots_per_node));
  }
  return slots;
}

std::vector<int> SlotsToFill(const std::vector<int>& offered, const std::vector<bool>& held, int slots_per_node) {
  std::vector<int> fill;
  for (size_t node = 0; node < offered.size(); ++node) {
    const size_t first = node * size_t(slots_per_node), end = std::min(first + size_t(slots_per_node), held.size());
    if (first >= end) break;
    int here = int(std::count(held.begin() + ptrdiff_t(first), held.begin() + ptrdiff_t(end), true));
    for (size_t rank = first; rank < end && here < offered[node]; ++rank)
      if (!held[rank]) {
        fill.push_back(int(rank));
        ++here;
      }
  }
  return fill;
}

StatusOr<std::string> RunDiscoveryScript(const std::string& script, int timeout_ms) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status(SYNCD_ERR_INTERNAL, std::string("pipe: ") + strerror(errno));
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(fds[1], STDOUT_FILENO);
    ExecOrExit({"/bin/sh", "-c", script}, "syncrun: host discovery: ");
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return Status(SYNCD_ERR_INTERNAL, std::string("fork: ") + strerror(errno));
  }
  std::string out;
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(timeout_ms) * 1'000'000;
  bool timed_out = false;
  for (;;) {
    const uint64_t now = abi::MonotonicNs();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, int((deadline - now) / 1'000'000) + 1) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    char limit[32];
    snprintf(limit, sizeof(limit), "%g s", timeout_ms / 1e3);
    return Status(SYNCD_ERR_TIMEOUT, "host discovery: '" + script + "' took longer than " + limit);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status(SYNCD_ERR_INTERNAL, "host discovery: '" + script + "' " +
                                          (WIFEXITED(status) ? "exited with code " + std::to_string(WEXITSTATUS(status))
                                                             : std::string("was killed")));
  return out;
}

}  // namespace syncd
