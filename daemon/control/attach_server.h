// Accepts clients on <run-dir>/attach.sock: checks the peer's uid (SO_PEERCRED), the protocol
// version and the client's identity, creates its segment, passes the segment and node page fds
// (SCM_RIGHTS) and hands the client to the engine. It keeps each client's socket open and reports
// a hang-up (exit, crash, SIGKILL) to the engine at once.
//
// Threads: Run() is the attach thread (control plane). KickClient() is called by the engine
// thread; Stop() by any thread. The engine is reached only through Engine::Post.
#ifndef SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_
#define SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_

#include <map>
#include <mutex>
#include <string>

#include "daemon/base/config.h"
#include "daemon/base/spsc_queue.h"
#include "daemon/engine/engine.h"
#include "daemon/shm/node_page.h"

namespace syncd {

class AttachServer {
 public:
  AttachServer(const Config& config, const NodePage* node_page);
  ~AttachServer();

  // Binds the socket (mode 0600). Fails when another live daemon serves the run directory.
  Status Listen();
  // Must be called before Run(): the engine that receives clients.
  void set_engine(Engine* engine) { engine_ = engine; }
  // Local size fixed by configuration, or 0 until the first client says it.
  uint32_t local_size() const { return local_size_.load(std::memory_order_acquire); }

  void Run();
  void Stop();
  // Any thread: refuse new clients from now on (graceful drain); attached ones stay served.
  void StopAccepting() { accepting_.store(false, std::memory_order_release); }
  // Engine thread: close this client's socket (it broke the protocol).
  void KickClient(uint32_t client_id);

 private:
  struct Connection {
    uint32_t client_id;
    uint32_t local_rank;
    int32_t pid;
    uint32_t rank;
    bool said_goodbye;
    uint64_t job_id;
  };
  void Accept();
  void Handshake(int fd);
  void Refuse(int fd, int status, const std::string& why);
  // Forgets the connection; a non-empty reason is reported to the engine as a lost client.
  void Drop(int fd, const std::string& reason, bool clean);
  void PostToEngine(EngineEvent event);

  const Config config_;
  const NodePage* node_page_;
  Engine* engine_ = nullptr;
  std::string socket_path_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() and KickClient() ring it
  std::atomic<bool> stop_{false};
  std::atomic<bool> accepting_{true};
  std::atomic<uint32_t> local_size_{0};
  SpscQueue<uint32_t> kicks_{64};
  std::map<int, Connection> connections_;          // by socket fd (attach thread only)
  std::map<uint32_t, int> fd_by_local_rank_;        // attach thread only
  uint32_t next_client_id_ = 1;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_ATTACH_SERVER_H_
