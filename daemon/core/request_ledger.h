// Every request this daemon took off a client's ring, from then until it is finished: the one
// place that makes "every submitted request gets exactly one completion" a fact rather than a
// convention. The engine opens a request as it reads the entry (whatever becomes of it: refused,
// run, failed, abandoned) and finishes it where completions leave for the client
// (Engine::Complete). Finish refuses a second completion of one handle, counts it, and aborts a
// debug build (a release build logs it and goes on: the client must not see it).
//
// Keyed by (client id, handle): client ids are never reused by a daemon, and a client never has
// one handle in flight twice (a duplicate is a protocol error, refused at Open). An open-
// addressing table (abseil's flat_hash_set) that allocates only when it grows, not per request.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_
#define SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_

#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <utility>

namespace syncd {

class RequestLedger {
 public:
  // A request is in flight from now; false if this client already has `handle` in flight.
  bool Open(uint32_t client, uint64_t handle) { return open_.insert({client, handle}).second; }
  // The request's completion: true the first time, false (counted; a debug build aborts) for a
  // handle that is not in flight: a second completion.
  bool Finish(uint32_t client, uint64_t handle);

  // Requests in flight now, and second completions refused since the daemon started.
  uint64_t open() const { return open_.size(); }
  uint64_t refused() const { return refused_; }
  bool IsOpen(uint32_t client, uint64_t handle) const { return open_.contains({client, handle}); }

 private:
  absl::flat_hash_set<std::pair<uint32_t, uint64_t>> open_;
  uint64_t refused_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_REQUEST_LEDGER_H_
