// Descriptors passed with the bytes of a message over a Unix socket (SCM_RIGHTS), both ways: the
// attach reply's segment, node page and wake-up descriptors (daemon to client), and a segment a
// client hands back to a new daemon (abi::kAttachHandBack). The one sender and the one receiver
// for the client library, the attach server and the tests' raw protocol client.
#ifndef SYNCD_PROTO_FD_PASSING_H_
#define SYNCD_PROTO_FD_PASSING_H_

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace syncd::abi {

// The most descriptors one message carries (the attach reply's three, with room).
inline constexpr int kMaxPassedFds = 4;

// sendmsg(2) of [buf, buf+n) with fds[0..nfds) attached (0 <= nfds <= kMaxPassedFds); what sendmsg
// returns (EINTR retried, never SIGPIPE). The descriptors travel with the bytes this call sends;
// the caller sends any rest as usual.
inline ssize_t SendWithFds(int sock, const void* buf, size_t n, const int* fds, int nfds) {
  iovec iov{const_cast<void*>(buf), n};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    if (nfds > kMaxPassedFds) {
      errno = EINVAL;
      return -1;
    }
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(size_t(nfds) * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(size_t(nfds) * sizeof(int));
    memcpy(CMSG_DATA(c), fds, size_t(nfds) * sizeof(int));
  }
  ssize_t w;
  do w = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  return w;
}

inline ssize_t SendWithFd(int sock, const void* buf, size_t n, int pass_fd) {
  return SendWithFds(sock, buf, n, &pass_fd, 1);
}

// recvmsg(2) into [buf, buf+n) with `flags` (MSG_WAITALL, MSG_DONTWAIT; MSG_CMSG_CLOEXEC is always
// added); what recvmsg returns (EINTR retried). The descriptors that came with these bytes fill
// fds[0..max) in order, the slots left -1; any beyond `max` are closed, so none leaks whatever the
// peer sends (the kernel closes those beyond kMaxPassedFds).
inline ssize_t RecvWithFds(int sock, void* buf, size_t n, int flags, int* fds, int max) {
  for (int i = 0; i < max; ++i) fds[i] = -1;
  iovec iov{buf, n};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedFds * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do r = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  if (r < 0) return r;
  int got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got < max) fds[got++] = passed;
      else close(passed);
    }
  }
  return r;
}

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_FD_PASSING_H_
