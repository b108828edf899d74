#include "daemon/transport/comm_task.h"

namespace syncd {

CommTask::~CommTask() {
  if (!h_) return;
  auto& p = h_.promise();
  if (p.transport != nullptr)
    for (CommHandle c : p.waiting) p.transport->Cancel(c);
  h_.destroy();
}

bool CommTask::Poll() {
  if (done()) return true;
  auto& p = h_.promise();
  if (p.until) {
    if (p.until()) {
      p.until = nullptr;
      h_.resume();
    }
    return done();
  }
  if (!p.children.empty()) {
    bool all = true;
    for (CommTask* c : p.children) all &= c->Poll();
    if (all || (p.first_only && p.children.front()->done())) {
      p.children.clear();
      h_.resume();
    }
    return done();
  }
  Transport* t = p.transport;
  t->Progress();
  std::vector<CommHandle> still;
  Status failure;
  for (CommHandle c : p.waiting) {
    Status err;
    switch (t->Test(c, &err)) {
      case CommState::kPending: still.push_back(c); break;
      case CommState::kDone: break;
      case CommState::kFailed:
        if (failure.ok()) failure = std::move(err);
        break;
    }
  }
  // A collective needs every node: once any peer is known lost, stop waiting on the others.
  if (failure.ok() && !still.empty())
    if (std::optional<Status> lost = t->PeerFailure()) failure = *lost;
  if (!failure.ok()) {
    for (CommHandle c : still) t->Cancel(c);
    still.clear();
    p.wait_status = std::move(failure);
  }
  p.waiting = std::move(still);
  if (p.waiting.empty()) h_.resume();
  return done();
}

}  // namespace syncd
