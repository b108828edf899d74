// How the engine waits when a turn of its loop did nothing: sleeping on its doorbell and the
// network, polling, yielding or spinning, by what waits and by whether its cores are its own
// (core_contention.h). Split from engine.cc.
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "daemon/base/affinity.h"
#include "daemon/engine/engine.h"

namespace syncd {
namespace {

constexpr uint64_t kIdleSleepNs = 50'000'000;  // bounded so the heartbeat stays fresh
// A non-blocking cycle waiting on the network, where ranks share the engine's core: poll this
// long after the last progress, then nap on the network and the doorbell this long at a time.
constexpr uint64_t kCycleSpinNs = 50'000;
constexpr uint64_t kCycleNapNs = 50'000;
// --network-wait sleep: the longest sleep on the network, a safety bound (every wait there is
// signalled by UCX's event descriptor or the doorbell).
constexpr uint64_t kNetworkSleepNs = 1'000'000;
constexpr uint64_t kBlindSleepNs = 10'000'000;

}  // namespace

// Sleeps until the doorbell rings (a client's submission, a command, a stop), `timeout_ns`
// passes or, with `network`, the transport has something (its event descriptor, a watched
// daemon's exit): one ppoll on all of them. Returns false where the transport cannot sleep (the
// caller polls instead). The doorbell protocol of
// proto/doorbell.h: announce the sleep, look for work once more, then sleep.
bool Engine::Sleep(uint64_t timeout_ns, bool network) {
  abi::Doorbell* bell = &node_page_->page()->engine_doorbell;
  bell->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool slept = true;
  if (!HasWork() && !stop_.load(std::memory_order_relaxed) && !commands_.pending()) {
    if (network) {
      slept = links_.WaitForEvents(timeout_ns, node_page_->wake_fd());
    } else {
      pollfd p{node_page_->wake_fd(), POLLIN, 0};
      const timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
      (void)ppoll(&p, 1, &ts, nullptr);
    }
    if (slept) ++tally_.wakeups;
  }
  bell->sleeping.store(0, std::memory_order_relaxed);
  node_page_->TakeRings();
  return slept;
}

bool Engine::RanksShareEngineCore() const {
  for (const auto& [id, c] : clients_)
    if (c.info->shares_engine_core) return true;
  return false;
}

// Nothing was done this turn: sleep until the next timer, the doorbell or the network (an idle
// daemon must hear another node's request at once: a TOPO or nbcs cycle, a partial round), poll
// what waits on the network, yield or pause, depending on what waits and for how long
// (`since_work`) nothing was done.
void Engine::Idle(uint64_t now, uint64_t since_work, uint64_t spin_ns) {
  uint64_t sleep_ns = kIdleSleepNs;
  bool data_waits = false;  // a TOPO group, GPU work or partial round waits (not only a cycle)
  for (const auto& [id, t] : tenants_) {
    const uint64_t next = t->job->NextPollNs(now, &data_waits);
    if (next != UINT64_MAX) sleep_ns = next > now ? std::min(sleep_ns, next - now) : 0;
    if (t->job->WaitsOnNetwork()) sleep_ns = 0;  // a transfer from another node rings no doorbell
  }
  // GPU work completes, and clients' events fire, without ringing anything.
  if (gpu_ && (gpu_->in_flight() > 0 || held_gpu_ > 0)) sleep_ns = 0;
  if (since_work > spin_ns && sleep_ns > 0) {
    // A transport the engine cannot sleep on: timers only, and a look at the network every
    // kBlindSleepNs (an on-demand cycle another node asks for has no timer here).
    if (!Sleep(sleep_ns, HasNetwork())) Sleep(HasNetwork() ? std::min(sleep_ns, kBlindSleepNs) : sleep_ns, false);
    node_page_->Heartbeat();
    // No spin after a wake-up by itself: one that brings work counts as work in Run, a timer's
    // (cycles, partial rounds, the heartbeat) goes back to sleep (an idle daemon's 1 ms cycle
    // timer followed by 200 us of spinning was 20 % of a core).
  } else if (sleep_ns == 0 && !data_waits && SleepsOnNetwork() && HasNetwork() &&
             !(gpu_ && (gpu_->in_flight() > 0 || held_gpu_ > 0))) {
    // Daemons that share cores (--network-wait sleep): a cycle waiting on other nodes (nbcs)
    // sleeps until the network's next event; polling, it took the slice of the daemon whose
    // message it waited for (32 daemons on 2 cores: an 8-byte nbcs step 43-49 ms polling, 11-15
    // ms asleep). Data on the move still polls below (TOPO at 8 and 32 daemons: 520-547 us and
    // 5.6-5.7 ms polling against 620-730 us and 6.5-7.5 ms asleep).
    if (since_work <= spin_ns || !Sleep(kNetworkSleepNs, true)) sched_yield();
    node_page_->Heartbeat();
  } else if (sleep_ns == 0) {
    // Something waits on the network. A non-blocking cycle (nbcs) that has waited a while
    // waits for other nodes' timers or late ranks: where ranks share the engine's core, nap on
    // the network and the doorbell (50 us at a time) rather than take a share of their core
    // (100 % of one here while a node was 3 s late). Data on the move (TOPO groups, GPU work,
    // partial rounds) keeps polling and yielding: sleeping there measured worse, twice (topo on
    // the scaled imbalance bench, 2 x 2: 137.5 against 143.8 ms per step with a 50 us nap;
    // 142-145 against 148-154 ms sleeping until the network's next event).
    const bool nap = !data_waits && since_work > kCycleSpinNs && HasNetwork() &&
                     !(gpu_ && gpu_->in_flight() > 0) && RanksShareEngineCore() && Sleep(kCycleNapNs, true);
    if (!nap) sched_yield();
  } else if (contention_.crowded()) {
    // Other engines wait for this core (CoreContention): spin, but let them have it at each look.
    sched_yield();
  } else {
    __builtin_ia32_pause();
  }
}

void Engine::CountOtherDaemons() {
  contention_.SetOtherDaemons(ProcessesSharingCores("syncd", AllowedCores()));
}

bool Engine::SleepsOnNetwork() const {
  return config_.network_wait == NetworkWait::kSleep ||
         (config_.network_wait == NetworkWait::kAuto && contention_.contended());
}

// A change of verdict on the engine's core (CoreContention), said in the log.
void Engine::SayContention() const {
  spdlog::info("engine: {}", EngineWait());
}

std::string Engine::EngineWait() const {
  switch (config_.network_wait) {
    case NetworkWait::kPoll: return "poll";
    case NetworkWait::kSleep: return "sleep";
    case NetworkWait::kAuto: break;
  }
  const uint32_t n = contention_.other_daemons();
  const std::string others = std::to_string(n) + (n == 1 ? " other daemon" : " other daemons") + " on its cores)";
  return contention_.crowded()      ? "auto: sleeps on the network, yields while it spins (" + others
         : contention_.contended() ? "auto: sleeps on the network, spins after work (" + others
                                   : "auto: spins (no other daemon on its cores)";
}

}  // namespace syncd
