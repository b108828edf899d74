// A validated collective request from one rank: what the engine works with after a ring entry
// has been copied out of shared memory and checked.
#ifndef SYNCD_DAEMON_CORE_REQUEST_H_
#define SYNCD_DAEMON_CORE_REQUEST_H_

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/plan/topo.h"
#include "daemon/shm/result_area.h"
#include "proto/shm_abi.h"

namespace syncd {

// The client of a joined rank's stand-in request (see abi::OpKind::kJoin): nobody to complete.
inline constexpr uint32_t kNoClient = UINT32_MAX;

// What the daemon's GPU stream waits for before it touches a client's GPU tensor (the work the
// caller queued before submitting; proto/shm_abi.h's GpuDescriptor::ready): nothing, the client's
// interprocess event (a cudaEvent_t opened in the daemon), or an 8-byte flag in the client's device
// memory, mapped in the daemon, reaching `value`.
struct GpuReady {
  void* event = nullptr;
  const uint64_t* flag = nullptr;
  uint64_t value = 0;
};

// How errors name a submitted tensor: "tensor 'w' from rank 3". Every submission is checked and
// few fail, so the text is built only when a message needs it (it was two or three heap
// allocations per request). Used as a string: `what + ": ..."`.
class TensorWhat {
 public:
  TensorWhat(const std::string& name, uint32_t rank) : name_(&name), rank_(rank) {}
  TensorWhat(const char* text) : text_(text) {}  // NOLINT: implicit, a description given whole
  std::string str() const { return text_ != nullptr ? text_ : "tensor '" + *name_ + "' from rank " + std::to_string(rank_); }
  operator std::string() const { return str(); }  // NOLINT: implicit, for messages
  friend std::string operator+(const TensorWhat& w, const char* s) { return w.str() + s; }
  friend std::string operator+(const TensorWhat& w, const std::string& s) { return w.str() + s; }
  friend std::string operator+(const char* s, const TensorWhat& w) { return s + w.str(); }
  friend std::string operator+(const std::string& s, const TensorWhat& w) { return s + w.str(); }

 private:
  const std::string* name_ = nullptr;
  uint32_t rank_ = 0;
  const char* text_ = nullptr;
};

// A tensor's dimensions: up to 4 held inline (no heap allocation per request for those).
using Shape = absl::InlinedVector<int64_t, 4>;

struct Request {
  uint32_t client_id = 0;
  uint32_t rank = 0;        // global rank of the submitter
  // Its place among this node's ranks of its process set (ProcessSet::Add sets it; until then,
  // and for the global set, the node-local rank), and its rank in the set.
  uint32_t local_rank = 0;
  uint32_t set_rank = 0;
  uint64_t handle = 0;      // the client's handle, echoed in the completion
  uint64_t received_ns = 0;  // abi::MonotonicNs() when the engine took it off the ring
  // For the timeline: when the nodes agreed to run it (0: never negotiated) and its execution
  // started, and its fusion group's number in the set.
  uint64_t agreed_ns = 0, exec_ns = 0;
  uint32_t group = 0;
  int32_t process_set = 0;  // the set it is coordinated in (0: the global set)
  abi::OpKind kind = abi::OpKind::kAllreduce;
  syncd_dtype dtype = SYNCD_FLOAT32;
  syncd_reduce_op op = SYNCD_SUM;
  // What only some kinds carry, each in a field of its own (the kind's Parse, or whoever makes the
  // request, sets it; the others leave it 0).
  int32_t root = 0;           // kBroadcast, kReduce, kGather, kScatter: the root's global rank
  int32_t peer = 0;           // kSend, kRecv: the peer's global rank (kRecv: -1, any source)
  int64_t tag = 0;            // kSend, kRecv
  uint32_t partial_mode = 0;  // kPartialAllreduce: syncd_partial_mode
  int32_t quorum = 0;         // kPartialAllreduce: fresh ranks a round needs (0: the mode's)
  int32_t last_joined = 0;    // kJoin: the last rank to join, once every rank has
  int32_t removed_set = 0;    // kRemoveProcessSet: the set to remove
  double prescale = 1.0;
  double postscale = 1.0;
  // kAllreduce: how its inter-node hop travels (syncd_compression, as submitted, then resolved by
  // ResolveCompression: NONE or a method) and, for top-k and random-k, the ratio in parts per
  // million (resolved: never 0).
  uint8_t compression = 0;
  uint32_t compression_ppm = 0;
  Shape shape;
  uint64_t bytes = 0;
  std::vector<int64_t> splits;  // kAlltoall: the rows this rank sends to each rank of the set
  char* data = nullptr;     // inside the client's arena (gpu: device memory)
  // Host tensors: keeps the client's segment mapped while this request exists, so `data` stays
  // readable even after the client died (its work then fails, but never reads unmapped memory).
  std::shared_ptr<const void> memory;
  // A GPU tensor: `data` is the daemon's mapping of the client's allocation on `gpu_device` (the
  // GPU executor's index), `gpu_ready` what the daemon's stream waits for before touching it.
  bool gpu = false;
  int gpu_device = -1;
  // The stand-in of a rank the job lost and goes on without (TensorTable::MarkLost): it adds
  // nothing, and AVERAGE does not count it.
  bool absent = false;
  GpuReady gpu_ready;
  // Results the daemon places (allgather, alltoall; Collective::Result): the client's result area,
  // and once a block is allocated for it (just before execution) the block's data and offset,
  // which the completion carries. A failed request's block is freed at completion.
  std::shared_ptr<ResultArea> results;
  char* result = nullptr;
  uint64_t result_offset = abi::kNoResult;
  std::string name;
  // kFail: why this rank cannot take part (syncd_fail_async); the name's requests all fail with it.
  // A collective: why this rank's result could not be placed (it fails, the others complete).
  std::string failure;
  // kTimeline: the file to start writing ("": stop).
  std::string text;
  // kRegisterGraph: the plan computed from the graph the rank sent; `shape` holds its hash.
  std::shared_ptr<const TopoPlan> plan;

  // A stand-in (JoinedRequest: a joined, lost or vacant rank's, no client's): its data is the
  // identity of its reduction, and reductions leave it out (its prescale with it).
  bool stands_in() const { return client_id == kNoClient; }
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_REQUEST_H_
