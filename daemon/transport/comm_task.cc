#include "daemon/transport/comm_task.h"

#include <array>
#include <cstddef>

#include "daemon/base/sanitizers.h"

namespace syncd {

namespace {

constexpr bool kPoolFrames = !kAddressSanitizer;

constexpr size_t kFrameAlign = 64, kFrameClasses = 64, kFramesPerClass = 32;  // classes up to 4 KiB

struct Frames {
  std::array<std::vector<void*>, kFrameClasses> free;
  ~Frames();
};
thread_local bool frames_gone = false;  // trivially destructible: still readable after ~Frames
Frames::~Frames() {
  frames_gone = true;
  for (std::vector<void*>& list : free)
    for (void* f : list) ::operator delete(f);
}
Frames& ThreadFrames() {
  thread_local Frames frames;
  return frames;
}
// The class of a frame of `bytes`, or kFrameClasses when it is not pooled.
size_t ClassOf(size_t bytes) { return kPoolFrames ? (bytes + kFrameAlign - 1) / kFrameAlign - 1 : kFrameClasses; }

}  // namespace

void* FramePool::Get(size_t bytes) {
  const size_t c = ClassOf(bytes);
  if (c >= kFrameClasses || frames_gone) return ::operator new(bytes);
  std::vector<void*>& list = ThreadFrames().free[c];
  if (list.empty()) return ::operator new((c + 1) * kFrameAlign);
  void* f = list.back();
  list.pop_back();
  return f;
}

void FramePool::Put(void* frame, size_t bytes) {
  const size_t c = ClassOf(bytes);
  if (c < kFrameClasses && !frames_gone) {
    std::vector<void*>& list = ThreadFrames().free[c];
    if (list.size() < kFramesPerClass) {
      if (list.capacity() == 0) list.reserve(kFramesPerClass);
      list.push_back(frame);
      return;
    }
  }
  ::operator delete(frame);
}

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
  // The handles still pending stay, in order, at the front of `waiting` (no copy).
  Status failure;
  size_t still = 0;
  for (CommHandle c : p.waiting) {
    Status err;
    switch (t->Test(c, &err)) {
      case CommState::kPending: p.waiting[still++] = c; break;
      case CommState::kDone: break;
      case CommState::kFailed:
        if (failure.ok()) failure = std::move(err);
        break;
    }
  }
  p.waiting.resize(still);
  // A collective needs every node: once any peer is known lost, stop waiting on the others.
  if (failure.ok() && still > 0)
    if (std::optional<Status> lost = t->PeerFailure()) failure = *lost;
  if (!failure.ok()) {
    for (CommHandle c : p.waiting) t->Cancel(c);
    p.waiting.clear();
    p.wait_status = std::move(failure);
  }
  if (!p.waiting.empty()) return false;
  h_.resume();
  return true;
}

}  // namespace syncd
