// Client::Attach: the UDS handshake and the mapping of the segment and node page.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

#include "client/src/client_impl.h"
#include "proto/doorbell.h"
#include "proto/fd_passing.h"

namespace syncd::client {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  return (*end == '\0') ? int(x) : fallback;
}

// Slurm's SLURM_TASKS_PER_NODE ("2(x3),1") expanded for node `node`; -1 when it cannot tell.
int SlurmTasksOnNode(const char* spec, int node) {
  if (spec == nullptr || node < 0) return -1;
  for (const char* p = spec; *p != '\0';) {
    char* end = nullptr;
    const long tasks = strtol(p, &end, 10);
    if (end == p) return -1;
    long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return -1;
      repeat = strtol(end + 2, &end, 10);
      if (*end != ')') return -1;
      ++end;
    }
    if (node < repeat) return int(tasks);
    node -= int(repeat);
    p = (*end == ',') ? end + 1 : end;
  }
  return -1;
}

// SYNCD_<name>, else Slurm's variable when running under srun, else the fallback.
int IdentityFromEnv(const char* syncd_name, const char* slurm_name, int fallback) {
  return EnvInt(syncd_name, EnvInt(slurm_name, fallback));
}

// Send and receive timeouts on `fd` (a zero `ns`: none). A Unix socket's connect() honours the
// send timeout too.
void SetSocketTimeouts(int fd, uint64_t ns) {
  timeval tv{time_t(ns / 1'000'000'000), suseconds_t(ns % 1'000'000'000 / 1000)};
  if (ns > 0 && tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

uint64_t Remaining(uint64_t deadline) {
  const uint64_t now = abi::MonotonicNs();
  return deadline > now ? deadline - now : 1;
}

int Connect(const std::string& path, uint64_t deadline, int timeout_ms, int* out_fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    return Fail(SYNCD_ERR_INVALID, "attach socket path too long: " + path);
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int last_errno = 0;
  do {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Fail(SYNCD_ERR_SYSTEM, std::string("socket: ") + strerror(errno));
    SetSocketTimeouts(fd, Remaining(deadline));  // a daemon whose backlog is full makes connect() wait
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      *out_fd = fd;
      return SYNCD_OK;
    }
    last_errno = errno;
    close(fd);
    if (last_errno == EAGAIN || last_errno == EWOULDBLOCK || last_errno == EINPROGRESS)
      return Fail(SYNCD_ERR_TIMEOUT, "syncd at " + path + " did not accept the connection within " +
                                         std::to_string(timeout_ms) + " ms (is it overloaded or stopped?)");
    if (last_errno != ENOENT && last_errno != ECONNREFUSED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (abi::MonotonicNs() < deadline);
  return Fail(SYNCD_ERR_DAEMON_LOST, "cannot reach syncd at " + path + ": " + strerror(last_errno) +
                                         " (is the daemon running? is SYNCD_RUN_DIR right?)");
}

bool SendAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// Sends the request; `pass_fd` (>= 0: a segment handed back) travels with its bytes (SCM_RIGHTS).
bool SendRequest(int fd, const abi::AttachRequest& req, int pass_fd) {
  if (pass_fd < 0) return SendAll(fd, &req, sizeof(req));
  const ssize_t w = abi::SendWithFd(fd, &req, sizeof(req), pass_fd);
  if (w <= 0) return false;
  return SendAll(fd, reinterpret_cast<const char*>(&req) + w, sizeof(req) - size_t(w));
}

void CloseAll(int fds[abi::kAttachFds]) {
  for (int i = 0; i < abi::kAttachFds; ++i)
    if (fds[i] >= 0) close(fds[i]);
}

// Receives the reply and up to abi::kAttachFds descriptors passed with it (a short reply closes
// any that came).
bool RecvReply(int fd, abi::AttachReply* reply, int fds[abi::kAttachFds]) {
  if (abi::RecvWithFds(fd, reply, sizeof(*reply), MSG_WAITALL, fds, abi::kAttachFds) == ssize_t(sizeof(*reply)))
    return true;
  const int saved = errno;
  CloseAll(fds);
  errno = saved;
  return false;
}

// Sends the request and takes the reply with its descriptors (segment, node page, engine wake-up). On any
// error (the daemon's refusal, no answer in time, another protocol version) the descriptors that
// came are closed and the error is the client's.
int Handshake(int sock, const abi::AttachRequest& req, const std::string& socket_path, int timeout_ms,
              abi::AttachReply* reply, int fds[abi::kAttachFds], int pass_fd = -1) {
  // A daemon that refuses early (wrong uid) replies and closes before reading the request: even
  // when the send fails, the reply says why.
  const bool sent = SendRequest(sock, req, pass_fd);
  const int send_errno = errno;
  if (!RecvReply(sock, reply, fds)) {
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return Fail(SYNCD_ERR_TIMEOUT, "attach handshake: syncd at " + socket_path + " did not answer within " +
                                         std::to_string(timeout_ms) + " ms (is it overloaded or stopped?)");
    if (!sent)
      return Fail(SYNCD_ERR_DAEMON_LOST, std::string("attach handshake: send failed: ") + strerror(send_errno));
    return Fail(SYNCD_ERR_DAEMON_LOST, "attach handshake: syncd closed the connection without a reply");
  }
  if (reply->magic != abi::kMagic || reply->version != abi::kVersion) {
    CloseAll(fds);
    return Fail(SYNCD_ERR_PROTOCOL, "attach handshake: daemon speaks protocol version " +
                                        std::to_string(reply->version) + ", client speaks " +
                                        std::to_string(abi::kVersion));
  }
  reply->message[sizeof(reply->message) - 1] = '\0';
  if (reply->status != SYNCD_OK) {
    CloseAll(fds);
    return Fail(reply->status, std::string("syncd refused the attach: ") + reply->message);
  }
  if (std::any_of(fds, fds + abi::kAttachFds, [](int f) { return f < 0; })) {
    CloseAll(fds);
    return Fail(SYNCD_ERR_PROTOCOL, "attach handshake: missing descriptors");
  }
  return SYNCD_OK;
}

// Who this process is: the options, else syncrun's SYNCD_* variables, else Slurm's (under a plain
// srun our prolog's run directory is /run/syncd/<job id>).
int ResolveIdentity(const syncd_init_options& opts, Identity* id) {
  const char* env_dir = getenv("SYNCD_RUN_DIR");
  const char* slurm_job = getenv("SLURM_JOB_ID");
  id->run_dir = opts.run_dir ? opts.run_dir : (env_dir ? env_dir : "");
  if (id->run_dir.empty() && slurm_job != nullptr && *slurm_job != '\0') id->run_dir = std::string("/run/syncd/") + slurm_job;
  if (id->run_dir.empty())
    return Fail(SYNCD_ERR_INVALID, "no run directory: set SYNCD_RUN_DIR or pass run_dir (syncrun sets it)");
  id->rank = opts.rank >= 0 ? opts.rank : IdentityFromEnv("SYNCD_RANK", "SLURM_PROCID", 0);
  id->size = opts.size >= 0 ? opts.size : IdentityFromEnv("SYNCD_SIZE", "SLURM_NTASKS", 1);
  id->local_rank = opts.local_rank >= 0 ? opts.local_rank : IdentityFromEnv("SYNCD_LOCAL_RANK", "SLURM_LOCALID", id->rank);
  const int slurm_local = SlurmTasksOnNode(getenv("SLURM_TASKS_PER_NODE"), EnvInt("SLURM_NODEID", -1));
  id->local_size = opts.local_size >= 0 ? opts.local_size : EnvInt("SYNCD_LOCAL_SIZE", slurm_local > 0 ? slurm_local : id->size);
  if (id->size < 1 || id->rank < 0 || id->rank >= id->size || id->local_size < 1 || id->local_rank < 0 ||
      id->local_rank >= id->local_size)
    return Fail(SYNCD_ERR_INVALID, "inconsistent identity: rank " + std::to_string(id->rank) + " of " +
                                       std::to_string(id->size) + ", local rank " +
                                       std::to_string(id->local_rank) + " of " +
                                       std::to_string(id->local_size));
  return SYNCD_OK;
}

// The job this rank belongs to (0: whichever the daemon serves).
uint64_t JobIdOf(const syncd_init_options& opts) {
  if (opts.job_id != 0) return opts.job_id;
  if (const char* j = getenv("SYNCD_JOB_ID"); j != nullptr) return strtoull(j, nullptr, 0);
  if (const char* slurm_job = getenv("SLURM_JOB_ID"); slurm_job != nullptr) return strtoull(slurm_job, nullptr, 10);
  return 0;
}

}  // namespace

int Client::Attach(const syncd_init_options& opts, Client** out) {
  *out = nullptr;
  std::unique_ptr<Client> c(new Client());
  Identity& id = c->id_;
  if (int rc = ResolveIdentity(opts, &id); rc != SYNCD_OK) return rc;

  const int timeout_ms = opts.attach_timeout_ms >= 0 ? opts.attach_timeout_ms : 10'000;
  // One deadline for the whole attach: reaching the daemon and its answer.
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(timeout_ms) * 1'000'000ull;
  const std::string socket_path = id.run_dir + "/attach.sock";
  if (int rc = Connect(socket_path, deadline, timeout_ms, &c->sock_); rc != SYNCD_OK) return rc;
  SetSocketTimeouts(c->sock_, Remaining(deadline));

  id.job_id = JobIdOf(opts);
  abi::AttachRequest req{abi::kMagic, abi::kVersion, id.rank, id.size, id.local_rank, id.local_size,
                         int32_t(getpid()), 0, id.job_id};
  abi::AttachReply reply{};
  int fds[abi::kAttachFds];
  if (int rc = Handshake(c->sock_, req, socket_path, timeout_ms, &reply, fds); rc != SYNCD_OK) return rc;
  SetSocketTimeouts(c->sock_, 0);  // from now on the socket only carries the goodbye
  if (int rc = c->MapShared(reply, fds); rc != SYNCD_OK) return rc;
  id.node_rank = reply.node_rank;
  c->spin_ns_ = uint64_t(EnvInt("SYNCD_CLIENT_SPIN_US", int(reply.client_spin_us))) * 1000;
  id.node_count = reply.node_count;
  id.coord_mode = reply.coord_mode < std::size(abi::kCoordModeNames) ? reply.coord_mode : 0;
  {
    MutexLock lock(&c->mu_);
    if (int rc = c->RefreshGlobalSet(); rc != SYNCD_OK) return rc;
  }
  *out = c.release();
  return SYNCD_OK;
}

int Client::MapShared(const abi::AttachReply& reply, int fds[abi::kAttachFds]) {
  segment_bytes_ = reply.segment_bytes;
  node_bytes_ = reply.node_page_bytes;
  segment_ = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  node_map_ = mmap(nullptr, node_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
  segment_fd_ = fds[0];  // kept: syncd_reattach hands it to the next daemon
  close(fds[1]);
  engine_wake_fd_ = fds[2];
  if (segment_ == MAP_FAILED || node_map_ == MAP_FAILED) {
    if (segment_ == MAP_FAILED) segment_ = nullptr;
    if (node_map_ == MAP_FAILED) node_map_ = nullptr;
    return Fail(SYNCD_ERR_SYSTEM, std::string("mmap of the shared segment failed: ") + strerror(errno));
  }
  auto* h = static_cast<abi::SegmentHeader*>(segment_);
  if (h->magic != abi::kMagic || h->version != abi::kVersion || h->segment_bytes != segment_bytes_)
    return Fail(SYNCD_ERR_PROTOCOL, "shared segment header is not what the handshake announced");
  if (h->result_offset < h->arena_offset + h->arena_bytes || h->result_bytes > segment_bytes_ - h->result_offset)
    return Fail(SYNCD_ERR_PROTOCOL, "shared segment header has its result area outside the segment");
  header_ = h;
  node_ = static_cast<abi::NodePage*>(node_map_);
  char* base = static_cast<char*>(segment_);
  MutexLock lock(&mu_);  // nobody else sees this client yet; the lock keeps the analysis simple
  submit_ = abi::RingView<abi::SubmitEntry>(&h->submit, reinterpret_cast<abi::SubmitEntry*>(base + h->submit_ring_offset),
                                            h->ring_entries);
  completion_ = abi::RingView<abi::CompletionEntry>(
      &h->completion, reinterpret_cast<abi::CompletionEntry*>(base + h->completion_ring_offset), h->ring_entries);
  messages_ = base + h->message_offset;
  arena_ = base + h->arena_offset;
  results_ = base + h->result_offset;
  results_offset_ = h->result_offset;
  results_bytes_ = h->result_bytes;
  arena_alloc_ = std::make_unique<ArenaAllocator>(h->arena_bytes, abi::kArenaAlignment);
  arena_capacity_ = arena_alloc_->capacity();
  slots_.resize(h->ring_entries);
  for (uint32_t i = h->ring_entries; i-- > 0;) free_slots_.push_back(i);
  return SYNCD_OK;
}

Client::~Client() {
  if (sock_ >= 0) {
    if (getpid() == owner_) send(sock_, &abi::kGoodbyeByte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(sock_);
  }
  if (segment_) munmap(segment_, segment_bytes_);
  if (node_map_) munmap(node_map_, node_bytes_);
  if (engine_wake_fd_ >= 0) close(engine_wake_fd_);
  if (segment_fd_ >= 0) close(segment_fd_);
}

void Client::Leave() {
  MutexLock lock(&mu_);
  left_.store(true, std::memory_order_relaxed);
  daemon_lost_ = true;  // every call that needs the daemon fails from now on (DaemonLostError says why)
  if (sock_ < 0) return;
  if (getpid() == owner_) send(sock_, &abi::kGoodbyeByte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(sock_);
  sock_ = -1;
}

int Client::Reattach(int timeout_ms) {
  MutexLock lock(&mu_);
  const std::string who = "rank " + std::to_string(id_.rank);
  if (left_.load(std::memory_order_relaxed))
    return Fail(SYNCD_ERR_INVALID, "syncd_reattach: " + who + " has left the job (syncd_leave)");
  if (DaemonAlive())
    return Fail(SYNCD_ERR_INVALID, "syncd_reattach: " + who + "'s daemon at " + id_.run_dir +
                                       " is still serving it: there is nothing to attach to again");
  const uint64_t deadline = abi::MonotonicNs() + uint64_t(std::max(timeout_ms, 0)) * 1'000'000ull;
  const std::string socket_path = id_.run_dir + "/attach.sock";
  int sock = -1;
  if (int rc = Connect(socket_path, deadline, timeout_ms, &sock); rc != SYNCD_OK) return rc;
  SetSocketTimeouts(sock, Remaining(deadline));
  const abi::AttachRequest req{abi::kMagic, abi::kVersion, id_.rank, id_.size, id_.local_rank, id_.local_size,
                               int32_t(getpid()), abi::kAttachHandBack, id_.job_id};
  abi::AttachReply reply{};
  int fds[abi::kAttachFds];
  if (int rc = Handshake(sock, req, socket_path, timeout_ms, &reply, fds, segment_fd_); rc != SYNCD_OK) {
    close(sock);
    return rc;
  }
  void* node_map = reply.segment_bytes == segment_bytes_
                       ? mmap(nullptr, reply.node_page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0)
                       : MAP_FAILED;
  close(fds[0]);  // this client's own segment, sent back
  close(fds[1]);
  if (node_map == MAP_FAILED) {
    close(fds[2]);
    close(sock);
    return Fail(SYNCD_ERR_PROTOCOL, "syncd_reattach: the daemon's reply does not fit the segment handed back");
  }
  SetSocketTimeouts(sock, 0);
  close(std::exchange(sock_, sock));
  munmap(node_map_, node_bytes_);
  node_map_ = node_map;
  node_bytes_ = reply.node_page_bytes;
  node_ = static_cast<abi::NodePage*>(node_map_);
  close(std::exchange(engine_wake_fd_, fds[2]));
  id_.node_rank = reply.node_rank;
  id_.node_count = reply.node_count;
  id_.coord_mode = reply.coord_mode < std::size(abi::kCoordModeNames) ? reply.coord_mode : 0;
  spin_ns_ = uint64_t(EnvInt("SYNCD_CLIENT_SPIN_US", int(reply.client_spin_us))) * 1000;
  ForgetOldDaemon();
  return RefreshGlobalSet();
}

void Client::ForgetOldDaemon() {
  // The daemon emptied both rings (abi::kAttachHandBack); the views start over with them.
  char* base = static_cast<char*>(segment_);
  submit_ = abi::RingView<abi::SubmitEntry>(
      &header_->submit, reinterpret_cast<abi::SubmitEntry*>(base + header_->submit_ring_offset), header_->ring_entries);
  completion_ = abi::RingView<abi::CompletionEntry>(
      &header_->completion, reinterpret_cast<abi::CompletionEntry*>(base + header_->completion_ring_offset),
      header_->ring_entries);
  // What the old daemon held fails (results it wrote are in a result area the new one reuses), its
  // names free at once and its arena blocks freed; the slots wait to be waited for.
  for (Slot& s : slots_) {
    if (s.state == SlotState::kFree || (s.state == SlotState::kDone && s.result_offset == abi::kNoResult)) continue;
    s.state = SlotState::kDone;
    s.status = SYNCD_ERR_DAEMON_LOST;
    s.message = "tensor '" + s.name + "': the daemon that held it is gone (rank " + std::to_string(id_.rank) +
                " attached again to the one serving " + id_.run_dir + ")";
    s.result_offset = abi::kNoResult;
    in_flight_names_.erase(std::exchange(s.key, std::string()));
    if (s.staged) arena_alloc_->Free(s.staging_offset);
    if (s.aux_offset >= 0) arena_alloc_->Free(uint64_t(s.aux_offset));
    s.staged = false;
    s.aux_offset = -1;
  }
  sets_.clear();  // the new daemon has none of the old one's process sets
  daemon_lost_ = false;
}

}  // namespace syncd::client
