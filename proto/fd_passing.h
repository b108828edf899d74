// One descriptor passed with the first bytes of a message over a Unix socket (SCM_RIGHTS): how a
// client hands its segment back to a new daemon (abi::kAttachHandBack). Shared by the client
// library and the tests' raw protocol client.
#ifndef SYNCD_PROTO_FD_PASSING_H_
#define SYNCD_PROTO_FD_PASSING_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>

namespace syncd::abi {

// sendmsg(2) of [buf, buf+n) with `pass_fd` attached; what sendmsg returns (EINTR retried). The
// descriptor travels with the bytes this call sends; the caller sends any rest as usual.
inline ssize_t SendWithFd(int sock, const void* buf, size_t n, int pass_fd) {
  iovec iov{const_cast<void*>(buf), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  ssize_t w;
  do w = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  return w;
}

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_FD_PASSING_H_
