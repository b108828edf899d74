// The daemon side of abi::NodePage: the engine's doorbell and heartbeat, shared with all clients.
// Created once by the daemon; the engine thread is the only one that sleeps on it.
#ifndef SYNCD_DAEMON_SHM_NODE_PAGE_H_
#define SYNCD_DAEMON_SHM_NODE_PAGE_H_

#include "daemon/shm/shared_mapping.h"
#include "proto/doorbell.h"

namespace syncd {

class NodePage {
 public:
  static StatusOr<NodePage> Create();

  abi::NodePage* page() const { return reinterpret_cast<abi::NodePage*>(mapping_.data()); }
  int fd() const { return mapping_.fd(); }
  uint64_t size() const { return mapping_.size(); }

  void Heartbeat() const { page()->engine_heartbeat_ns.store(abi::MonotonicNs(), std::memory_order_relaxed); }
  void SetState(abi::DaemonState s) const {
    page()->daemon_state.store(uint32_t(s), std::memory_order_release);
  }
  // Wakes the engine (any thread may call it).
  void Wake() const { abi::Ring(&page()->engine_doorbell); }

 private:
  SharedMapping mapping_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_SHM_NODE_PAGE_H_
