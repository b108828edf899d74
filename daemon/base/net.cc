#include "daemon/base/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace syncd {
namespace {

// True if `port` (0: any) can be bound on `family`'s wildcard address right now (IPv6 dual
// stack: IPv4 holders conflict too); *bound gets the port bound.
bool TryBindOn(int family, int port, int* bound) {
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage a{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    const int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&a);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&a);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*a4);
  }
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (ok) {
    *bound = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                      : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  }
  close(fd);
  return ok;
}

// On IPv6's wildcard where the kernel has IPv6, else IPv4's.
bool TryBind(int port, int* bound) {
  static const bool has_v6 = [] {
    const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) close(fd);
    return fd >= 0;
  }();
  return TryBindOn(has_v6 ? AF_INET6 : AF_INET, port, bound);
}

}  // namespace

int FreeTcpPort() {
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
