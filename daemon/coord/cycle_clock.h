// When a set's negotiation cycles run (negotiator.h): Horovod's timer (a cycle cycle_ns after the
// previous one started), or at once on fresh work (start_on_work), or only when some node asks
// (on demand, topo); the global sleep's agreed start (gs); the slower timer of an idle job; and
// the graceful drain, which needs a cycle filled everywhere after it began to find no node
// holding work. It keeps time and counts cycles only: the cycle itself is the negotiator's.
//
// Engine thread only (the negotiator's).
#ifndef SYNCD_DAEMON_COORD_CYCLE_CLOCK_H_
#define SYNCD_DAEMON_COORD_CYCLE_CLOCK_H_

#include <algorithm>
#include <cstdint>

namespace syncd {

class CycleClock {
 public:
  struct Rules {
    uint64_t cycle_ns = 1'000'000;
    uint32_t gs_period = 0;  // gs: every gs_period cycles the nodes agree on a common sleep
    bool start_on_work = false;
    bool on_demand = false;
  };
  explicit CycleClock(Rules rules) : rules_(rules) {}
  const Rules& rules() const { return rules_; }

  // A tensor became ready here (`anew`: work after quiet, which ends an idle spell too).
  void Fresh(bool anew = true) {
    fresh_ = true;
    if (anew) idle_since_ns_ = 0;
  }
  // On demand: another node asked for cycle `cycle`.
  void Wanted(uint64_t cycle) { wanted_ = std::max(wanted_, cycle); }
  // The job start handshake is done at `now_ns`: the timer counts from there.
  void Joined(uint64_t now_ns) { last_start_ = now_ns; }

  // Whether a cycle is due at `now_ns` (`nothing_pending`: no name waits here).
  bool Due(uint64_t now_ns, bool nothing_pending) const {
    if (rules_.on_demand)
      return fresh_ || wanted_ > seq_ || (draining_ && now_ns >= last_start_ + rules_.cycle_ns);
    const uint64_t timer = rules_.gs_period ? next_start_ : last_start_ + Period(now_ns, nothing_pending);
    return now_ns >= timer || (rules_.start_on_work && fresh_);
  }
  // On demand, a cycle no other node asked for: this node asks (for seq() + 1).
  bool MustAsk() const { return rules_.on_demand && wanted_ <= seq_; }
  // A cycle starts at `now_ns` (`idle`: nothing pending here). Returns how long the set was
  // between cycles (0 before the first).
  uint64_t Start(uint64_t now_ns, bool idle) {
    const uint64_t between = last_end_ != 0 ? now_ns - last_end_ : 0;
    last_start_ = now_ns;
    fresh_ = false;
    running_ = true;
    started_idle_ = idle;
    return between;
  }
  // The running cycle's number, counted as its body begins.
  uint64_t NextSeq() { return ++seq_; }
  uint64_t seq() const { return seq_; }
  // The running cycle agreed on `n` tensors.
  void Agreed(uint32_t n) { agreed_ = n; }
  // The running cycle ended at `now_ns`: what it was.
  struct Ended {
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t agreed = 0;
  };
  Ended End(uint64_t now_ns) {
    const Ended e{last_start_, now_ns, agreed_};
    const bool idle = started_idle_ && agreed_ == 0;
    running_ = false;
    last_end_ = now_ns;
    if (!idle) idle_since_ns_ = 0;
    else if (idle_since_ns_ == 0) idle_since_ns_ = now_ns;
    agreed_ = 0;
    return e;
  }
  // The running cycle was cancelled (the job ended).
  void Cancel() { running_ = false; }
  bool running() const { return running_; }
  bool started_idle() const { return started_idle_; }
  // gs: how long Horovod would sleep after a cycle that started at last_start(); the agreed
  // sleep's end.
  uint64_t LocalSleep(uint64_t now_ns, bool nothing_pending) const {
    const uint64_t elapsed = now_ns - last_start_;
    const uint64_t period = Period(now_ns, nothing_pending);
    return elapsed < period ? period - elapsed : 0;
  }
  void SleepUntil(uint64_t t_ns) { next_start_ = t_ns; }

  // When the next cycle is due, for the engine's idle sleep (0: at once).
  uint64_t NextNs(uint64_t now_ns, bool nothing_pending) const {
    // A cycle that carries nothing of this node's waits for the other nodes' timers: look at it
    // now and then instead of polling the network without pause (an idle job's cycles would
    // keep the engine spinning). Local work that arrives meanwhile rings the doorbell.
    if (running_ && started_idle_ && nothing_pending) return now_ns + kIdleCyclePollNs;
    if (running_ || (rules_.start_on_work && fresh_)) return 0;
    // On demand no timer starts a cycle but the drain's: an idle job sleeps until work rings the
    // doorbell or another node's request arrives on the network (it woke every 10 ms for
    // nothing, 100 times a second per idle job).
    if (rules_.on_demand)
      return fresh_ || wanted_ > seq_ ? 0 : draining_ ? last_start_ + Period(now_ns, nothing_pending) : UINT64_MAX;
    return rules_.gs_period ? next_start_ : last_start_ + Period(now_ns, nothing_pending);
  }

  // Graceful drain, job-wide: each cycle's agreement says whether any node holds work.
  // `local_busy`: the engine holds work here.
  void Drain(bool local_busy) {
    // The second cycle to start here after the drain began is the first whose every part was
    // filled after it: another node fills its part of a cycle once the one before it ended
    // there, which needs this node's part of that one. The first may have been filled before,
    // with a request that node had not taken in yet.
    if (!draining_) quiet_from_ = seq_ + 2;
    draining_ = true;
    local_busy_ = local_busy;
  }
  bool local_busy() const { return local_busy_; }
  // Cycle `seq`'s agreement found no node holding work.
  void Quiet(uint64_t seq) { quiet_cycle_ = seq; }
  // Whether a cycle filled everywhere after the drain began found no node holding work, and
  // nothing came here since (`work`: something is pending here).
  bool QuietSinceDrain(bool work) const {
    return draining_ && !work && !running_ && quiet_cycle_ == seq_ && quiet_cycle_ >= quiet_from_;
  }

 private:
  static constexpr uint64_t kIdleCyclePollNs = 10'000'000;
  // After this long with nothing in this node's cycles, the cycle timer slows to
  // kIdleCyclePeriodNs where cycles also start on work (or on demand): the first tensor after
  // a quiet spell starts its node's cycle at once, so only a node whose ranks have nothing for
  // it waits for the slower timer. An idle job's daemons then wake 100 times a second, not 1000;
  // after kDeepIdleAfterNs 20 times (an idle cycle costs a daemon 150 us of CPU here, its
  // messages' wake-ups most of it: 2 % of a core at 100 a second, the goal is under 1 %). A
  // node whose ranks joined or were lost holds their stand-ins pending, so it is never idle.
  static constexpr uint64_t kIdleBackoffAfterNs = 1'000'000'000;
  static constexpr uint64_t kIdleCyclePeriodNs = 10'000'000;
  static constexpr uint64_t kDeepIdleAfterNs = 5'000'000'000;
  static constexpr uint64_t kDeepIdleCyclePeriodNs = 50'000'000;
  uint64_t Period(uint64_t now_ns, bool nothing_pending) const {
    // On demand an idle job runs no cycles at all: quiet since the last one ended.
    const uint64_t quiet_since =
        idle_since_ns_ != 0 ? idle_since_ns_ : (rules_.on_demand && !running_ && !fresh_ && nothing_pending ? last_end_ : 0);
    const uint64_t quiet = (rules_.start_on_work || rules_.on_demand) && quiet_since != 0 ? now_ns - quiet_since : 0;
    if (quiet >= kDeepIdleAfterNs) return std::max(rules_.cycle_ns, kDeepIdleCyclePeriodNs);
    if (quiet >= kIdleBackoffAfterNs) return std::max(rules_.cycle_ns, kIdleCyclePeriodNs);
    return rules_.cycle_ns;
  }

  const Rules rules_;
  bool running_ = false;
  bool started_idle_ = false;   // the running cycle started with nothing pending here
  uint64_t idle_since_ns_ = 0;  // end of the first of the idle cycles since the last work, or 0
  uint32_t agreed_ = 0;         // tensors the running cycle agreed on
  uint64_t seq_ = 0;
  uint64_t last_start_ = 0;
  uint64_t last_end_ = 0;
  uint64_t next_start_ = 0;  // gs: when the agreed sleep ends
  bool fresh_ = false;       // tensors became ready since the last cycle started
  uint64_t wanted_ = 0;      // on demand: the highest cycle number another node asked for
  bool draining_ = false, local_busy_ = false;
  uint64_t quiet_cycle_ = 0;  // the last cycle whose agreement found no node holding work (0: none)
  uint64_t quiet_from_ = 0;   // the first cycle that counts for QuietSinceDrain
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_CYCLE_CLOCK_H_
