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
  while (!done() && Step()) {
  }
  return done();
}

bool CommTask::Step() {
  auto& p = h_.promise();
  if (p.until) {
    if (!p.until()) return false;
    p.until = nullptr;
    h_.resume();
    return true;
  }
  if (!p.children.empty()) {
    bool all = true;
    for (CommTask* c : p.children) all &= c->Poll();
    if (!all && !(p.first_only && p.children.front()->done())) return false;
    p.children.clear();
    h_.resume();
    return true;
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
  if (!p.waiting.empty()) return false;
  h_.resume();
  return true;
}

}  // namespace syncd
