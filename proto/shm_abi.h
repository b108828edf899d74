// The shared-memory protocol between a client process and its node's syncd.
//
// Both sides include this header; nothing here allocates or owns memory. The daemon creates each
// client's segment (a memfd it passes at attach) and a node page shared by all its clients; the
// client maps both. Layout rules: every field has a fixed size, offsets are relative to the start
// of the mapping, and indices that two processes write live on their own cache lines.
//
// Trust: the daemon never trusts what a client wrote. It copies each ring entry out of shared
// memory before validating it, and checks ring indices and arena ranges itself.
#ifndef SYNCD_PROTO_SHM_ABI_H_
#define SYNCD_PROTO_SHM_ABI_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "syncd/client.h"

namespace syncd::abi {

inline constexpr uint32_t kMagic = 0x53594e43;  // "SYNC"
inline constexpr uint32_t kVersion = 17;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kNameBytes = SYNCD_MAX_NAME + 1;
inline constexpr size_t kMaxDims = SYNCD_MAX_DIMS;
inline constexpr size_t kMessageBytes = 480;
inline constexpr size_t kArenaAlignment = 64;
inline constexpr uint32_t kMaxListedNodes = 16384;  // JobView::set_nodes

// kRegisterGraph: the payload is a TOPO graph in the encoding of proto/graph_wire.h, named
// kTopoPlanName; it completes once every daemon of the job holds the same plan.
// kFail: this rank cannot take part in the collective of this name (its own checks refused the
// tensor); the arena range holds why (UTF-8, at most kFailMessageBytes). Every rank's request of
// the name fails with it, so no rank waits for one that will never submit.
// kAddProcessSet, kRemoveProcessSet: collectives of the global set that create or remove a
// process set (the ranks, int64_t each, in the arena range; the id to remove in `root`). They
// complete with "process set <id>" once every daemon of the job made the same change.
// kAllgather and kAlltoall: the result's size is known only once every rank has submitted, so
// the daemon writes it into a block of the client's result area (ResultHeader) and the completion
// says where. kReducescatter: in place, this rank's rows at the start of its tensor.
// kReduce: `root` (a global rank of the set) gets the reduction in place; the others' tensors stay.
// kGather: `root` gets every rank's tensor in a block of its result area; the others get none.
// kScatter: every rank gets its share of `root`'s rows in a block of its result area; the other
// ranks submit 0 rows.
enum class OpKind : uint32_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kBarrier = 3,
  kRegisterGraph = 4,
  kFail = 5,
  kAllgather = 6,
  kAlltoall = 7,
  kReducescatter = 8,
  kAddProcessSet = 9,
  kRemoveProcessSet = 10,
  kJoin = 11,
  kPartialAllreduce = 12,
  kTimeline = 13,
  kSend = 14,
  kRecv = 15,
  kReduce = 16,
  kGather = 17,
  kScatter = 18,
};
inline constexpr uint32_t kOpKindLast = uint32_t(OpKind::kScatter);
// kSend, kRecv (syncd_send_async, syncd_recv_async): a tensor from one rank to another of the same
// process set, through their daemons and never coordinated (daemon/engine/point_to_point.h).
// `root`: the peer's global rank (kRecv: -1, any rank of the set); `tag`: the user's tag (>= 0).
// A receive completes with "source <global rank>".
inline constexpr bool IsPointToPoint(OpKind k) { return k == OpKind::kSend || k == OpKind::kRecv; }
// kTimeline (syncd_start_timeline, syncd_stop_timeline): not a collective; the rank's daemon starts
// (the arena holds the file's path) or stops (no bytes) the job's timeline and completes it at once.
inline constexpr char kTimelineName[] = "syncd.timeline";
inline constexpr size_t kTimelinePathBytes = 4096;
// kPartialAllreduce (eager-SGD's partial collectives): a persistent allreduce of one name that
// runs in rounds once enough ranks arrived (`partial_mode`: solo, majority; `root`: the quorum k,
// 0 for the mode's own). Each rank's contributions accumulate in the daemon until a round takes
// them, so a late rank loses nothing; it gets the latest round's result at once. The completion
// says "round <r> nap <n> initiator <rank> fresh <0|1> ranks <hex bitmap of the fresh set ranks>".
// kJoin (hvd.join): this rank has no more data. Until every rank of the job has joined, it takes
// part in the others' collectives with nothing of its own (zeros to reduce, no rows to gather);
// then every join completes with "last rank <r>", the last rank to join.
inline constexpr char kJoinName[] = "syncd.join";
inline constexpr int32_t kMaxProcessSets = 62;  // live at once, the global set included
inline constexpr bool IsSetChange(OpKind k) { return k == OpKind::kAddProcessSet || k == OpKind::kRemoveProcessSet; }
inline constexpr size_t kFailMessageBytes = 1024;
inline constexpr char kTopoPlanName[] = "syncd.topo_plan";

// ---- UDS handshake: one AttachRequest from the client, one AttachReply (+ kAttachFds) back. ----
// The descriptors, in this order: the client's segment, the node page, and the engine's wake-up
// eventfd (the engine's doorbell rings it: the engine sleeps on it beside its network's
// descriptors, which a futex could not share a wait with).
inline constexpr int kAttachFds = 3;
// AttachRequest::flags. kHandBack (syncd_reattach): the client's daemon is gone and it hands the
// segment the old daemon made back to the one serving its run directory now, its arena as it is
// (the segment's descriptor travels with the request's bytes, SCM_RIGHTS); the reply sends it
// back as the first descriptor.
inline constexpr uint32_t kAttachHandBack = 1u;
struct AttachRequest {
  uint32_t magic;
  uint32_t version;
  int32_t rank, size, local_rank, local_size;
  int32_t pid;
  uint32_t flags;   // kAttachHandBack, else 0
  uint64_t job_id;  // 0: unspecified (matches any job)
};

struct AttachReply {
  uint32_t magic;
  uint32_t version;
  int32_t status;  // syncd_status
  uint32_t client_id;
  uint64_t segment_bytes;
  uint64_t node_page_bytes;
  int32_t node_rank, node_count;
  // How long a waiting client polls (yielding) before it sleeps on its doorbell: 0 when it may
  // run on a core the engine uses, where a polling client only delays the engine.
  uint32_t client_spin_us;
  uint32_t coord_mode;  // CoordMode: lets a framework binding know whether TOPO plans are used
  char message[256];  // why the attach was refused
};

enum class CoordMode : uint32_t { kNegotiate = 0, kGs = 1, kNbcs = 2, kTopo = 3 };
inline constexpr const char* kCoordModeNames[] = {"negotiate", "gs", "nbcs", "topo"};
inline const char* CoordName(CoordMode m) { return kCoordModeNames[uint32_t(m)]; }

// After the handshake the socket carries one thing: this byte, sent by a client that detaches
// cleanly (syncd_shutdown) just before it closes. A close without it means the process died.
inline constexpr char kGoodbyeByte = 'G';

// ---- Rings ----
// One submission entry per request. The name is NUL-terminated inside the entry.
struct SubmitEntry {
  uint64_t handle;
  uint32_t kind;   // OpKind
  uint32_t dtype;  // syncd_dtype
  uint32_t op;     // syncd_reduce_op
  int32_t root;
  double prescale;
  double postscale;
  uint64_t arena_offset;  // payload location inside the client's arena (kSubmitGpu: its GpuDescriptor)
  uint64_t bytes;
  uint32_t ndim;
  uint32_t flags;  // kSubmit*
  int64_t shape[kMaxDims];
  // kAlltoall: the splits, int64_t[set size] (rows to each rank), in the arena.
  uint64_t aux_offset;
  uint64_t aux_bytes;
  int32_t process_set;  // 0: the global set
  uint32_t partial_mode;  // kPartialAllreduce: syncd_partial_mode
  int64_t tag;            // kSend, kRecv: the user's tag
  uint32_t compression;   // kAllreduce: syncd_compression (0, DEFAULT, for every other kind)
  uint32_t compression_ppm;  // kAllreduce, top-k and random-k: the ratio in parts per million (0: the daemon's)
  char name[kNameBytes];
};
static_assert(sizeof(SubmitEntry) == 360);

// SubmitEntry::flags.
inline constexpr uint32_t kSubmitGpu = 1;  // the tensor is in GPU memory, described by a GpuDescriptor

// A GPU tensor, as the client describes it (in its arena, at SubmitEntry::arena_offset, until the
// request completes). The daemon opens the allocation's IPC handle (cached by client and
// `alloc_base`; a different handle at the same base means the allocation was freed and replaced),
// makes its stream wait for the work the caller queued before submitting (`ready`), and reads and
// writes [offset, offset + SubmitEntry::bytes) of the allocation.
inline constexpr size_t kIpcHandleBytes = 64;
// GpuDescriptor::ready: how the daemon's stream waits for the caller's stream.
inline constexpr uint32_t kReadyNow = 0;    // nothing was queued: the tensor is ready
inline constexpr uint32_t kReadyEvent = 1;  // an interprocess event recorded on the caller's stream
// A 64-bit flag in a small device allocation of the client's: the caller's stream writes
// `flag_value` there after the tensor's producers (cuStreamWriteValue64, with its memory fence);
// the daemon's stream waits for a value at least as large (cuStreamWaitValue64). A flag slot
// serves one request in flight at a time and its values only grow.
inline constexpr uint32_t kReadyFlag = 2;
struct GpuDescriptor {
  uint8_t mem_handle[kIpcHandleBytes];    // cuIpcGetMemHandle of the allocation
  uint8_t event_handle[kIpcHandleBytes];  // cuIpcGetEventHandle; kReadyEvent
  uint8_t flag_handle[kIpcHandleBytes];   // cuIpcGetMemHandle of the flag's allocation; kReadyFlag
  uint8_t device_uuid[16];                // the GPU (ordinals differ between processes)
  uint64_t alloc_base;                    // the allocation's address in the client
  uint64_t alloc_bytes;
  uint64_t offset;                        // of the tensor inside the allocation
  uint64_t flag_base;                     // kReadyFlag: the flag allocation's address in the client
  uint64_t flag_bytes;
  uint64_t flag_offset;                   // of the 8-byte flag inside it
  uint64_t flag_value;
  uint32_t ready;                         // kReady*
  uint32_t reserved;
};
static_assert(sizeof(GpuDescriptor) == 272);

inline constexpr uint64_t kNoResult = ~uint64_t{0};
struct CompletionEntry {
  uint64_t handle;
  int32_t status;          // syncd_status
  uint32_t message_bytes;  // length of the text in the message slot of the same ring index
  uint64_t result_offset;  // a ResultHeader, from the start of the segment; kNoResult: in place
};

// A result block in the client's result area, written by the daemon before the completion that
// points to it. The client reads it, then sets `released`; the daemon reuses released blocks
// (and frees the blocks of results that failed before reaching the client itself).
struct ResultHeader {
  std::atomic<uint32_t> released;
  uint32_t ranks;        // entries of rows[], one per rank of the process set
  uint64_t data_offset;  // from the start of this header, kArenaAlignment-aligned
  uint64_t data_bytes;
  uint64_t reserved;
  // int64_t rows[ranks]: allgather, the first dimension each rank contributed; alltoall, the
  // rows each rank sent to this one.
};
static_assert(sizeof(ResultHeader) == 32);
constexpr uint64_t ResultDataOffset(uint32_t ranks) {
  return (sizeof(ResultHeader) + uint64_t{ranks} * sizeof(int64_t) + kArenaAlignment - 1) / kArenaAlignment *
         kArenaAlignment;
}

struct alignas(kCacheLine) PaddedIndex {
  std::atomic<uint32_t> value{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Free-running indices: depth = head - tail, slot = index & (capacity - 1).
struct RingIndices {
  PaddedIndex head;  // written by the producer only
  PaddedIndex tail;  // written by the consumer only
};

// A doorbell is a futex word the sleeper waits on plus a flag saying it sleeps, so the other side
// only pays for a wake-up syscall when someone is actually asleep. The engine's doorbell wakes
// through the node's eventfd instead of the futex (RingFd).
struct alignas(kCacheLine) Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleeping{0};
};

enum class DaemonState : uint32_t { kStarting = 0, kRunning = 1, kStopping = 2 };

// Shared by all clients of one daemon: the engine's doorbell and its liveness.
struct NodePage {
  uint32_t magic;
  uint32_t version;
  Doorbell engine_doorbell;
  alignas(kCacheLine) std::atomic<uint64_t> engine_heartbeat_ns;  // CLOCK_MONOTONIC
  std::atomic<uint32_t> daemon_state;                              // DaemonState
};
static_assert(sizeof(NodePage) <= 4096, "the node page is one page");

// A client's job as the daemon last told it (SegmentHeader::job): each client's own, so that one
// daemon can serve several jobs, each with its membership.
struct JobView {
  // How many times the job's membership changed (--on-loss continue/restore: nodes lost); 0 at
  // each job's start. A client's requests fail until it acknowledges the latest
  // (SegmentHeader::membership_seen, syncd_acknowledge_membership).
  std::atomic<uint32_t> membership;
  // The nodes of the job's global set (process set 0) under `membership`: every node of the job
  // (job_nodes of them) until it loses one, then the nodes left, one bit each (node n: bit n % 64
  // of set_nodes[n / 64]; nodes from kMaxListedNodes on are not listed). Written under a
  // sequence lock with `membership`: odd while the daemon writes (syncd_job_set_ranks reads).
  std::atomic<uint32_t> set_nodes_seq;
  std::atomic<uint32_t> job_nodes;
  std::atomic<uint64_t> set_nodes[kMaxListedNodes / 64];
};

// SegmentHeader::joined_as.
inline constexpr uint32_t kJoinedAsMember = 1;
inline constexpr uint32_t kJoinedAsReplacement = 2;

// Start of every client segment. Offsets point into the same mapping.
struct SegmentHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t segment_bytes;
  uint32_t ring_entries;  // power of two, same for both rings
  uint32_t client_id;
  uint64_t submit_ring_offset;      // SubmitEntry[ring_entries]
  uint64_t completion_ring_offset;  // CompletionEntry[ring_entries]
  uint64_t message_offset;          // char[ring_entries][kMessageBytes]
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint64_t result_offset;  // the result area (daemon-allocated blocks, see ResultHeader)
  uint64_t result_bytes;
  RingIndices submit;
  RingIndices completion;
  Doorbell client_doorbell;  // the client sleeps here waiting for completions
  // The job membership (JobView::membership) the client acknowledged: set by the daemon at
  // attach, then by the client (syncd_acknowledge_membership).
  alignas(kCacheLine) std::atomic<uint32_t> membership_seen;
  // Set by the engine once it has taken the client in (after the attach handshake, which the
  // attach server answers): kJoinedAsMember, or kJoinedAsReplacement when the client takes the
  // place of a rank the job had gone on without (syncd_replaces_lost_rank); 0 until then.
  std::atomic<uint32_t> joined_as;
  // Set by the engine when it lets the client go while the daemon goes on serving others (its
  // job removed from a node's daemon, the ring protocol broken): the client's calls fail from then
  // on, as after its daemon's loss (the daemon's heartbeat stays fresh). 0 until then.
  std::atomic<uint32_t> let_go;
  // The client's job, written by the engine before it sets joined_as, and whenever the job's
  // membership changes.
  alignas(kCacheLine) JobView job;
};

struct SegmentLayout {
  uint64_t submit_ring_offset, completion_ring_offset, message_offset, arena_offset, result_offset, total_bytes;
};

constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

constexpr SegmentLayout ComputeLayout(uint32_t ring_entries, uint64_t arena_bytes, uint64_t result_bytes) {
  SegmentLayout l{};
  l.submit_ring_offset = AlignUp(sizeof(SegmentHeader), 4096);
  l.completion_ring_offset =
      AlignUp(l.submit_ring_offset + uint64_t{ring_entries} * sizeof(SubmitEntry), kCacheLine);
  l.message_offset =
      AlignUp(l.completion_ring_offset + uint64_t{ring_entries} * sizeof(CompletionEntry), kCacheLine);
  l.arena_offset = AlignUp(l.message_offset + uint64_t{ring_entries} * kMessageBytes, 4096);
  l.result_offset = AlignUp(l.arena_offset + arena_bytes, 4096);
  l.total_bytes = AlignUp(l.result_offset + result_bytes, 4096);
  return l;
}

// Single-producer single-consumer ring over memory owned by someone else. The producer and the
// consumer each hold their own RingView on the same RingIndices; a view is not thread-safe.
template <typename Entry>
class RingView {
 public:
  RingView() = default;
  RingView(RingIndices* indices, Entry* slots, uint32_t capacity)
      : indices_(indices), slots_(slots), mask_(capacity - 1) {}

  uint32_t capacity() const { return mask_ + 1; }

  // Producer side: the slot to fill, or nullptr when full. Publish() makes it visible.
  Entry* Reserve() {
    const uint32_t head = indices_->head.value.load(std::memory_order_relaxed);
    if (head - cached_tail_ > mask_) {
      cached_tail_ = indices_->tail.value.load(std::memory_order_acquire);
      if (head - cached_tail_ > mask_) return nullptr;
    }
    return &slots_[head & mask_];
  }
  uint32_t ReservedIndex() const { return indices_->head.value.load(std::memory_order_relaxed); }
  void Publish() {
    indices_->head.value.store(indices_->head.value.load(std::memory_order_relaxed) + 1,
                               std::memory_order_release);
  }

  // Consumer side: the oldest entry, or nullptr when empty. `corrupt` is set when the producer's
  // head is further ahead than the ring holds (a misbehaving peer).
  const Entry* Front(bool* corrupt = nullptr) {
    const uint32_t tail = indices_->tail.value.load(std::memory_order_relaxed);
    if (tail == cached_head_) {
      cached_head_ = indices_->head.value.load(std::memory_order_acquire);
      if (tail == cached_head_) return nullptr;
    }
    if (cached_head_ - tail > mask_ + 1) {
      if (corrupt) *corrupt = true;
      return nullptr;
    }
    return &slots_[tail & mask_];
  }
  uint32_t FrontIndex() const { return indices_->tail.value.load(std::memory_order_relaxed); }
  void Pop() {
    indices_->tail.value.store(indices_->tail.value.load(std::memory_order_relaxed) + 1,
                               std::memory_order_release);
  }

  uint32_t Depth() const {
    return indices_->head.value.load(std::memory_order_acquire) -
           indices_->tail.value.load(std::memory_order_acquire);
  }

 private:
  RingIndices* indices_ = nullptr;
  Entry* slots_ = nullptr;
  uint32_t mask_ = 0;
  uint32_t cached_tail_ = 0;  // producer's last view of tail
  uint32_t cached_head_ = 0;  // consumer's last view of head
};

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_SHM_ABI_H_
