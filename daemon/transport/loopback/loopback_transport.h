// In-process transport for unit tests: N endpoints joined by a hub. Sends complete at once
// (the payload is copied into the hub); receives complete when a matching message is there.
// All endpoints of a hub must be driven from one thread.
#ifndef SYNCD_DAEMON_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define SYNCD_DAEMON_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "daemon/transport/transport.h"

namespace syncd {

class LoopbackHub {
 public:
  explicit LoopbackHub(uint32_t size) : size_(size), lost_(size, false) {}
  uint32_t size() const { return size_; }
  // Simulates a node dying: its peers see failures from now on.
  void Kill(uint32_t rank) { lost_[rank] = true; }
  bool lost(uint32_t rank) const { return lost_[rank]; }

 private:
  friend class LoopbackTransport;
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;  // src, dst, epoch << 48 | tag
  uint32_t size_;
  std::vector<bool> lost_;
  std::map<Key, std::deque<std::vector<char>>> queues_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(LoopbackHub* hub, uint32_t rank) : hub_(hub), rank_(rank) {}

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return hub_->size(); }
  // Sends copy at once; a receive is written only inside Progress(), so Cancel withdraws it
  // and a receive's owner is held until Test() or Cancel().
  CommHandle Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) override;
  CommHandle Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) override;
  bool Progress() override;
  CommState Test(CommHandle h, Status* error) override;
  void Cancel(CommHandle h) override;
  void SetEpoch(uint32_t epoch) override;
  void DiscardArrived() override;
  std::optional<Status> PeerFailure() const override;
  bool PeerLost(uint32_t peer) const override { return hub_->lost(peer); }

 private:
  struct Op {
    bool is_recv;
    uint32_t peer;
    uint64_t tag;
    void* data;
    size_t bytes;
    CommState state;
    Status error;
    BufferOwner owner;
  };
  LoopbackHub* hub_;
  uint32_t rank_;
  uint64_t epoch_ = 0;  // already shifted above the tag bits
  CommHandle next_ = 1;
  std::map<CommHandle, Op> ops_;  // ordered: receives match in posting order
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
