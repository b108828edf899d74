#include "daemon/base/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace syncd {
namespace {

// True if `port` (0: any) can be bound on 127.0.0.1 right now; *bound gets the port bound.
bool TryBind(int port, int* bound) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (ok) *bound = ntohs(a.sin_port);
  close(fd);
  return ok;
}

}  // namespace

int FreeLoopbackPort() {
  // The kernel hands out ports from the ephemeral range to every outgoing connection (UCX opens
  // many), so a port picked there and released can be taken again before our daemon binds it.
  // Below that range only explicit binds compete; pick one at random there.
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  const int lo = 10000;
  const int hi = low - 1;
  if (hi - lo > 1000) {
    std::random_device rd;
    std::mt19937 gen(rd());
    std::uniform_int_distribution<int> pick(lo, hi);
    for (int tries = 0; tries < 64; ++tries) {
      int bound = 0;
      if (const int port = pick(gen); TryBind(port, &bound)) return bound;
    }
  }
  int bound = 0;
  return TryBind(0, &bound) ? bound : 0;
}

}  // namespace syncd
