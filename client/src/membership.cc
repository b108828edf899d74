// The job's membership as this rank sees it (elastic jobs): acknowledging a new one, the global
// set's ranks under it (from the job view in the client's segment, under its sequence lock),
// whether this rank is a replacement.
#include <sched.h>
#include <unistd.h>

#include <iterator>
#include <string>

#include "client/src/client_impl.h"
#include "proto/doorbell.h"

namespace syncd::client {

int Client::ReadSetNodes(SetNodes* out) {
  // The engine writes this client's view of its job before it takes the client in.
  if (int rc = WaitTakenIn(); rc != SYNCD_OK) return rc;
  // The daemon's writes are rare and short: a torn read is read again (a daemon that died in the
  // middle of one leaves the sequence odd: its heartbeat stops, DaemonAlive says so).
  const abi::JobView& job = header_->job;
  for (uint32_t tries = 1;; ++tries) {
    if (tries % 1024 == 0) {
      if (!DaemonAlive()) return DaemonLostError();
      sched_yield();
    }
    const uint32_t seq = job.set_nodes_seq.load(std::memory_order_acquire);
    if (seq & 1) continue;
    out->membership = job.membership.load(std::memory_order_relaxed);
    out->nodes = job.job_nodes.load(std::memory_order_relaxed);
    for (size_t w = 0; w < std::size(out->words); ++w) out->words[w] = job.set_nodes[w].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (job.set_nodes_seq.load(std::memory_order_relaxed) == seq) break;
  }
  if (out->nodes > abi::kMaxListedNodes)
    return Fail(SYNCD_ERR_INVALID, "the job has " + std::to_string(out->nodes) + " nodes; the node page lists " +
                                       std::to_string(abi::kMaxListedNodes));
  return SYNCD_OK;
}

int Client::RefreshGlobalSet(uint32_t* membership) {
  SetNodes s;
  if (int rc = ReadSetNodes(&s); rc != SYNCD_OK) return rc;
  if (membership != nullptr) *membership = s.membership;
  if (s.membership == 0) {  // the job as launched (the daemon may not have started it yet)
    global_ = SetView{0, id_.size, id_.rank, nullptr};
    return SYNCD_OK;
  }
  int before = 0, nodes = 0;  // set nodes below this rank's, and in all
  for (uint32_t node = 0; node < s.nodes; ++node) {
    if (!s.In(node)) continue;
    before += node < uint32_t(id_.node_rank);
    ++nodes;
  }
  global_ = SetView{0, nodes * id_.local_size, s.In(uint32_t(id_.node_rank)) ? before * id_.local_size + id_.local_rank : -1,
                    nullptr};
  return SYNCD_OK;
}

int Client::AcknowledgeMembership(uint32_t* membership) {
  MutexLock lock(&mu_);
  if (!DaemonAlive()) return DaemonLostError();
  // The global set the daemon runs this membership's collectives in (a later one refuses them).
  uint32_t now = 0;
  if (int rc = RefreshGlobalSet(&now); rc != SYNCD_OK) return rc;
  header_->membership_seen.store(now, std::memory_order_release);
  if (membership != nullptr) *membership = now;
  return SYNCD_OK;
}

int Client::JobSetRanks(int* ranks, int capacity, int* count, uint32_t* membership) {
  if (count == nullptr || capacity < 0 || (ranks == nullptr && capacity > 0))
    return Fail(SYNCD_ERR_INVALID, "syncd_job_set_ranks: count is NULL, or capacity is negative or without ranks");
  MutexLock lock(&mu_);
  if (!DaemonAlive()) return DaemonLostError();
  SetNodes s;
  if (int rc = ReadSetNodes(&s); rc != SYNCD_OK) return rc;
  int n = 0;
  if (s.membership == 0) {  // the job as launched
    for (; n < id_.size; ++n)
      if (n < capacity) ranks[n] = n;
  }
  for (uint32_t node = 0; node < s.nodes && s.membership > 0; ++node) {
    if (!s.In(node)) continue;
    for (int l = 0; l < id_.local_size; ++l, ++n)
      if (n < capacity) ranks[n] = int(node) * id_.local_size + l;
  }
  *count = n;
  if (membership != nullptr) *membership = s.membership;
  return SYNCD_OK;
}

int Client::ReplacesLostRank(int* replaces) {
  MutexLock lock(&mu_);
  if (int rc = WaitTakenIn(); rc != SYNCD_OK) return rc;
  if (replaces != nullptr) *replaces = header_->joined_as.load(std::memory_order_acquire) == abi::kJoinedAsReplacement ? 1 : 0;
  return SYNCD_OK;
}

int Client::WaitTakenIn() {
  // The engine takes the client in a moment after the attach handshake: wait for it.
  const uint64_t deadline = abi::MonotonicNs() + 10'000'000'000ull;
  for (uint32_t tries = 0; header_->joined_as.load(std::memory_order_acquire) == 0; ++tries) {
    if (!DaemonAlive()) return DaemonLostError();
    if (abi::MonotonicNs() > deadline)
      return Fail(SYNCD_ERR_TIMEOUT, "the daemon has not taken this rank in 10 s after its attach");
    if (tries < 64) sched_yield();
    else usleep(100);
  }
  return SYNCD_OK;
}

}  // namespace syncd::client
