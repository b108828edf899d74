#include "daemon/control/attach_server.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <thread>

#include "daemon/base/affinity.h"

namespace syncd {
namespace {

constexpr uint64_t kWakeTag = UINT64_MAX;
constexpr uint64_t kListenTag = UINT64_MAX - 1;
constexpr uint32_t kClientSpinUs = 50;

// A client whose cores are apart from the engine's polls briefly before sleeping: the wake-up
// then costs nothing. One that shares a core with the engine (unpinned ranks, several daemons
// on one host, --cores none) sleeps at once: its polling would only delay the engine it waits for.
uint32_t CoordModeOf(const std::string& coord) {
  for (uint32_t m = 0; m < std::size(abi::kCoordModeNames); ++m)
    if (coord == abi::kCoordModeNames[m]) return m;
  return uint32_t(abi::CoordMode::kNegotiate);
}

uint32_t ClientSpinUs(int pid) {
  const CoreSet mine = AllowedCores(), theirs = AllowedCores(pid);
  std::vector<uint32_t> shared;
  std::set_intersection(mine.begin(), mine.end(), theirs.begin(), theirs.end(), std::back_inserter(shared));
  return shared.empty() && !theirs.empty() ? kClientSpinUs : 0;
}

bool SendReply(int fd, const abi::AttachReply& reply, const int* fds, int nfds) {
  iovec iov{const_cast<abi::AttachReply*>(&reply), sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == ssize_t(sizeof(reply));
}

}  // namespace

AttachServer::AttachServer(const Config& config, const NodePage* node_page)
    : config_(config), node_page_(node_page), socket_path_(config.run_dir + "/attach.sock") {
  local_size_.store(config.local_size);
}

AttachServer::~AttachServer() {
  for (auto& [fd, conn] : connections_) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(socket_path_.c_str());
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status AttachServer::Listen() {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path))
    return InvalidArgument("run directory path too long for a Unix socket: " + socket_path_);
  memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return ErrnoError("socket");
  // A socket file left by a dead daemon is stale; one that answers belongs to a live daemon.
  if (access(socket_path_.c_str(), F_OK) == 0) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(probe);
    if (live) return Status(SYNCD_ERR_REFUSED, "another syncd is already serving " + config_.run_dir);
    unlink(socket_path_.c_str());
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return ErrnoError("bind " + socket_path_);
  if (chmod(socket_path_.c_str(), 0600) != 0) return ErrnoError("chmod " + socket_path_);
  if (listen(listen_fd_, 128) != 0) return ErrnoError("listen " + socket_path_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return ErrnoError("epoll/eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return Status::Ok();
}

void AttachServer::Stop() {
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) { /* eventfd at its limit: a wake is pending anyway */ }
}

void AttachServer::KickClient(uint32_t client_id) {
  while (!kicks_.Push(uint32_t(client_id))) std::this_thread::yield();
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) { /* a wake is pending anyway */ }
}

void AttachServer::PostToEngine(EngineEvent event) {
  while (!engine_->Post(std::move(event))) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

void AttachServer::Run() {
  epoll_event events[64];
  while (!stop_.load(std::memory_order_acquire)) {
    const int n = epoll_wait(epoll_fd_, events, 64, 200);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t v;
        if (read(wake_fd_, &v, sizeof(v)) < 0) { /* spurious */ }
        while (auto id = kicks_.Pop())
          for (auto& [fd, conn] : connections_)
            if (conn.client_id == *id) {
              Drop(fd, "", false);
              break;
            }
      } else {
        // A client's tag carries its id: an event of a connection dropped earlier in this batch
        // must not act on a newer connection that got the same descriptor number.
        const int fd = int(tag & 0xffffffffu);
        const auto conn = connections_.find(fd);
        if (conn == connections_.end() || conn->second.client_id != uint32_t(tag >> 32)) continue;
        char buf[64];
        const ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0 && memchr(buf, abi::kGoodbyeByte, size_t(r)) != nullptr) {
          conn->second.said_goodbye = true;
          continue;  // the close follows; it is reported then
        }
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || (events[i].events & (EPOLLHUP | EPOLLERR))) {
          const bool clean = conn->second.said_goodbye;
          Drop(fd, clean ? "detached" : "exited without detaching (crashed or killed)", clean);
        }
      }
    }
  }
}

void AttachServer::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    Handshake(fd);
  }
}

void AttachServer::Refuse(int fd, int status, const std::string& why) {
  spdlog::warn("refused attach: {}", why);
  abi::AttachReply reply{};
  reply.magic = abi::kMagic;
  reply.version = abi::kVersion;
  reply.status = status;
  snprintf(reply.message, sizeof(reply.message), "%s", why.c_str());
  SendReply(fd, reply, nullptr, 0);
  close(fd);
}

void AttachServer::Handshake(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return Refuse(fd, SYNCD_ERR_SYSTEM, "SO_PEERCRED failed");
  if (cred.uid != geteuid())
    return Refuse(fd, SYNCD_ERR_REFUSED, "pid " + std::to_string(cred.pid) + " runs as uid " + std::to_string(cred.uid) +
                                             ", this daemon serves uid " + std::to_string(geteuid()) + " only");
  timeval tv{2, 0};  // a client that connects and says nothing must not stall other attaches
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  abi::AttachRequest req{};
  ssize_t n;
  do n = recv(fd, &req, sizeof(req), MSG_WAITALL);
  while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof(req)))
    return Refuse(fd, SYNCD_ERR_PROTOCOL, "pid " + std::to_string(cred.pid) + " sent no complete attach request");
  if (req.magic != abi::kMagic || req.version != abi::kVersion)
    return Refuse(fd, SYNCD_ERR_PROTOCOL, "pid " + std::to_string(cred.pid) + " speaks protocol version " +
                                              std::to_string(req.version) + " (magic " + std::to_string(req.magic) +
                                              "); this daemon speaks version " + std::to_string(abi::kVersion));
  const std::string who = "rank " + std::to_string(req.rank) + " (pid " + std::to_string(cred.pid) + ")";
  if (!accepting_.load(std::memory_order_acquire))
    return Refuse(fd, SYNCD_ERR_REFUSED, who + ": syncd at " + config_.run_dir + " is draining and takes no new clients");
  uint32_t local_size = local_size_.load();
  if (req.local_size <= 0 || req.local_rank < 0 || req.local_rank >= req.local_size)
    return Refuse(fd, SYNCD_ERR_INVALID, who + ": local rank " + std::to_string(req.local_rank) + " of " +
                                             std::to_string(req.local_size) + " is not valid");
  if (local_size != 0 && uint32_t(req.local_size) != local_size)
    return Refuse(fd, SYNCD_ERR_REFUSED, who + " says local size " + std::to_string(req.local_size) +
                                             " but this node runs " + std::to_string(local_size) + " ranks");
  const uint32_t ls = uint32_t(req.local_size);
  if (uint32_t(req.size) != ls * config_.nodes ||
      uint32_t(req.rank) != config_.node_rank * ls + uint32_t(req.local_rank))
    return Refuse(fd, SYNCD_ERR_REFUSED, who + ": rank " + std::to_string(req.rank) + " of " + std::to_string(req.size) +
                                             " does not fit node " + std::to_string(config_.node_rank) + " of " +
                                             std::to_string(config_.nodes) + " with " + std::to_string(ls) +
                                             " local ranks");
  // A client of another job that is already leaving (goodbye sent, or closed) but whose hang-up
  // this thread has not handled yet must not block the next job: settle it first.
  std::vector<int> leaving;
  for (const auto& [other_fd, conn] : connections_) {
    char b;
    const ssize_t r = recv(other_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r == 0 || (r == 1 && b == abi::kGoodbyeByte)) leaving.push_back(other_fd);
  }
  for (int other_fd : leaving) {
    const bool clean = connections_[other_fd].said_goodbye || [&] {
      char b;
      return recv(other_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 1 && b == abi::kGoodbyeByte;
    }();
    Drop(other_fd, clean ? "detached" : "exited without detaching (crashed or killed)", clean);
  }
  for (const auto& [other_fd, conn] : connections_)
    if (req.job_id != 0 && conn.job_id != 0 && conn.job_id != req.job_id)
      return Refuse(fd, SYNCD_ERR_REFUSED, who + " belongs to job " + std::to_string(req.job_id) +
                                               " but this daemon is serving job " + std::to_string(conn.job_id) +
                                               " (rank " + std::to_string(conn.rank) + " is attached)");
  if (auto it = fd_by_local_rank_.find(uint32_t(req.local_rank)); it != fd_by_local_rank_.end())
    return Refuse(fd, SYNCD_ERR_REFUSED, who + ": local rank " + std::to_string(req.local_rank) +
                                             " is already attached (pid " +
                                             std::to_string(connections_[it->second].pid) + ")");
  if (local_size == 0) local_size_.store(ls, std::memory_order_release);  // the first client fixes it
  const uint32_t id = next_client_id_++;
  auto segment = ClientSegment::Create(id, config_.ring_entries, config_.arena_bytes);
  if (!segment.ok()) return Refuse(fd, segment.status().code(), who + ": " + segment.status().message());

  abi::AttachReply reply{};
  reply.magic = abi::kMagic;
  reply.version = abi::kVersion;
  reply.status = SYNCD_OK;
  reply.client_id = id;
  reply.segment_bytes = segment->size();
  reply.node_page_bytes = node_page_->size();
  reply.node_rank = int32_t(config_.node_rank);
  reply.node_count = int32_t(config_.nodes);
  reply.client_spin_us = ClientSpinUs(cred.pid);
  reply.coord_mode = CoordModeOf(config_.coord);
  const int fds[2] = {segment->fd(), node_page_->fd()};
  // Submissions that arrive before the engine takes the client wait in its ring; posting the
  // client wakes the engine, which then drains them.
  auto client = std::make_unique<AttachedClient>();
  client->client_id = id;
  client->rank = uint32_t(req.rank);
  client->local_rank = uint32_t(req.local_rank);
  client->pid = cred.pid;
  client->local_size = ls;
  client->job_id = req.job_id;
  const bool sent = SendReply(fd, reply, fds, 2);
  segment->CloseFd();
  client->segment = std::move(segment.value());
  if (!sent) {
    spdlog::warn("{}: attach reply could not be sent: {}", who, strerror(errno));
    close(fd);
    return;
  }
  PostToEngine(ClientAttachedEvent{std::move(client)});
  timeval none{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  connections_[fd] = Connection{id, uint32_t(req.local_rank), cred.pid, uint32_t(req.rank), false, req.job_id};
  fd_by_local_rank_[uint32_t(req.local_rank)] = fd;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = uint64_t(id) << 32 | uint32_t(fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
}

void AttachServer::Drop(int fd, const std::string& reason, bool clean) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const Connection conn = it->second;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(it);
  fd_by_local_rank_.erase(conn.local_rank);
  if (!reason.empty()) PostToEngine(ClientLostEvent{conn.client_id, reason, clean});
}

}  // namespace syncd
