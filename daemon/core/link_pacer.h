// Weighted fair sharing of a node's links between jobs served side by side (a node service):
// each job of several nodes streams its pipelined allreduces over links of its own, and the
// kernel shares a link between their TCP connections equally whatever the jobs' weights (two
// jobs registered 2:1 measured 0.50/0.50 on bench/tenants.sh). So the engine paces what each
// job puts on the network: a job's bytes posted, over its weight, is its virtual time (weighted
// fair queuing's), and a segment may go only while the job's virtual time is not ahead of the
// least of the other *active* jobs' (it may then go a segment past it). A job is active while it posts or asks to
// post (within kActiveNs of its last try); one that stops (its run ended, it waits on another
// node) stops holding the others back within that time, so pacing never holds a job behind
// one that cannot go on: among the jobs asking, the one furthest behind always may post. A job
// that becomes active again starts level with the others (no credit banked while idle). Small
// segments (under kSmallBytes: a small collective, a run's last bit) go at once and count for
// nothing: their latency is what matters, and their bytes are too few to share a link by (a job
// of 8-byte allreduces would otherwise hold a 1 MiB one back for 16,384 of its own).
//
// Node-local: nothing on the wire. Engine thread only.
#ifndef SYNCD_DAEMON_CORE_LINK_PACER_H_
#define SYNCD_DAEMON_CORE_LINK_PACER_H_

#include <cstdint>
#include <map>

namespace syncd {

class LinkPacer {
 public:
  // Longer than the gap between two segments of a streaming job (a 128 KiB segment at 2.5 Gbit/s
  // shared by two jobs: 0.85 ms), short enough that a job waiting on another node holds nobody.
  static constexpr uint64_t kActiveNs = 2'000'000;
  static constexpr uint64_t kSmallBytes = uint64_t{32} << 10;

  // Whether job `job` (of weight `weight` >= 1) may post `bytes` to the network now; counts them
  // when it may.
  bool MayPost(uint64_t job, uint32_t weight, uint64_t bytes, uint64_t now_ns);
  // The job is gone (removed from the daemon).
  void Forget(uint64_t job) { flows_.erase(job); }
  // Segments held back, of every job over the daemon's life and of one job while it is here
  // (syncctl status's LINK_WAITS).
  uint64_t held() const { return held_; }
  uint64_t held(uint64_t job) const {
    const auto it = flows_.find(job);
    return it == flows_.end() ? 0 : it->second.held;
  }

 private:
  struct Flow {
    double virtual_bytes = 0;  // bytes posted over weight
    uint64_t last_try_ns = 0;
    bool seen = false;
    uint64_t held = 0;
  };
  bool Active(const Flow& f, uint64_t now_ns) const { return f.seen && now_ns - f.last_try_ns < kActiveNs; }

  std::map<uint64_t, Flow> flows_;
  uint64_t held_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_LINK_PACER_H_
