#include "daemon/control/notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace syncd {

void NotifyService(const std::string& state) {
  const char* path = getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sendto(fd, state.data(), state.size(), MSG_NOSIGNAL | MSG_DONTWAIT,  // never blocks the daemon
         reinterpret_cast<sockaddr*>(&addr), socklen_t(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

uint64_t WatchdogIntervalUs() {
  const char* usec = getenv("WATCHDOG_USEC");
  if (usec == nullptr || *usec == '\0') return 0;
  if (const char* pid = getenv("WATCHDOG_PID"); pid != nullptr && *pid != '\0' && strtol(pid, nullptr, 10) != getpid())
    return 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(usec, &end, 10);
  return *end == '\0' ? uint64_t(v) : 0;
}

}  // namespace syncd
