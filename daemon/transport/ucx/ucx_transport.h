// The UCX transport: one ucp_context and one ucp_worker (single-threaded mode) owned by the engine
// thread, an endpoint per peer with peer-failure handling, tag matching for messages. UCX picks
// its transports from the environment as usual (UCX_TLS=tcp, UCX_TLS=shm,tcp, ...).
//
// Two phases: Create() makes the worker and exposes its address (published through the
// rendezvous); Connect() takes every node's address and makes the endpoints.
#ifndef SYNCD_DAEMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define SYNCD_DAEMON_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "daemon/transport/process_watch.h"
#include "daemon/transport/transport.h"

namespace syncd {

struct UcxOptions {
  // Ask UCX to report lost peers (UCP_ERR_HANDLING_MODE_PEER). UCX 1.13's shared-memory
  // transports cannot do that, so an endpoint with it uses TCP even to a daemon on this host.
  // Same-host peers passed to Connect() with their pids are watched through pidfds instead and
  // get endpoints without it (shared memory) unless `peer_errors_everywhere`.
  bool detect_peer_failure = true;
  bool peer_errors_everywhere = false;
  // Whether watched same-host peers may use shared memory. A job that goes on after losing a
  // daemon (--on-loss continue|restore) must not: a daemon killed while it wrote into a peer's
  // shared-memory FIFO leaves a slot reserved and never filled, and the peer receives nothing from
  // anyone after it (its survivors hung; UCX has no recovery for that). Such peers are still
  // watched through pidfds, and get UCX error handling too (TCP).
  bool same_host_shared_memory = true;
};

class UcxTransport final : public Transport {
 public:
  static StatusOr<std::unique_ptr<UcxTransport>> Create(uint32_t rank, uint32_t size, UcxOptions options = {});
  ~UcxTransport() override;

  // This worker's address, to publish to the other nodes.
  const std::string& address() const { return address_; }
  // `addresses[r]` is node r's worker address (this node's entry is ignored). `same_host_pids[r]`
  // is node r's daemon pid when it runs on this host, else 0 (an empty vector: none known).
  Status Connect(const std::vector<std::string>& addresses, const std::vector<int32_t>& same_host_pids = {});
  // Node `peer`'s daemon came back after it was lost: a new process whose worker is at `address`
  // (`same_host_pid` its pid when on this host, else 0). The old endpoint is closed, a new one
  // made, and the peer counts as live again. What already arrived from the old process and was
  // never taken is dropped, except on set slot `keep_slot`: the slot the new process starts its
  // first set on, whose messages may be here already (it sends them as soon as it has an
  // endpoint to this node, which may be before this node hears that it is back).
  Status Reconnect(uint32_t peer, const std::string& address, int32_t same_host_pid, uint32_t keep_slot) override;
  // Endpoints to node `peer` made from now on never use shared memory (UCX error handling: TCP).
  // A daemon killed while it wrote into a peer's shared-memory FIFO leaves a slot reserved and never
  // filled, after which that peer receives nothing more through the FIFO: the daemon that replaces
  // it (a rejoin) reaches its peers without it, and Reconnect does the same toward it.
  void AvoidSharedMemoryWith(uint32_t peer);
  // How node `peer`'s failures are detected: "ucx" (endpoint error handling), "pidfd", "pidfd+ucx"
  // or "none".
  const char* failure_detection(uint32_t peer) const;
  // UCX's description of the endpoint to node `peer` (ucp_ep_print_info: its lanes and the
  // transport of each), for logs and tests; empty before Connect().
  std::string endpoint_info(uint32_t peer) const;

  // Graceful shutdown in two steps, so that several transports (or a job's daemons) can close
  // their endpoints together: StartClose() once, then CloseDone() until it returns true.
  void StartClose();
  bool CloseDone();

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  CommHandle Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) override;
  CommHandle Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) override;
  bool Progress() override;
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t messages_sent() const override { return messages_sent_; }
  Arm ArmForSleep(std::vector<pollfd>* fds) override;
  void Woken(const pollfd* fds, size_t n) override;
  CommState Test(CommHandle h, Status* error) override;
  void Cancel(CommHandle h) override;
  void SetEpoch(uint32_t epoch) override;
  void DiscardArrived() override;
  std::optional<Status> PeerFailure() const override { return peer_failure_; }
  bool PeerLost(uint32_t peer) const override { return peer < peer_lost_.size() && peer_lost_[peer]; }

  // UCX requests the transport still holds (posted, or cancelled and not yet given back).
  size_t requests_in_flight() const;

  // Called from UCX callbacks; public only for them.
  struct Slot {
    UcxTransport* owner = nullptr;
    uint32_t index = 0;
    uint32_t generation = 0;
    bool in_use = false;
    bool orphaned = false;  // cancelled: release when UCX reports back
    bool is_recv = false;
    uint32_t peer = 0;
    size_t expected = 0;
    void* request = nullptr;
    BufferOwner buffer;  // held while UCX may touch the buffer
    CommState state = CommState::kPending;
    Status error;
  };
  struct PeerContext {
    UcxTransport* owner;
    uint32_t peer;
  };
  void OnPeerError(uint32_t peer, const std::string& why);
  bool IsCurrentEndpoint(uint32_t peer, ucp_ep_h ep) const {
    return peer < eps_.size() && (eps_[peer] == nullptr || eps_[peer] == ep);
  }
  void Finish(Slot* s, ucs_status_t status, size_t received);

 private:
  UcxTransport(uint32_t rank, uint32_t size) : rank_(rank), size_(size) {}
  std::pair<CommHandle, Slot*> NewSlot(bool is_recv, uint32_t peer, size_t bytes, BufferOwner buffer);
  Slot* Lookup(CommHandle h);
  void Release(Slot* s);
  CommHandle Failed(Slot* s, CommHandle h, Status error);
  uint64_t WireTag(uint32_t src, uint64_t tag) const;
  // Receives and drops one message that arrived unexpected and whose tag matches `tag` under
  // `mask`; false when there is none.
  bool DiscardOne(uint64_t tag, uint64_t mask);
  bool SendsOutstanding() const;
  // Makes the endpoint to node `p` (Connect, Reconnect).
  Status ConnectPeer(uint32_t p, const std::string& address, int32_t same_host_pid);
  // Marks every watched same-host peer whose daemon has exited as lost.
  void CheckWatchedPeers();

  uint32_t rank_, size_;
  uint32_t epoch_ = 0;
  UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;  // the worker's event descriptor (owned by UCX), -1 where it has none
  std::string address_;
  std::vector<ucp_ep_h> eps_;
  std::vector<std::unique_ptr<PeerContext>> peer_contexts_;
  std::vector<bool> peer_lost_;
  std::vector<uint8_t> detection_;  // per peer: 0 none, 1 ucx, 2 pidfd, 3 both
  std::vector<bool> no_shared_memory_;  // per peer: AvoidSharedMemoryWith
  std::vector<bool> force_closed_;  // per peer, by StartClose
  ProcessWatch watch_;
  uint64_t next_watch_check_ns_ = 0;
  std::optional<Status> peer_failure_;  // the first lost peer's, while any is lost
  std::vector<Status> peer_why_;        // per lost peer
  bool closing_started_ = false;
  uint64_t bytes_sent_ = 0;  // Send's, posted
  uint64_t messages_sent_ = 0;
  std::vector<void*> closing_;
  std::deque<Slot> slots_;  // stable addresses: UCX callbacks hold Slot*
  std::vector<uint32_t> free_slots_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
