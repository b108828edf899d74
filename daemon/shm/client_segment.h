// The daemon's view of one client's segment (abi::SegmentHeader and what follows it). Owned by
// the engine thread once the client is attached; only that thread calls it.
//
// The daemon consumes the submission ring and produces the completion ring. Everything read from
// the segment is copied before it is checked, since the client can change it at any moment; the
// layout (ring sizes, arena size) is the daemon's own copy, never re-read from the header.
//
// Lifetime: the mapping is shared. Requests that point into the arena hold memory() and keep it
// mapped after the client is gone, so work already agreed with other ranks never reads unmapped
// memory; the mapping goes with the last of them.
#ifndef SYNCD_DAEMON_SHM_CLIENT_SEGMENT_H_
#define SYNCD_DAEMON_SHM_CLIENT_SEGMENT_H_

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "daemon/shm/result_area.h"
#include "daemon/shm/shared_mapping.h"
#include "proto/shm_abi.h"

namespace syncd {

class ClientSegment {
 public:
  static StatusOr<ClientSegment> Create(uint32_t client_id, uint32_t ring_entries, uint64_t arena_bytes,
                                       uint64_t result_bytes);
  // A segment a previous daemon made, handed back by its client (abi::kAttachHandBack; `fd` is
  // taken over): its layout must be the one Create would make here; the rings start empty, the
  // arena keeps what the client has in it. The result area starts afresh (nothing points into it).
  static StatusOr<ClientSegment> Adopt(int fd, uint32_t client_id, uint32_t ring_entries, uint64_t arena_bytes,
                                      uint64_t result_bytes);

  int fd() const { return mapping_->fd(); }
  uint64_t size() const { return mapping_->size(); }
  void CloseFd() { mapping_->CloseFd(); }
  // Keeps the segment mapped for as long as it is held (see Lifetime above).
  std::shared_ptr<const void> memory() const { return mapping_; }

  // The next submission, copied out of shared memory; nullopt when the ring is empty. Sets
  // *corrupt (and returns nullopt) when the client broke the ring's indices.
  std::optional<abi::SubmitEntry> PopSubmission(bool* corrupt);
  bool HasSubmission() { return submit_.Depth() != 0; }

  // The arena range [offset, offset+bytes), or nullptr when it is not inside the arena.
  char* ArenaRange(uint64_t offset, uint64_t bytes) const;
  uint64_t arena_bytes() const { return arena_bytes_; }
  // The daemon's allocator of the client's result area (shared with the requests that fill it).
  const std::shared_ptr<ResultArea>& results() const { return results_; }

  // Publishes one completion (`result_offset`: the result block it points to, see ResultArea) in
  // the ring when it has room and none waits before it; the doorbell rings at the next Flush(). If
  // the client is not draining its ring, completions wait in the daemon (never dropped) and go
  // out on a later Flush().
  void Complete(uint64_t handle, int status, const std::string& message, uint64_t result_offset = abi::kNoResult);
  // Publishes what fits and rings the client's doorbell if anything was published.
  // Returns whether it woke the client (it slept on its doorbell).
  bool Flush();

  // The job membership the client acknowledged (abi::SegmentHeader::membership_seen); the
  // daemon sets it when the client attaches.
  uint32_t membership_seen() const { return header()->membership_seen.load(std::memory_order_acquire); }
  void set_membership_seen(uint32_t m) { header()->membership_seen.store(m, std::memory_order_release); }
  void set_joined_as(uint32_t how) { header()->joined_as.store(how, std::memory_order_release); }
  // The engine lets the client go (abi::SegmentHeader::let_go): a waiting client wakes to it.
  void LetGo() const;
  // The client's job (abi::JobView): its membership and its global set's nodes (`set_nodes`;
  // empty: all `job_nodes`), under the view's sequence lock. Engine thread only; before
  // set_joined_as when the client is taken in.
  void PublishJob(uint32_t membership, uint32_t job_nodes, std::span<const uint32_t> set_nodes) const;

  uint32_t submit_depth() const { return submit_.Depth(); }
  uint32_t completion_depth() const { return completion_.Depth() + uint32_t(overflow_.size()); }

 private:
  struct Pending {
    uint64_t handle;
    int status;
    std::string message;
    uint64_t result_offset;
  };
  abi::SegmentHeader* header() const { return reinterpret_cast<abi::SegmentHeader*>(mapping_->data()); }
  // The daemon's view over a mapping whose header is written.
  static ClientSegment Over(SharedMapping mapping, const abi::SegmentLayout& layout, uint32_t ring_entries);

  std::shared_ptr<SharedMapping> mapping_;
  abi::RingView<abi::SubmitEntry> submit_;
  abi::RingView<abi::CompletionEntry> completion_;
  char* messages_ = nullptr;
  char* arena_ = nullptr;
  uint64_t arena_bytes_ = 0;
  std::shared_ptr<ResultArea> results_;
  // Writes one completion into a reserved ring slot and publishes it.
  void Publish(abi::CompletionEntry* slot, uint64_t handle, int status, const std::string& message,
               uint64_t result_offset);

  std::deque<Pending> overflow_;
  bool unrung_ = false;  // completions published since the doorbell last rang
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_SHM_CLIENT_SEGMENT_H_
