// The engine's observer (engine.cc, Observe): a thread that runs a tick now and then, off the
// engine thread, until it is stopped. Its tick may wait for the engine's answers, so the engine
// keeps answering while it stops it (Stop's `meanwhile`).
#ifndef SYNCD_DAEMON_ENGINE_OBSERVER_THREAD_H_
#define SYNCD_DAEMON_ENGINE_OBSERVER_THREAD_H_

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace syncd {

class ObserverThread {
 public:
  ObserverThread() = default;
  ObserverThread(const ObserverThread&) = delete;
  ObserverThread& operator=(const ObserverThread&) = delete;
  ~ObserverThread() {
    if (thread_.joinable()) Stop([] {});
  }

  // Runs `tick` at once, then every `period` until Stop. `name`: the thread's, as `top -H` shows it.
  void Start(const char* name, std::chrono::milliseconds period, std::function<void()> tick) {
    thread_ = std::thread([this, name, period, tick = std::move(tick)] {
      pthread_setname_np(pthread_self(), name);
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        lock.unlock();
        tick();
        lock.lock();
        wake_.wait_for(lock, period, [this] { return stop_; });
      }
      exited_.store(true, std::memory_order_release);
    });
  }
  // Stops it, running `meanwhile` every 100 us until its thread has exited.
  void Stop(const std::function<void()>& meanwhile) {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    while (!exited_.load(std::memory_order_acquire)) {
      meanwhile();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    thread_.join();
  }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<bool> exited_{false};
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_OBSERVER_THREAD_H_
