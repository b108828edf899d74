// The state behind one syncd_client handle. One per attached process; see syncd/client.h for the
// public contract. All members are guarded by mu_ except the immutable attach results.
#ifndef SYNCD_CLIENT_CLIENT_IMPL_H_
#define SYNCD_CLIENT_CLIENT_IMPL_H_

#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/arena_allocator.h"
#include "proto/mutex.h"
#include "proto/shm_abi.h"
#include "syncd/client.h"

namespace syncd::client {

// Records the error text for syncd_last_error() and returns the code.
int Fail(int status, std::string message);

// syncd_allreduce_compressed_ratio_async's `ratio` as the ring entry carries it (top-k's and
// random-k's in parts per million, PowerSGD's rank as it is; 0 stays 0: the daemon's), or the
// error naming `what` (the tensor) when it is out of range.
int CompressionPpm(syncd_compression compression, double ratio, const std::string& what, uint32_t* ppm);

struct Identity {
  std::string run_dir;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int node_rank = 0, node_count = 1;
  uint32_t coord_mode = 0;  // abi::CoordMode
  uint64_t job_id = 0;      // as attached (0: whichever the daemon serves)
};

// What some kinds take besides the tensor: alltoall's splits, where allgather and alltoall
// results are described.
struct SubmitExtra {
  const int64_t* splits = nullptr;
  int nsplits = 0;
  syncd_result* result = nullptr;
  int process_set = 0;  // a barrier's (a tensor names its own)
  uint32_t partial_mode = 0;  // kPartialAllreduce: syncd_partial_mode (the quorum travels as the root)
  int tag = 0;                // kSend, kRecv (the peer travels as the root)
  uint32_t compression = SYNCD_COMPRESSION_DEFAULT;  // kAllreduce: syncd_compression
  uint32_t compression_ppm = 0;                      // kAllreduce: CompressionPpm (0: the daemon's)
  // The kind's name when the call names a root rank (checked to be a rank of the set here).
  const char* root_kind = nullptr;
};

// A process set as one rank sees it: its global ranks (ascending), this rank's place among them.
struct SetView {
  int id = 0;
  int size = 1;
  int rank = 0;  // -1: not a member
  const std::vector<int>* ranks = nullptr;  // nullptr: the global set
};

class Client {
 public:
  using Extra = SubmitExtra;
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects to <run_dir>/attach.sock, performs the handshake and maps the segment.
  static int Attach(const syncd_init_options& opts, Client** out);

  const Identity& identity() const { return id_; }
  // syncd_reattach: this client's daemon is gone; hands the segment to the daemon serving the run
  // directory now (abi::kAttachHandBack), keeping the arena and this object.
  int Reattach(int timeout_ms);
  // syncd_leave: the goodbye syncd_shutdown sends, the mappings kept; later calls fail.
  void Leave();

  void* Alloc(size_t bytes);
  void Free(void* ptr);
  bool InArena(const void* ptr, size_t bytes) const;

  // `gpu`: t->data is device memory; the daemon waits for the work queued on `stream` first.
  int Submit(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, int root,
             double prescale, double postscale, syncd_handle* out, bool gpu = false, void* stream = nullptr,
             const Extra& extra = {});
  void ReleaseResult(syncd_result* r);
  int AddProcessSet(const int* ranks, int n, int64_t timeout_ms, int* id);
  int Join(int64_t timeout_ms, int* last_rank);
  int RemoveProcessSet(int id, int64_t timeout_ms);
  // The set's size and this rank's place in it; size 0 for a set this job does not have.
  SetView Set(int id);
  int Poll(syncd_handle h);
  int Wait(syncd_handle h, int64_t timeout_ms, std::string* reply = nullptr);
  // Wait for a partial allreduce, with the round its completion describes.
  int WaitPartial(syncd_handle h, int64_t timeout_ms, syncd_partial_info* info);
  // Wait for a receive, with the rank that sent it.
  int WaitRecv(syncd_handle h, int64_t timeout_ms, int* source);
  int RegisterGraph(const syncd_graph* g, int64_t timeout_ms, uint64_t* plan_hash);
  // syncd_fail_async: a kFail entry for `name` whose arena copy of `why` is freed at completion.
  int SubmitFailure(const char* name, const char* why, syncd_handle* out, int process_set = 0);
  // syncd_start_timeline (`path` non-empty) and syncd_stop_timeline: a kTimeline entry, waited for.
  int Timeline(const std::string& path, int64_t timeout_ms);
  // syncd_acknowledge_membership.
  int AcknowledgeMembership(uint32_t* membership);
  int JobSetRanks(int* ranks, int capacity, int* count, uint32_t* membership);  // syncd_job_set_ranks
  int ReplacesLostRank(int* replaces);  // syncd_replaces_lost_rank

 private:
  enum class SlotState : uint8_t { kFree, kInFlight, kDone };
  struct Slot {
    SlotState state = SlotState::kFree;
    uint32_t generation = 0;
    int status = SYNCD_OK;
    std::string message;
    std::string name;
    std::string key;  // in in_flight_names_ (the name within its process set)
    bool staged = false;        // the payload was copied into the arena at staging_offset
    void* user_data = nullptr;  // where to copy a staged result back; null: only free the copy
    uint64_t staging_offset = 0;
    uint64_t bytes = 0;           // copied back to user_data (reducescatter: this rank's share only)
    int gpu_slot = -1;  // the CUDA driver's ready slot (flag or event) this request used, released at completion
    int64_t aux_offset = -1;      // the arena copy of alltoall's splits, freed at completion
    syncd_result* result = nullptr;  // filled at completion (allgather, alltoall)
    uint64_t result_offset = abi::kNoResult;
  };

  Client() = default;

  Slot* Lookup(syncd_handle h) SYNCD_REQUIRES(mu_);
  void DrainCompletions() SYNCD_REQUIRES(mu_);
  // Submit's parts: the tensor's checks, filling `entry`'s dtype and shape; the arena side of a
  // GPU tensor (its descriptor) and of a host tensor (in place or staged).
  int CheckTensor(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, int root, const char* root_kind,
                  const SetView& set, abi::SubmitEntry* entry, std::string* name, uint64_t* bytes) SYNCD_REQUIRES(mu_);
  // Alltoall's splits (into the arena, at entry->aux_offset) and reducescatter's share.
  int CheckKind(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, const Extra& extra, const SetView& set,
                const std::string& name, abi::SubmitEntry* entry) SYNCD_REQUIRES(mu_);
  // A partial allreduce's op, mode and quorum (entry->root), into `entry`.
  int CheckPartial(const syncd_tensor* t, syncd_reduce_op op, const Extra& extra, const SetView& set,
                   const std::string& what, abi::SubmitEntry* entry) SYNCD_REQUIRES(mu_);
  // The set a request names, checked: this rank must be in it.
  int CheckSet(int id, const std::string& what, SetView* set) SYNCD_REQUIRES(mu_);
  // Submits a process set change and waits for it; *reply: the daemon's "process set <id>".
  int ChangeSets(abi::OpKind kind, const std::vector<int64_t>& ranks, int id, int64_t timeout_ms, std::string* reply);
  // The completion's result block, checked, into the slot's syncd_result.
  void DeliverResult(Slot* s) SYNCD_REQUIRES(mu_);
  int SubmitGpu(abi::SubmitEntry* entry, const std::string& name, void* data, void* stream, syncd_handle* out)
      SYNCD_REQUIRES(mu_);
  int SubmitHost(abi::SubmitEntry* entry, const std::string& name, void* data, syncd_handle* out) SYNCD_REQUIRES(mu_);
  // Fills the entry's handle and name and publishes it. `staged`: [staging, +bytes) of the arena
  // is this request's copy, freed at completion (after copying it back to `user`, if given).
  int Enqueue(abi::SubmitEntry* entry, const std::string& name, void* user, uint64_t staging, bool staged,
              syncd_handle* out, int gpu_slot = -1) SYNCD_REQUIRES(mu_);
  int Finish(Slot* slot, std::string* reply = nullptr) SYNCD_REQUIRES(mu_);  // *reply: the completion's text
  bool DaemonAlive() SYNCD_REQUIRES(mu_);  // may block for a zero-timeout poll(2) on the socket
  int DaemonLostError() const;
  // Attach's last step: maps the segment and node page the daemon sent (closing the node page's
  // descriptor; the segment's, for syncd_reattach, and the engine's wake-up eventfd are kept),
  // checks the header and sets up the rings, arena and result area.
  int MapShared(const abi::AttachReply& reply, int fds[abi::kAttachFds]);
  // Reattach's last step: the rings start over, what the old daemon held fails (DAEMON_LOST).
  void ForgetOldDaemon() SYNCD_REQUIRES(mu_);
  // The node page's membership and global set's nodes (abi::NodePage::set_nodes), read whole.
  struct SetNodes {
    uint32_t membership = 0, nodes = 0;
    uint64_t words[abi::kMaxListedNodes / 64] = {};
    bool In(uint32_t node) const { return node < nodes && (words[node / 64] >> (node % 64) & 1); }
  };
  int ReadSetNodes(SetNodes* out) SYNCD_REQUIRES(mu_);
  // Until the engine has taken this client in (SegmentHeader::joined_as): its job view is
  // written then. DAEMON_LOST, or TIMEOUT after 10 s.
  int WaitTakenIn() SYNCD_REQUIRES(mu_);
  // global_ from the node page: at attach and when the rank acknowledges a membership.
  // `membership` (may be null): the membership it belongs to.
  int RefreshGlobalSet(uint32_t* membership = nullptr) SYNCD_REQUIRES(mu_);

  Identity id_;
  // The process that attached: a forked child's copy of this client shares its socket, so it never
  // says goodbye on it (that would detach the parent).
  const pid_t owner_ = getpid();
  int sock_ = -1;
  int segment_fd_ = -1;  // the segment's memfd (syncd_reattach hands it on)
  void* segment_ = nullptr;
  uint64_t segment_bytes_ = 0;
  void* node_map_ = nullptr;
  uint64_t node_bytes_ = 0;
  abi::SegmentHeader* header_ = nullptr;
  abi::NodePage* node_ = nullptr;
  int engine_wake_fd_ = -1;  // the engine's doorbell rings here (abi::RingFd)
  char* arena_ = nullptr;
  char* messages_ = nullptr;
  char* results_ = nullptr;  // the result area (written by the daemon)
  uint64_t results_offset_ = 0, results_bytes_ = 0;
  uint64_t arena_capacity_ = 0;  // bytes of the arena (fixed at attach)
  uint64_t spin_ns_ = 20'000;

  Mutex mu_;
  abi::RingView<abi::SubmitEntry> submit_ SYNCD_GUARDED_BY(mu_);
  abi::RingView<abi::CompletionEntry> completion_ SYNCD_GUARDED_BY(mu_);
  std::unique_ptr<ArenaAllocator> arena_alloc_ SYNCD_PT_GUARDED_BY(mu_);
  std::vector<Slot> slots_ SYNCD_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ SYNCD_GUARDED_BY(mu_);
  std::unordered_map<std::string, uint32_t> in_flight_names_ SYNCD_GUARDED_BY(mu_);
  std::map<int, uint64_t> barrier_seqs_ SYNCD_GUARDED_BY(mu_);  // by process set
  std::map<int, std::vector<int>> sets_ SYNCD_GUARDED_BY(mu_);  // the job's process sets but the global one
  uint64_t set_change_seq_ SYNCD_GUARDED_BY(mu_) = 0;
  // The global set as the daemon runs it under the membership this rank acknowledged: the job's
  // launch ranks until it loses a node, then those of the nodes left (this rank's place among them).
  SetView global_ SYNCD_GUARDED_BY(mu_);
  bool daemon_lost_ SYNCD_GUARDED_BY(mu_) = false;
  std::atomic<bool> let_go_{false};  // the daemon disconnected this client (SegmentHeader::let_go)
  std::atomic<bool> left_{false};  // syncd_leave was called: the daemon has let this rank go
};

}  // namespace syncd::client

#endif  // SYNCD_CLIENT_CLIENT_IMPL_H_
