#include "daemon/shm/node_page.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace syncd {

StatusOr<NodePage> NodePage::Create() {
  NodePage n;
  SYNCD_ASSIGN_OR_RETURN(n.mapping_, SharedMapping::Create("syncd-node", 4096));
  n.wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (n.wake_fd_ < 0) return Status(SYNCD_ERR_INTERNAL, std::string("eventfd for the engine's doorbell: ") + strerror(errno));
  abi::NodePage* p = new (n.mapping_.data()) abi::NodePage();
  p->magic = abi::kMagic;
  p->version = abi::kVersion;
  n.Heartbeat();
  n.SetState(abi::DaemonState::kStarting);
  return n;
}

NodePage::NodePage(NodePage&& other) noexcept
    : mapping_(std::move(other.mapping_)), wake_fd_(std::exchange(other.wake_fd_, -1)) {}

NodePage& NodePage::operator=(NodePage&& other) noexcept {
  if (this != &other) {
    if (wake_fd_ >= 0) close(wake_fd_);
    mapping_ = std::move(other.mapping_);
    wake_fd_ = std::exchange(other.wake_fd_, -1);
  }
  return *this;
}

NodePage::~NodePage() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void NodePage::TakeRings() const {
  uint64_t count;
  while (read(wake_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

}  // namespace syncd
