// Accepts clients on <run-dir>/attach.sock: checks the peer's uid (SO_PEERCRED: the daemon's own,
// or with --node-service the uid and gid its job was registered for, job_registry.h), the protocol
// version and the client's identity (attach_handshake.h), creates its segment, passes the segment
// and node page fds (SCM_RIGHTS) and hands the client to the engine. It keeps each client's
// socket open and reports a hang-up (exit, crash, SIGKILL) to the engine at once.
//
// Nothing here waits for a client or for the engine: handshakes are read as their bytes arrive,
// each with a deadline (at most kMaxHandshakes at once: past that the oldest is dropped), and
// events the engine has no room for yet wait in an outbox (in order, none lost) while the server
// stops accepting new connections until it empties.
//
// Threads: Run() is the attach thread (control plane). KickClient() is called by the engine
// thread; Stop() by any thread. The engine is reached only through Engine::Post.
#ifndef SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_
#define SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/base/config.h"
#include "daemon/base/spsc_queue.h"
#include "daemon/control/attach_handshake.h"
#include "daemon/control/job_registry.h"
#include "daemon/engine/engine.h"
#include "daemon/shm/node_page.h"

namespace syncd {

class AttachServer {
 public:
  // `jobs`: the registered jobs a node service admits clients to (null: the daemon's own uid only).
  AttachServer(const Config& config, const NodePage* node_page, const JobRegistry* jobs = nullptr);
  ~AttachServer();

  // Binds the socket (mode 0600; 0666 for a node service, which admits by registration). Fails when another live daemon serves the run directory.
  Status Listen();
  // Must be called before Run(): the engine that receives clients.
  void set_engine(Engine* engine) { engine_ = engine; }

  void Run();
  void Stop();
  // Any thread: refuse new clients from now on (graceful drain); attached ones stay served.
  void StopAccepting() { accepting_.store(false, std::memory_order_release); }
  // Engine thread: close this client's socket (it broke the protocol).
  void KickClient(uint32_t client_id);

 private:
  struct Connection {
    uint64_t serial;  // in its epoll tag: an event of a closed connection never acts on a newer one
    int32_t pid;
    uint32_t uid = 0, gid = 0;  // SO_PEERCRED's
    bool attached = false;
    // Until attached: the request as far as it has arrived, and when the client must have sent it.
    abi::AttachRequest request{};
    size_t received = 0;
    uint64_t deadline_ns = 0;
    int handed_fd = -1;  // abi::kAttachHandBack: the segment's descriptor, as it came with the request
    // Once attached.
    uint32_t client_id = 0;
    uint32_t local_rank = 0, local_size = 0;
    uint32_t rank = 0;
    bool said_goodbye = false;
    uint64_t job_id = 0;
  };
  void Accept();
  void EvictOldestHandshake();
  void OnEvent(int fd, Connection& conn, uint32_t events);
  void ReadHandshake(int fd, Connection& conn, uint32_t events);
  void CompleteHandshake(int fd, Connection& conn);
  // Refuses handshakes past their deadline; returns the time to the next deadline (ms, capped).
  int ExpireHandshakes(int cap_ms);
  // Hands clients that are leaving (goodbye sent, or closed) but whose hang-up this thread has
  // not read yet to the engine, so that the next job is not refused for them.
  void SettleLeavingClients();
  void Refuse(int fd, int status, const std::string& why);
  // Forgets the connection; for an attached client a non-empty reason is reported to the engine.
  void Drop(int fd, const std::string& reason, bool clean);
  void PostToEngine(EngineEvent event);
  void FlushOutbox();
  // Whether new connections are taken now (the outbox has room, handshakes are few).
  void UpdateListening();
  // Jobs attached side by side (a node service on one node: each job its own local ranks and
  // local size) or one at a time (every client in slot 0).
  uint64_t SlotOf(uint64_t job) const { return side_by_side_ ? job : 0; }
  // The local size the ranks of `slot` must say: the daemon's --local-size where it has one and
  // `daemon_wide`, else that of the slot's ranks attached (0: none is).
  uint32_t LocalSizeOf(uint64_t slot, bool daemon_wide) const;
  // What a client of `conn` attaching to `slot` must fit: the daemon's nodes, or its registered
  // job's own (`admission`).
  AttachRules RulesFor(const Connection& conn, uint64_t slot, const std::optional<JobAdmission>& admission) const;
  void Forget(int fd);

  const Config config_;
  const NodePage* node_page_;
  const JobRegistry* jobs_;
  const bool side_by_side_;
  Engine* engine_ = nullptr;
  std::string socket_path_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() and KickClient() ring it
  bool listening_ = true;
  uint64_t accept_pause_until_ns_ = 0;  // out of descriptors: try again later
  std::atomic<bool> stop_{false};
  std::atomic<bool> accepting_{true};
  SpscQueue<uint32_t> kicks_{64};
  std::map<int, Connection> connections_;     // by socket fd (attach thread only)
  std::map<std::pair<uint64_t, uint32_t>, int> fd_by_local_rank_;  // (slot, local rank) -> fd of attached clients
  size_t handshakes_ = 0;                      // connections not attached yet
  std::deque<EngineEvent> outbox_;             // events the engine has no room for yet
  uint64_t next_serial_ = 1;
  uint32_t next_client_id_ = 1;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_
