// What a ring entry may say: every check a SubmitEntry passes before it becomes a Request. The
// entry was copied out of shared memory, but the client controls every byte of it, and of the
// arena it points into, so nothing is trusted. Pure (reads the arena, changes nothing); engine
// thread only.
#ifndef SYNCD_DAEMON_ENGINE_SUBMISSION_H_
#define SYNCD_DAEMON_ENGINE_SUBMISSION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"
#include "daemon/shm/client_segment.h"

namespace syncd {

// The submitting client and what its requests are checked against.
struct Submitter {
  uint32_t client_id = 0;
  uint32_t rank = 0;
  uint32_t local_rank = 0;
  const ClientSegment* segment = nullptr;
  uint32_t world_size = 1;
  uint64_t fusion_threshold = 0;  // for the plan of a registered graph
  // The global ranks of the process set the entry names (nullptr: a set this job does not have).
  const std::vector<uint32_t>* set_ranks = nullptr;
  // An allreduce that asks for the daemon's default compression: --compression (syncd_compression)
  // for tensors of at least --compression-min-bytes.
  uint32_t compression = SYNCD_COMPRESSION_NONE;
  uint64_t compression_min_bytes = 0;
  uint32_t compression_ppm = 10'000;  // --compression-ratio: top-k's and random-k's when not asked
  uint32_t compression_rank = 4;      // --compression-rank: PowerSGD's when not asked
};

// A checked request, or the error (with its status code) the submitter's request fails with.
// A GPU tensor comes back with the descriptor copied out of the arena in `*gpu`, for the engine's
// GPU executor to map (its `data` is not set yet). `blank`: a default request to build it in
// (RequestPool::Take: with a spent request's storage).
StatusOr<Request> ParseSubmission(const abi::SubmitEntry& e, const Submitter& who,
                                  std::optional<abi::GpuDescriptor>* gpu, Request blank = Request{});

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_SUBMISSION_H_
