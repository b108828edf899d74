// The engine's periods and deadlines that more than one of its source files uses.
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_TIMING_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_TIMING_H_

#include <cstdint>

namespace syncd::engine_timing {

// Stalls are looked for (and a blocked negotiation cycle yields to the engine loop) this often.
inline constexpr uint64_t kStallCheckPeriodNs = 1'000'000'000;
// How long a daemon that leaves a job (it stops, or its ranks start another) tries to tell the
// other nodes before it goes on without them knowing.
inline constexpr uint64_t kLeaveNoticeNs = 500'000'000;
// How long requests wait for a rank that detached cleanly between collectives to attach again.
inline constexpr uint64_t kRejoinGraceNs = 2'000'000'000;

}  // namespace syncd::engine_timing

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_TIMING_H_
