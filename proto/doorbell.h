// Futex doorbells on shared memory (see abi::Doorbell). Header only: the thin client uses it too.
//
// Protocol (Dekker-style, both sides use seq_cst so neither misses the other):
//   sleeper: sleeping=1; re-check for work; if none, futex_wait(seq, seen); sleeping=0
//   waker:   publish work; if sleeping: seq++, futex_wake
// The engine's doorbell is the same protocol with an eventfd in place of the futex (RingFd): the
// engine sleeps in ppoll on it and on its network's descriptors at once.
#ifndef SYNCD_PROTO_DOORBELL_H_
#define SYNCD_PROTO_DOORBELL_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "proto/shm_abi.h"

namespace syncd::abi {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The doorbells live in MAP_SHARED memory of two processes: no FUTEX_PRIVATE_FLAG.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{time_t(timeout_ns / 1'000'000'000ull), long(timeout_ns % 1'000'000'000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Waker side: call after publishing work.
// Returns whether it woke the sleeper (a futex wake: the cost the engine counts per collective).
inline bool Ring(Doorbell* bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_relaxed) == 0) return false;
  bell->seq.fetch_add(1, std::memory_order_relaxed);
  FutexWakeAll(&bell->seq);
  return true;
}

// Waker side of a doorbell whose sleeper waits on the eventfd `fd` (the engine's).
inline void RingFd(Doorbell* bell, int fd) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_relaxed) != 0) {
    bell->seq.fetch_add(1, std::memory_order_relaxed);
    const uint64_t one = 1;
    ssize_t w;
    do w = write(fd, &one, sizeof(one));
    while (w < 0 && errno == EINTR);  // EAGAIN: the counter is full, so the sleeper wakes anyway
  }
}

// Sleeper side: sleeps up to timeout_ns unless has_work() turns true after announcing the sleep.
// Returns whether it actually went to sleep.
template <typename HasWork>
bool SleepUnlessWork(Doorbell* bell, uint64_t timeout_ns, HasWork&& has_work) {
  const uint32_t seen = bell->seq.load(std::memory_order_relaxed);
  bell->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool slept = false;
  if (!has_work()) {
    FutexWait(&bell->seq, seen, timeout_ns);
    slept = true;
  }
  bell->sleeping.store(0, std::memory_order_relaxed);
  return slept;
}

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_DOORBELL_H_
