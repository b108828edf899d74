// The daemon side of abi::NodePage: the engine's doorbell and heartbeat, shared with all clients,
// and the eventfd the doorbell rings (passed to every client at attach). Created once by the
// daemon; the engine thread is the only one that sleeps on it.
#ifndef SYNCD_DAEMON_SHM_NODE_PAGE_H_
#define SYNCD_DAEMON_SHM_NODE_PAGE_H_

#include <span>

#include "daemon/shm/shared_mapping.h"
#include "proto/doorbell.h"

namespace syncd {

class NodePage {
 public:
  static StatusOr<NodePage> Create();
  NodePage() = default;
  NodePage(NodePage&& other) noexcept;
  NodePage& operator=(NodePage&& other) noexcept;
  ~NodePage();

  abi::NodePage* page() const { return reinterpret_cast<abi::NodePage*>(mapping_.data()); }
  int fd() const { return mapping_.fd(); }
  uint64_t size() const { return mapping_.size(); }
  // The eventfd the engine's doorbell rings (non-blocking): the engine polls it beside its
  // network's descriptors; clients write it.
  int wake_fd() const { return wake_fd_; }

  void Heartbeat() const { page()->engine_heartbeat_ns.store(abi::MonotonicNs(), std::memory_order_relaxed); }
  void SetState(abi::DaemonState s) const {
    page()->daemon_state.store(uint32_t(s), std::memory_order_release);
  }
  // Wakes the engine (any thread may call it).
  void Wake() const { abi::RingFd(&page()->engine_doorbell, wake_fd_); }
  // The engine, after a sleep: takes the rings that woke it (so the next poll sleeps again).
  void TakeRings() const;

 private:
  SharedMapping mapping_;
  int wake_fd_ = -1;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_SHM_NODE_PAGE_H_
