// The engine's links to other nodes' daemons: the daemon's own job's transport (--nodes, made
// before the engine starts), and the links of each job of several nodes a node service runs
// side by side (OwnLinks, taken over by AdoptJobCommand, kept until the job is removed). A
// tenant runs on its job's own links where it has them, else on the daemon's.
//
// Engine thread only, but any() (the observer thread asks it).
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_LINKS_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_LINKS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/engine/tenant.h"
#include "daemon/transport/transport.h"

namespace syncd {

class EngineLinks {
 public:
  explicit EngineLinks(std::unique_ptr<Transport> daemons) : daemons_(std::move(daemons)) {}

  // The daemon's own job's (null: this node alone).
  Transport* daemons() const { return daemons_.get(); }
  void Adopt(uint64_t job, OwnLinks links) {
    jobs_[job] = std::move(links);
    own_.store(jobs_.size(), std::memory_order_relaxed);
  }
  void Forget(uint64_t job) {
    if (const auto it = jobs_.find(job); it != jobs_.end()) gone_messages_ += it->second.transport->messages_sent();
    jobs_.erase(job);
    own_.store(jobs_.size(), std::memory_order_relaxed);
  }
  // Job `job`'s own links (null: it has none, it runs on the daemon's).
  const OwnLinks* Of(uint64_t job) const {
    const auto it = jobs_.find(job);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  // Whether any job here has other nodes to hear from. Any thread (the observer's: how often to
  // report; it read the map while a job's removal erased from it, ThreadSanitizer).
  bool any() const { return daemons_ != nullptr || own_.load(std::memory_order_relaxed) != 0; }
  // Messages every transport of the engine sent (a removed job's links' included).
  uint64_t messages_sent() const {
    uint64_t n = gone_messages_ + (daemons_ ? daemons_->messages_sent() : 0);
    for (const auto& [job, links] : jobs_) n += links.transport->messages_sent();
    return n;
  }
  // Sleeps on every transport at once (Transport::WaitForEvents); false where one cannot.
  bool WaitForEvents(uint64_t timeout_ns, int wake_fd) {
    all_.clear();
    if (daemons_) all_.push_back(daemons_.get());
    for (const auto& [job, links] : jobs_) all_.push_back(links.transport.get());
    return !all_.empty() && Transport::WaitForEvents(all_.data(), all_.size(), timeout_ns, wake_fd);
  }

 private:
  std::unique_ptr<Transport> daemons_;
  std::map<uint64_t, OwnLinks> jobs_;
  std::atomic<size_t> own_{0};  // jobs_.size(), for any()
  std::vector<Transport*> all_;  // WaitForEvents's, kept for its storage
  uint64_t gone_messages_ = 0;   // of removed jobs' links
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_LINKS_H_
