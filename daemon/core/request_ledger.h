// Every request this daemon took off a client's ring, from then until it is finished: the one
// place that makes "every submitted request gets exactly one completion" a fact rather than a
// convention, and that knows where each request stands. The engine opens a request as it reads
// the entry (whatever becomes of it: refused, run, failed, abandoned) and finishes it where
// completions leave for the client (Engine::Complete). Finish refuses a second completion of one
// handle, counts it, and aborts a debug build (a release build logs it and goes on: the client
// must not see it).
//
// In between, the request moves through explicit states, each entered where its owner hands it
// on (so `syncctl status` can say, per process set, how many requests are where and for how
// long, which is what tells a hang in coordination from one in a collective):
//   waiting      for the other local ranks (the set's tensor table) or, point-to-point, a peer
//   negotiating  every local rank is in; the nodes have not agreed to run it yet (the
//                negotiator, the partial runner's rounds)
//   agreed       the nodes agreed (a cycle's agreement, a TOPO plan group); its group has not
//                started
//   executing    its group runs (host or GPUs), or its transfer is on the wire
// and done is Finish.
//
// Keyed by (client id, handle): client ids are never reused by a daemon, and a client never has
// one handle in flight twice (a duplicate is a protocol error, refused at Open). An open-
// addressing table (abseil's flat_hash_map) that allocates only when it grows, not per request.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_
#define SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_

#include <absl/container/flat_hash_map.h>

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "daemon/core/request.h"

namespace syncd {

enum class RequestState : uint8_t { kWaiting, kNegotiating, kAgreed, kExecuting };
inline constexpr size_t kRequestStates = 4;
// "waiting", "negotiating", "agreed", "executing".
const char* RequestStateName(RequestState s);

// Requests in flight in one process set, by state (indexed by RequestState), and since when the
// oldest of each state has been in it (0: none).
struct RequestStates {
  std::array<uint64_t, kRequestStates> count{};
  std::array<uint64_t, kRequestStates> oldest_since_ns{};
};

class RequestLedger {
 public:
  // A request is in flight from now (waiting, in no set yet); false if this client already has
  // `handle` in flight.
  // `large`: its job counts it among its large requests (InFlightOf).
  bool Open(uint32_t client, uint64_t handle, uint64_t now_ns, uint64_t job = 0, bool large = false);
  // Request `r` entered `state` in its set (r.process_set) at `now_ns`. Requests without a
  // client (a joined rank's stand-in) and handles not in flight are left alone.
  void Enter(const Request& r, RequestState state, uint64_t now_ns);
  void EnterAll(const std::vector<Request>& requests, RequestState state, uint64_t now_ns) {
    for (const Request& r : requests) Enter(r, state, now_ns);
  }
  // The request's completion: true the first time, false (counted; a debug build aborts) for a
  // handle that is not in flight: a second completion.
  bool Finish(uint32_t client, uint64_t handle);

  // Requests in flight now, and second completions refused since the daemon started.
  uint64_t open() const { return open_.size(); }
  uint64_t refused() const { return refused_; }
  bool IsOpen(uint32_t client, uint64_t handle) const { return open_.contains({client, handle}); }
  // Where `client`'s request `handle` stands (nullptr: not in flight).
  const RequestState* StateOf(uint32_t client, uint64_t handle) const;
  // The requests of job `job`'s set `set` in flight, by state.
  RequestStates InSet(uint64_t job, int32_t set) const;
  // Job `job`'s requests in flight, in any state, and how many of them are large.
  struct JobInFlight {
    uint64_t all = 0, large = 0;
  };
  JobInFlight InFlightOf(uint64_t job) const {
    const auto it = jobs_.find(job);
    return it == jobs_.end() ? JobInFlight{} : it->second;
  }

 private:
  struct Entry {
    uint64_t job = 0;  // its client's (jobs served side by side each have a set 0)
    int32_t set = -1;  // -1: not yet in a set
    RequestState state = RequestState::kWaiting;
    uint64_t since_ns = 0;
    bool large = false;
  };
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, Entry> open_;
  absl::flat_hash_map<uint64_t, JobInFlight> jobs_;  // by job, while it has any in flight
  uint64_t refused_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_
