// A process set's view of the job's transport: its members are some of the job's nodes (member
// i is parent node nodes[i]) and its messages carry the set's slot in the top bits of the tag, so
// that the set's collectives and coordination never match another set's. Everything else
// (progress, completion, peer failures, epochs) is the parent's: one network, one engine thread.
//
// Slots 1..62 are the sets' (the tag layout: tag_space.h).
#ifndef SYNCD_DAEMON_TRANSPORT_SET_TRANSPORT_H_
#define SYNCD_DAEMON_TRANSPORT_SET_TRANSPORT_H_

#include <vector>

#include "daemon/transport/transport.h"

namespace syncd {

class SetTransport final : public Transport {
 public:
  // `nodes`: the parent ranks of the members, in order; this node is one of them.
  SetTransport(Transport* parent, std::vector<uint32_t> nodes, uint32_t slot);

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return uint32_t(nodes_.size()); }
  CommHandle Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) override {
    return parent_->Send(nodes_[peer], Tag(tag), data, bytes, std::move(owner));
  }
  CommHandle Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) override {
    return parent_->Recv(nodes_[peer], Tag(tag), data, bytes, std::move(owner));
  }
  bool Progress() override { return parent_->Progress(); }
  bool WaitForEvent(uint64_t timeout_ns, int wake_fd) override { return parent_->WaitForEvent(timeout_ns, wake_fd); }
  Arm ArmForSleep(std::vector<pollfd>* fds) override { return parent_->ArmForSleep(fds); }
  void Woken(const pollfd* fds, size_t n) override { parent_->Woken(fds, n); }
  CommState Test(CommHandle h, Status* error) override { return parent_->Test(h, error); }
  void Cancel(CommHandle h) override { parent_->Cancel(h); }
  // The job's epoch and its leftovers are the parent's business.
  void SetEpoch(uint32_t) override {}
  void DiscardArrived() override {}
  std::optional<Status> PeerFailure() const override;
  bool PeerLost(uint32_t peer) const override { return parent_->PeerLost(nodes_[peer]); }

 private:
  uint64_t Tag(uint64_t tag) const { return (tag & kTagMask & ~kSetSlotMask) | slot_bits_; }

  Transport* parent_;
  std::vector<uint32_t> nodes_;
  uint32_t rank_ = 0;
  uint64_t slot_bits_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_SET_TRANSPORT_H_
