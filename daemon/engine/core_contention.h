// Whether the engine's core is its own (--network-wait auto), measured at start, once a second
// for 10 s and every 10 s after: the other syncd daemons that may run on its cores (/proc), and the share of the
// engine thread's runnable time spent waiting for a CPU (its run delay, /proc/thread-self/
// schedstat) over windows of kWindowNs, shown in the status.
//
// What decides is the first, measured here with bench/engine_cost.sh's layouts (8-byte and
// 64 KiB allreduce, 2 cores; each choice against the last, alternated three times):
// - no other daemon (one daemon, or two each pinned to a core of its own, their ranks sharing
//   them): spinning is fastest; sleeping at once cost two daemons 1.7x the time and 1.5x the
//   engine's CPU per collective;
// - another daemon on its cores (three and four daemons on two cores): it sleeps on the network
//   while a cycle waits (what syncrun used to set for more daemons than cores) and still spins
//   after its work: sleeping at once as well was no better (4 daemons: engine CPU 117-128
//   against 101-153 us per 8-byte allreduce, 64 KiB slower);
// - two or more others (eight daemons on two cores): it also yields the core at each look while
//   it spins (sched_yield, where it paused): each engine's CPU per 8-byte allreduce 351-374
//   against 424-440 us, 1.4 wake-ups against 1.8, the time the same (2.0-2.2 ms); at 32
//   daemons 902-999 against 1,044-1,156 us. Sleeping at once instead cut the CPU further
//   (282-310 against 379-409 us) but woke each engine 4 times per collective.
// The run delay does not tell these apart once the engine sleeps (two daemons 25 % spinning,
// 52-56 % sleeping; four 48 %, eight 61-70 %), so it is shown, not used.
#ifndef SYNCD_DAEMON_ENGINE_CORE_CONTENTION_H_
#define SYNCD_DAEMON_ENGINE_CORE_CONTENTION_H_

#include <atomic>
#include <cstdint>

namespace syncd {

class CoreContention {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000'000;
  // The other daemons are counted every kWindowNs for the daemon's first kEarlyNs (a job's
  // daemons start together), every kRecountNs after (a count reads every process's name in
  // /proc: on a node of a thousand processes a few ms).
  static constexpr uint64_t kEarlyNs = 10'000'000'000;
  static constexpr uint64_t kRecountNs = 10'000'000'000;
  static constexpr uint64_t kMinRunnableNs = 2'000'000;

  CoreContention() = default;
  ~CoreContention();
  CoreContention(const CoreContention&) = delete;
  CoreContention& operator=(const CoreContention&) = delete;

  // Starts measuring the calling thread (call on the engine thread). Returns false where the
  // kernel has no schedstat (the run delay is then not known).
  bool Open();
  // Reads the run delay once a window has passed since the last read; returns whether it did.
  bool Sample(uint64_t now_ns);
  // One window's share (its run and run-delay ns); a window in which the thread was runnable
  // for under kMinRunnableNs (an idle daemon asleep) leaves the last share.
  void Update(uint64_t run_ns, uint64_t delay_ns);

  // From any thread (the observer counts them): other daemons that may run on its cores.
  void SetOtherDaemons(uint32_t n) { other_daemons_.store(n, std::memory_order_relaxed); }
  uint32_t other_daemons() const { return other_daemons_.load(std::memory_order_relaxed); }
  // Another daemon may run on its cores: a cycle waiting on the network sleeps on it.
  bool contended() const { return other_daemons() > 0; }
  // Two or more: the engine yields the core at each look while it spins.
  bool crowded() const { return other_daemons() > 1; }
  bool measured() const { return fd_ >= 0; }
  // The last window's share of runnable time spent waiting for a CPU, in percent (-1: none yet).
  double wait_pct() const { return wait_pct_; }

 private:
  int fd_ = -1;
  uint64_t next_ns_ = 0, run_ns_ = 0, delay_ns_ = 0;
  bool based_ = false;
  double wait_pct_ = -1;
  std::atomic<uint32_t> other_daemons_{0};
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_CORE_CONTENTION_H_
