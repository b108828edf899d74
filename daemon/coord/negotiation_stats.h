// Counters of one daemon's coordination, kept by the negotiator and shown by syncctl. Plain data.
#ifndef SYNCD_DAEMON_COORD_NEGOTIATION_STATS_H_
#define SYNCD_DAEMON_COORD_NEGOTIATION_STATS_H_

#include <cstdint>

namespace syncd {

struct NegotiationStats {
  uint64_t cycles = 0;
  uint64_t cycle_ns_total = 0;         // start of each cycle to its agreement taken (a fence's: run)
  uint64_t coordination_ns_total = 0;  // bit-vector agreement + coordinator round
  uint64_t cache_hits = 0;             // names agreed through the cache
  uint64_t cache_misses = 0;           // names that needed the coordinator
  uint64_t coordinator_rounds = 0;
  uint64_t execution_ns_total = 0;     // moving and reducing the agreed tensors
  uint64_t blocked_ns_total = 0;       // inside blocking collectives (0 unless `blocking`)
  uint64_t idle_ns_total = 0;          // from the end of one cycle to the start of the next
  uint64_t sleep_agreements = 0;       // gs: global minimum sleeps agreed
  uint64_t agreed_sleep_ns_total = 0;  // gs: the sleeps taken after agreements
  uint64_t coordination_messages = 0;  // point-to-point messages this daemon sent to coordinate
  uint64_t coordination_bytes = 0;
  uint64_t cycle_requests = 0;         // on_demand: cycles this daemon asked the others to run
  uint64_t overlapped_cycles = 0;      // agreed while the agreement before ran here
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_NEGOTIATION_STATS_H_
