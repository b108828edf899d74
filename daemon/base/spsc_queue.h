// Bounded single-producer single-consumer queue between two threads of the daemon. Head and tail
// sit on their own cache lines; Push and Pop never block and never allocate.
#ifndef SYNCD_DAEMON_BASE_SPSC_QUEUE_H_
#define SYNCD_DAEMON_BASE_SPSC_QUEUE_H_

#include <atomic>
#include <cstddef>
#include <optional>
#include <vector>

namespace syncd {

template <typename T>
class SpscQueue {
 public:
  // `capacity` is rounded up to a power of two.
  explicit SpscQueue(size_t capacity) {
    size_t c = 2;
    while (c < capacity) c <<= 1;
    slots_.resize(c);
    mask_ = c - 1;
  }

  // Producer thread only. False when full (the value is left untouched).
  bool Push(T&& value) {
    const size_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) > mask_) return false;
    slots_[head & mask_] = std::move(value);
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer thread only.
  std::optional<T> Pop() {
    const size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_.load(std::memory_order_acquire)) return std::nullopt;
    std::optional<T> v(std::move(slots_[tail & mask_]));
    tail_.store(tail + 1, std::memory_order_release);
    return v;
  }

  bool Empty() const { return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire); }

 private:
  std::vector<T> slots_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) std::atomic<size_t> tail_{0};
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_SPSC_QUEUE_H_
