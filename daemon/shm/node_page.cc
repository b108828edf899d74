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
  n.PublishMembership(0, 1, {});
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

void NodePage::PublishMembership(uint32_t membership, uint32_t job_nodes, std::span<const uint32_t> set_nodes) const {
  abi::NodePage* p = page();
  const uint32_t seq = p->set_nodes_seq.load(std::memory_order_relaxed);
  p->set_nodes_seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // odd before any of the words changes
  uint64_t words[abi::kMaxListedNodes / 64] = {};
  const auto add = [&](uint32_t node) {
    if (node < abi::kMaxListedNodes) words[node / 64] |= uint64_t{1} << (node % 64);
  };
  if (set_nodes.empty())
    for (uint32_t n = 0; n < job_nodes; ++n) add(n);
  for (uint32_t n : set_nodes) add(n);
  for (size_t w = 0; w < std::size(words); ++w) p->set_nodes[w].store(words[w], std::memory_order_relaxed);
  p->job_nodes.store(job_nodes, std::memory_order_relaxed);
  p->membership.store(membership, std::memory_order_release);
  p->set_nodes_seq.store(seq + 2, std::memory_order_release);
}

void NodePage::TakeRings() const {
  uint64_t count;
  while (read(wake_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

}  // namespace syncd
