#include "daemon/transport/process_watch.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <string>

namespace syncd {
namespace {

std::string ExeOf(const std::string& proc) {
  char buf[PATH_MAX];
  const ssize_t n = readlink((proc + "/exe").c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

}  // namespace

ProcessWatch::~ProcessWatch() {
  for (const Entry& e : entries_) close(e.fd);
}

bool ProcessWatch::Watch(uint32_t node, pid_t pid) {
  if (pid <= 0) return false;
  const std::string self = ExeOf("/proc/self");
  if (self.empty() || ExeOf("/proc/" + std::to_string(pid)) != self) return false;
  const int fd = int(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  entries_.push_back(Entry{node, pid, fd});
  return true;
}

void ProcessWatch::Forget(uint32_t node) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->node != node) {
      ++it;
      continue;
    }
    close(it->fd);
    it = entries_.erase(it);
  }
}

std::optional<uint32_t> ProcessWatch::Exited() {
  std::vector<pollfd>& fds = fds_;
  std::vector<Entry*>& watched = watched_;
  fds.clear();
  watched.clear();
  for (Entry& e : entries_)
    if (!e.reported) {
      fds.push_back(pollfd{e.fd, POLLIN, 0});
      watched.push_back(&e);
    }
  if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return std::nullopt;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      watched[i]->reported = true;  // once: the next call reports the next process to exit
      return watched[i]->node;
    }
  return std::nullopt;
}

void ProcessWatch::AppendFds(std::vector<pollfd>* fds) const {
  for (const Entry& e : entries_)
    if (!e.reported) fds->push_back(pollfd{e.fd, POLLIN, 0});
}

pid_t ProcessWatch::pid_of(uint32_t node) const {
  for (const Entry& e : entries_)
    if (e.node == node) return e.pid;
  return 0;
}

}  // namespace syncd
