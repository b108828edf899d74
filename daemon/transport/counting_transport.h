// A Transport that forwards to another and counts the messages sent through it. The negotiator
// talks through one, so "coordination messages" in the status is an exact count, not an estimate.
#ifndef SYNCD_DAEMON_TRANSPORT_COUNTING_TRANSPORT_H_
#define SYNCD_DAEMON_TRANSPORT_COUNTING_TRANSPORT_H_

#include <utility>

#include "daemon/transport/transport.h"

namespace syncd {

class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(Transport* inner) : inner_(inner) {}

  uint32_t rank() const override { return inner_->rank(); }
  uint32_t size() const override { return inner_->size(); }
  CommHandle Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) override {
    ++sent_;
    sent_bytes_ += bytes;
    return inner_->Send(peer, tag, data, bytes, std::move(owner));
  }
  CommHandle Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) override {
    return inner_->Recv(peer, tag, data, bytes, std::move(owner));
  }
  bool Progress() override { return inner_->Progress(); }
  bool WaitForEvent(uint64_t timeout_ns, int wake_fd) override { return inner_->WaitForEvent(timeout_ns, wake_fd); }
  Arm ArmForSleep(std::vector<pollfd>* fds) override { return inner_->ArmForSleep(fds); }
  void Woken(const pollfd* fds, size_t n) override { inner_->Woken(fds, n); }
  CommState Test(CommHandle h, Status* error) override { return inner_->Test(h, error); }
  void Cancel(CommHandle h) override { inner_->Cancel(h); }
  void SetEpoch(uint32_t epoch) override { inner_->SetEpoch(epoch); }
  void DiscardArrived() override { inner_->DiscardArrived(); }
  std::optional<Status> PeerFailure() const override { return inner_->PeerFailure(); }
  bool PeerLost(uint32_t peer) const override { return inner_->PeerLost(peer); }

  uint64_t sent() const { return sent_; }
  uint64_t sent_bytes() const { return sent_bytes_; }

 private:
  Transport* inner_;
  uint64_t sent_ = 0, sent_bytes_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_COUNTING_TRANSPORT_H_
