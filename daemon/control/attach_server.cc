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
#include <utility>

#include "daemon/base/affinity.h"
#include "daemon/control/attach_handshake.h"
#include "proto/doorbell.h"
#include "proto/fd_passing.h"

namespace syncd {
namespace {

constexpr uint64_t kWakeTag = UINT64_MAX;
constexpr uint64_t kListenTag = UINT64_MAX - 1;
constexpr uint32_t kClientSpinUs = 50;
// A client has this long from connecting to its complete attach request.
constexpr uint64_t kHandshakeTimeoutNs = 2'000'000'000;
// Events the engine has not taken yet beyond which no new connection is accepted (the kernel's
// backlog holds them meanwhile), and handshakes under way beyond which the oldest is dropped.
constexpr size_t kMaxOutbox = 64;
constexpr size_t kMaxHandshakes = 256;
constexpr uint64_t kAcceptPauseNs = 100'000'000;

// A client whose cores are apart from the engine's polls briefly before sleeping: the wake-up
// then costs nothing. One that shares a core with the engine (unpinned ranks, several daemons
// on one host, --cores none) sleeps at once: its polling would only delay the engine it waits for.
uint32_t ClientSpinUs(int pid) {
  const CoreSet mine = AllowedCores(), theirs = AllowedCores(pid);
  std::vector<uint32_t> shared;
  std::set_intersection(mine.begin(), mine.end(), theirs.begin(), theirs.end(), std::back_inserter(shared));
  return shared.empty() && !theirs.empty() ? kClientSpinUs : 0;
}

static_assert(abi::kAttachFds <= abi::kMaxPassedFds);

bool SendReply(int fd, const abi::AttachReply& reply, const int* fds, int nfds) {
  return abi::SendWithFds(fd, &reply, sizeof(reply), fds, nfds) == ssize_t(sizeof(reply));
}

}  // namespace

AttachServer::AttachServer(const Config& config, const NodePage* node_page, const JobRegistry* jobs)
    : config_(config),
      node_page_(node_page),
      jobs_(jobs),
      side_by_side_(jobs != nullptr && config.nodes == 1),
      socket_path_(config.run_dir + "/attach.sock") {}

uint32_t AttachServer::LocalSizeOf(uint64_t slot, bool daemon_wide) const {
  if (daemon_wide && config_.local_size != 0) return config_.local_size;
  for (const auto& [fd, conn] : connections_)
    if (conn.attached && SlotOf(conn.job_id) == slot) return conn.local_size;
  return 0;
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
  // A node service takes any user's connection: the registration decides (CompleteHandshake).
  if (chmod(socket_path_.c_str(), jobs_ != nullptr ? 0666 : 0600) != 0) return ErrnoError("chmod " + socket_path_);
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
  outbox_.push_back(std::move(event));
  FlushOutbox();
}

void AttachServer::FlushOutbox() {
  while (!outbox_.empty() && engine_->Post(std::move(outbox_.front()))) outbox_.pop_front();
}

void AttachServer::UpdateListening() {
  const bool want = outbox_.size() < kMaxOutbox && abi::MonotonicNs() >= accept_pause_until_ns_;
  if (want == listening_) return;
  epoll_event ev{};
  ev.events = want ? uint32_t(EPOLLIN) : 0u;
  ev.data.u64 = kListenTag;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  listening_ = want;
}

void AttachServer::Run() {
  epoll_event events[64];
  while (!stop_.load(std::memory_order_acquire)) {
    FlushOutbox();
    UpdateListening();
    // Events waiting for the engine are retried often; otherwise the next handshake deadline.
    int timeout_ms = ExpireHandshakes(outbox_.empty() ? 200 : 1);
    if (!listening_ && accept_pause_until_ns_ != 0) timeout_ms = std::min(timeout_ms, 10);
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t v;
        if (read(wake_fd_, &v, sizeof(v)) < 0) { /* spurious */ }
        while (auto id = kicks_.Pop())
          for (auto& [fd, conn] : connections_)
            if (conn.attached && conn.client_id == *id) {
              Drop(fd, "", false);
              break;
            }
      } else {
        // A connection's tag carries its serial: an event of a connection dropped earlier in
        // this batch must not act on a newer connection that got the same descriptor number.
        const int fd = int(tag & 0xffffffffu);
        const auto conn = connections_.find(fd);
        if (conn == connections_.end() || (conn->second.serial & 0xffffffffu) != (tag >> 32)) continue;
        OnEvent(fd, conn->second, events[i].events);
      }
    }
  }
}

void AttachServer::OnEvent(int fd, Connection& conn, uint32_t events) {
  if (!conn.attached) return ReadHandshake(fd, conn, events);
  char buf[64];
  const ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (r > 0 && memchr(buf, abi::kGoodbyeByte, size_t(r)) != nullptr) {
    conn.said_goodbye = true;
    return;  // the close follows; it is reported then
  }
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || (events & (EPOLLHUP | EPOLLERR))) {
    const bool clean = conn.said_goodbye;
    Drop(fd, clean ? "detached" : "exited without detaching (crashed or killed)", clean);
  }
}

void AttachServer::EvictOldestHandshake() {
  auto oldest = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it)
    if (!it->second.attached && (oldest == connections_.end() || it->second.deadline_ns < oldest->second.deadline_ns))
      oldest = it;
  if (oldest == connections_.end()) return;
  Refuse(oldest->first, SYNCD_ERR_REFUSED,
         "pid " + std::to_string(oldest->second.pid) + ": " + std::to_string(kMaxHandshakes) +
             " connections are waiting to complete their attach request; the oldest is dropped");
}

void AttachServer::Accept() {
  for (int i = 0; i < 64; ++i) {
    // A correct client sends its request at once: only idle connections grow old, so making
    // room at the oldest one's expense keeps a flood of them from locking anyone out.
    if (handshakes_ >= kMaxHandshakes) EvictOldestHandshake();
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("attach: cannot accept a connection: {}; trying again shortly", strerror(errno));
        accept_pause_until_ns_ = abi::MonotonicNs() + kAcceptPauseNs;
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      Refuse(fd, SYNCD_ERR_SYSTEM, "SO_PEERCRED failed");
      continue;
    }
    if (jobs_ == nullptr && cred.uid != geteuid()) {
      Refuse(fd, SYNCD_ERR_REFUSED, "pid " + std::to_string(cred.pid) + " runs as uid " + std::to_string(cred.uid) +
                                        ", this daemon serves uid " + std::to_string(geteuid()) + " only");
      continue;
    }
    Connection conn;
    conn.serial = next_serial_++;
    conn.pid = cred.pid;
    conn.uid = cred.uid;
    conn.gid = cred.gid;
    conn.deadline_ns = abi::MonotonicNs() + kHandshakeTimeoutNs;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = (conn.serial & 0xffffffffu) << 32 | uint32_t(fd);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    connections_[fd] = conn;
    ++handshakes_;
  }
}

int AttachServer::ExpireHandshakes(int cap_ms) {
  if (handshakes_ == 0) return cap_ms;
  const uint64_t now = abi::MonotonicNs();
  uint64_t next = now + uint64_t(cap_ms) * 1'000'000;
  std::vector<std::pair<int, int32_t>> late;
  for (const auto& [fd, conn] : connections_) {
    if (conn.attached) continue;
    if (conn.deadline_ns <= now) late.emplace_back(fd, conn.pid);
    else next = std::min(next, conn.deadline_ns);
  }
  for (auto [fd, pid] : late)
    Refuse(fd, SYNCD_ERR_PROTOCOL, "pid " + std::to_string(pid) + " sent no complete attach request within " +
                                       std::to_string(kHandshakeTimeoutNs / 1'000'000'000) + " s");
  return int((next - now + 999'999) / 1'000'000);
}

void AttachServer::ReadHandshake(int fd, Connection& conn, uint32_t events) {
  // A segment handed back (abi::kAttachHandBack): the first descriptor is kept, any other closed.
  int passed = -1;
  const ssize_t r = abi::RecvWithFds(fd, reinterpret_cast<char*>(&conn.request) + conn.received,
                                     sizeof(conn.request) - conn.received, MSG_DONTWAIT, &passed, 1);
  if (r > 0) conn.received += size_t(r);
  if (passed >= 0) {
    if (conn.handed_fd < 0) conn.handed_fd = passed;
    else close(passed);
  }
  if (conn.received == sizeof(conn.request)) return CompleteHandshake(fd, conn);
  if (r == 0 || (r < 0 && errno != EAGAIN) || (events & (EPOLLHUP | EPOLLERR))) {
    spdlog::info("attach: pid {} closed its connection after {} of {} handshake bytes", conn.pid, conn.received,
                 sizeof(conn.request));
    Forget(fd);
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
  if (connections_.count(fd)) Forget(fd);
  else close(fd);
}

void AttachServer::SettleLeavingClients() {
  std::vector<std::pair<int, bool>> leaving;
  for (const auto& [fd, conn] : connections_) {
    if (!conn.attached) continue;
    char b;
    const ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r == 0 || (r == 1 && b == abi::kGoodbyeByte)) leaving.emplace_back(fd, conn.said_goodbye || r == 1);
  }
  for (auto [fd, clean] : leaving) Drop(fd, clean ? "detached" : "exited without detaching (crashed or killed)", clean);
}

AttachRules AttachServer::RulesFor(const Connection& conn, uint64_t slot,
                                   const std::optional<JobAdmission>& admission) const {
  // A node service's registered job runs on its own nodes (of several, on links of its own), or
  // alone on this one where the daemon is a node of nobody else's: its ranks fit its own
  // registration, not the daemon's --local-size. Any other job runs on the daemon's nodes.
  const bool own_nodes = admission && (admission->nodes > 1 || config_.nodes == 1);
  AttachRules rules{config_.node_rank, config_.nodes, LocalSizeOf(slot, !own_nodes),
                    accepting_.load(std::memory_order_acquire), config_.run_dir, jobs_, conn.uid, conn.gid};
  if (own_nodes) {
    rules.nodes = admission->nodes;
    rules.node_rank = admission->node_rank;
    if (admission->local_size != 0) rules.local_size = admission->local_size;
  }
  return rules;
}

void AttachServer::CompleteHandshake(int fd, Connection& conn) {
  const abi::AttachRequest req = conn.request;
  const int32_t pid = conn.pid;
  SettleLeavingClients();  // first: a leaving job's clients still hold its local size
  const uint64_t slot = SlotOf(req.job_id);
  const std::optional<JobAdmission> admission = jobs_ != nullptr ? jobs_->Find(req.job_id) : std::nullopt;
  const AttachRules rules = RulesFor(conn, slot, admission);
  if (Status st = CheckAttachRequest(req, pid, rules); !st.ok()) return Refuse(fd, st.code(), st.message());
  const std::string who = AttachingRank(req, pid);
  // One job at a time, unless jobs are served side by side (each in its own slot).
  for (const auto& [other_fd, other] : connections_)
    if (!side_by_side_ && other.attached && req.job_id != 0 && other.job_id != 0 && other.job_id != req.job_id)
      return Refuse(fd, SYNCD_ERR_REFUSED, who + " belongs to job " + std::to_string(req.job_id) +
                                               " but this daemon is serving job " + std::to_string(other.job_id) +
                                               " (rank " + std::to_string(other.rank) + " is attached)");
  if (auto it = fd_by_local_rank_.find({slot, uint32_t(req.local_rank)}); it != fd_by_local_rank_.end())
    return Refuse(fd, SYNCD_ERR_REFUSED, who + ": local rank " + std::to_string(req.local_rank) +
                                             " is already attached (pid " +
                                             std::to_string(connections_[it->second].pid) + ")");
  const uint32_t ls = uint32_t(req.local_size);
  const bool hand_back = (req.flags & abi::kAttachHandBack) != 0;
  if (hand_back && conn.handed_fd < 0)
    return Refuse(fd, SYNCD_ERR_INVALID, who + " hands its segment back but sent no descriptor with its request");
  const uint32_t id = next_client_id_++;
  auto segment = hand_back ? ClientSegment::Adopt(std::exchange(conn.handed_fd, -1), id, config_.ring_entries,
                                                  config_.arena_bytes, config_.result_bytes)
                           : ClientSegment::Create(id, config_.ring_entries, config_.arena_bytes, config_.result_bytes);
  if (!segment.ok())
    return Refuse(fd, segment.status().code(),
                  who + (hand_back ? ": its segment handed back: " : ": ") + segment.status().message());
  if (hand_back) spdlog::info("{} handed back its segment: its arena is kept", who);
  if (conn.handed_fd >= 0) close(std::exchange(conn.handed_fd, -1));  // sent without the flag

  abi::AttachReply reply{};
  reply.magic = abi::kMagic;
  reply.version = abi::kVersion;
  reply.status = SYNCD_OK;
  reply.client_id = id;
  reply.segment_bytes = segment->size();
  reply.node_page_bytes = node_page_->size();
  reply.node_rank = int32_t(rules.node_rank);
  reply.node_count = int32_t(rules.nodes);
  reply.client_spin_us = ClientSpinUs(pid);
  abi::CoordMode coord = config_.coord;  // a registered job's own where it has one
  if (admission && !admission->settings.empty())
    if (StatusOr<Config> c = JobConfig(config_, admission->settings); c.ok()) coord = c->coord;
  reply.coord_mode = uint32_t(coord);
  const int fds[abi::kAttachFds] = {segment->fd(), node_page_->fd(), node_page_->wake_fd()};
  // Submissions that arrive before the engine takes the client wait in its ring; posting the
  // client wakes the engine, which then drains them.
  auto client = std::make_unique<AttachedClient>();
  client->client_id = id;
  client->rank = uint32_t(req.rank);
  client->local_rank = uint32_t(req.local_rank);
  client->pid = pid;
  client->local_size = ls;
  client->job_id = req.job_id;
  if (admission) client->weight = admission->weight;
  client->shares_engine_core = reply.client_spin_us == 0;
  const bool sent = SendReply(fd, reply, fds, abi::kAttachFds);
  segment->CloseFd();
  client->segment = std::move(segment.value());
  if (!sent) {
    spdlog::warn("{}: attach reply could not be sent: {}", who, strerror(errno));
    return Forget(fd);
  }
  PostToEngine(ClientAttachedEvent{std::move(client)});
  conn.attached = true;
  conn.client_id = id;
  conn.local_rank = uint32_t(req.local_rank);
  conn.local_size = ls;  // the slot's, while its clients are attached
  conn.rank = uint32_t(req.rank);
  conn.job_id = req.job_id;
  --handshakes_;
  fd_by_local_rank_[{slot, conn.local_rank}] = fd;
}

void AttachServer::Forget(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (!it->second.attached) --handshakes_;
  else fd_by_local_rank_.erase({SlotOf(it->second.job_id), it->second.local_rank});
  if (it->second.handed_fd >= 0) close(it->second.handed_fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  connections_.erase(it);  // the local size it held goes with it: the next job may differ
}

void AttachServer::Drop(int fd, const std::string& reason, bool clean) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  const Connection conn = it->second;
  Forget(fd);
  if (conn.attached && !reason.empty()) PostToEngine(ClientLostEvent{conn.client_id, reason, clean});
}

}  // namespace syncd
