// A non-blocking collective written as a C++20 coroutine over a Transport.
//
//   CommTask Ring(Transport* t, ...) {
//     Status st = co_await Wait(t, t->Send(...), t->Recv(...));
//     if (!st.ok()) co_return st;
//     ...
//     co_return Status::Ok();
//   }
//
// The coroutine runs eagerly until its first co_await. The owner then calls Poll() from its
// loop (the engine thread): it progresses the transport and resumes the coroutine once all
// awaited handles finished, or at once with the error when one failed (the others are
// cancelled). A task may also await child tasks (WaitTasks), which Poll() drives in turn.
// Nothing ever blocks. Destroying an unfinished task cancels what it awaits.
#ifndef SYNCD_DAEMON_TRANSPORT_COMM_TASK_H_
#define SYNCD_DAEMON_TRANSPORT_COMM_TASK_H_

#include <absl/container/inlined_vector.h>

#include <coroutine>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "daemon/transport/transport.h"

namespace syncd {

// Coroutine frames of finished tasks, kept per thread by size (rounded up to 64 bytes, up to
// 4 KiB, a few dozen of each) and reused by the next task of that size: a many-node collective is
// a handful of nested tasks, and without this each was a heap allocation. Frames freed on a
// thread whose pool is gone, larger ones, and a full class go back to the heap. Under
// AddressSanitizer frames come from the heap, so use-after-free of a frame is still caught.
class FramePool {
 public:
  static void* Get(size_t bytes);
  static void Put(void* frame, size_t bytes);
};

class CommTask;
// What one co_await waits for: a few handles or child tasks, held inline (no heap allocation per
// wait, which on the many-node path is several per collective).
using CommHandles = absl::InlinedVector<CommHandle, 8>;
using CommTasks = absl::InlinedVector<CommTask*, 4>;

class CommTask {
 public:
  struct promise_type {
    Status result;
    Transport* transport = nullptr;
    CommHandles waiting;
    CommTasks children;                     // child tasks awaited with WaitTasks
    bool first_only = false;                // resume when children[0] is done (all are driven)
    std::function<bool()> until;            // WaitUntil: resume once it returns true
    Status wait_status;

    static void* operator new(size_t bytes) { return FramePool::Get(bytes); }
    static void operator delete(void* frame, size_t bytes) { FramePool::Put(frame, bytes); }

    CommTask get_return_object() { return CommTask(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_value(Status s) { result = std::move(s); }
    void unhandled_exception() { std::terminate(); }
  };

  CommTask() = default;
  CommTask(CommTask&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  CommTask& operator=(CommTask&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~CommTask();

  bool done() const { return !h_ || h_.done(); }
  // The result once done().
  const Status& status() const { return h_.promise().result; }
  // Drives the task; returns done(). Whenever a step resumes the coroutine, the next wait it
  // suspends on is looked at at once: it may be satisfied already (a send that completed inside
  // the call that posted it), and no event will come for it.
  bool Poll();

 private:
  // One step: whether it resumed the coroutine.
  bool Step();
  explicit CommTask(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

// co_await Wait(t, handles...): Status::Ok() when all finished, else the first failure.
struct WaitAll {
  Transport* transport;
  CommHandles handles;
  std::coroutine_handle<CommTask::promise_type> h;

  bool await_ready() const noexcept { return handles.empty(); }
  void await_suspend(std::coroutine_handle<CommTask::promise_type> handle) {
    h = handle;
    h.promise().transport = transport;
    h.promise().waiting = std::move(handles);
    h.promise().wait_status = Status::Ok();
  }
  Status await_resume() { return h ? std::move(h.promise().wait_status) : Status::Ok(); }
};

// co_await Await(tasks): resumes once every child task is done; the first failure wins.
// co_await AwaitFirst(tasks): drives all of them but resumes once tasks[0] is done (a pipeline
// waiting for its oldest stage while the younger ones keep moving); returns tasks[0]'s status.
struct WaitTasks {
  CommTasks tasks;
  bool first_only = false;
  std::coroutine_handle<CommTask::promise_type> h;

  bool await_ready() const noexcept {
    for (CommTask* t : tasks) {
      if (!t->done()) return false;
      if (first_only) return true;
    }
    return true;
  }
  void await_suspend(std::coroutine_handle<CommTask::promise_type> handle) {
    h = handle;
    h.promise().children = tasks;  // inline: a copy, no allocation
    h.promise().first_only = first_only;
  }
  Status await_resume() {
    for (CommTask* t : tasks) {
      if (!t->status().ok()) return t->status();
      if (first_only) break;
    }
    return Status::Ok();
  }
};

// co_await WaitUntil{ready}: resumes once ready() returns true, checked at each Poll() (work
// that completes outside the transport, such as a GPU stream).
struct WaitUntil {
  std::function<bool()> ready;
  bool await_ready() const { return ready(); }
  void await_suspend(std::coroutine_handle<CommTask::promise_type> handle) { handle.promise().until = ready; }
  void await_resume() const noexcept {}
};

// co_await StepAside{}: resumes at the owner's next Poll(), not this one (the owner serves others
// between two pieces of the task's own work).
struct StepAside {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<CommTask::promise_type> handle) {
    handle.promise().until = [polled = false]() mutable { return std::exchange(polled, true); };
  }
  void await_resume() const noexcept {}
};

// (GCC 12 cannot keep an initializer_list's array in a coroutine frame, hence no braces.)
inline WaitTasks Await(CommTask* task) {
  WaitTasks w;
  w.tasks.push_back(task);
  return w;
}
inline WaitTasks Await(const std::vector<CommTask*>& tasks) {
  WaitTasks w;
  w.tasks.assign(tasks.begin(), tasks.end());
  return w;
}
inline WaitTasks AwaitFirst(const CommTasks& tasks) {
  WaitTasks w;
  w.tasks = tasks;
  w.first_only = true;
  return w;
}
inline WaitTasks AwaitFirst(const std::vector<CommTask*>& tasks) {
  WaitTasks w;
  w.tasks.assign(tasks.begin(), tasks.end());
  w.first_only = true;
  return w;
}

template <typename... H>
WaitAll Wait(Transport* t, H... handles) {
  return WaitAll{t, {CommHandle(handles)...}, {}};
}
inline WaitAll Wait(Transport* t, const std::vector<CommHandle>& handles) {
  return WaitAll{t, CommHandles(handles.begin(), handles.end()), {}};
}
inline WaitAll Wait(Transport* t, CommHandles handles) { return WaitAll{t, std::move(handles), {}}; }

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_COMM_TASK_H_
