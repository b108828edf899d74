// Watches the daemons of this job that run on the same host through pidfds: a process that
// dies makes its pidfd readable at once. This lets same-host peers use UCX's shared-memory
// transports, which cannot report a lost peer themselves.
//
// Only peers that really are this program are watched: the pid must be alive, in our pid
// namespace, and its /proc/<pid>/exe must be our own executable. Engine thread only.
#ifndef SYNCD_DAEMON_TRANSPORT_PROCESS_WATCH_H_
#define SYNCD_DAEMON_TRANSPORT_PROCESS_WATCH_H_

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace syncd {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // Starts watching `pid` as node `node`; false when it cannot be watched (not on this host,
  // not our program, no pidfd support): use the transport's own failure detection then.
  bool Watch(uint32_t node, pid_t pid);
  // Stops watching node `node` (a daemon that came back is watched anew under its new pid).
  void Forget(uint32_t node);
  // A watched node whose process has exited and was not reported before, if any (does not block).
  std::optional<uint32_t> Exited();
  // Appends the pidfds of the processes not reported yet (readable once one exits), to sleep on.
  void AppendFds(std::vector<pollfd>* fds) const;
  pid_t pid_of(uint32_t node) const;

 private:
  struct Entry {
    uint32_t node;
    pid_t pid;
    int fd;
    bool reported = false;
  };
  std::vector<Entry> entries_;
  // Exited's scratch, kept: it runs once a millisecond on the engine thread.
  std::vector<pollfd> fds_;
  std::vector<Entry*> watched_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_PROCESS_WATCH_H_
