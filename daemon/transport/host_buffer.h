// A daemon-owned staging buffer for host collectives (the fusion buffer). Its storage is shared
// with the transfers that use it: one cut off by a failure keeps the storage (as its
// BufferOwner) until the network lets go, and Reserve never hands out storage that such a
// transfer still holds, so a late write from an aborted job lands in memory nobody uses.
#ifndef SYNCD_DAEMON_TRANSPORT_HOST_BUFFER_H_
#define SYNCD_DAEMON_TRANSPORT_HOST_BUFFER_H_

#include <cstddef>
#include <memory>
#include <vector>

namespace syncd {

class HostBuffer {
 public:
  using Block = std::shared_ptr<std::vector<char>>;

  // Storage of at least `bytes`. Call with no transfer of this buffer's own in flight; keep
  // the result while using it and pass it as the transfers' owner.
  Block Reserve(size_t bytes) {
    if (block_ == nullptr || block_.use_count() > 1 || block_->size() < bytes) {
      const size_t keep = block_ != nullptr ? block_->size() : 0;
      block_ = std::make_shared<std::vector<char>>(keep > bytes ? keep : bytes);
    }
    return block_;
  }

 private:
  Block block_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_HOST_BUFFER_H_
