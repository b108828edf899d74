// Matches requests across the local ranks by tensor name (Horovod's model). A name becomes ready
// once every local rank has submitted it; then the requests are checked for agreement (with the
// check it was given: collectives/agreement.h, which knows every kind's rules) and handed out in
// the order they became ready.
//
// Pure bookkeeping: no I/O, no threads. Owned and called by the engine thread.
#ifndef SYNCD_DAEMON_CORE_TENSOR_TABLE_H_
#define SYNCD_DAEMON_CORE_TENSOR_TABLE_H_

#include <absl/container/inlined_vector.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"
#include "daemon/core/stall.h"

namespace syncd {

// Kinds whose ranks' shapes differ (allgather, alltoall), agreed across nodes: every rank's first
// dimension, and the alltoall splits rank-major (splits[s * size + d]: rows from s to d), in the
// set's rank order, as the coordinator sent them. Shared with the response cache entry that holds
// them, so that a cache hit copies nothing.
struct AgreedShapes {
  std::vector<int64_t> rows;
  std::vector<int64_t> splits;
};

// One tensor submitted by every local rank; requests[i] is local rank i's.
struct ReadyTensor {
  ReadyTensor(std::vector<Request> rs = {}) : requests(std::move(rs)) {}  // NOLINT: implicit, as an aggregate's
  std::vector<Request> requests;
  const Request& first() const { return requests.front(); }
  // A kind whose shapes vary by rank, on many nodes: what the nodes agreed. Null on one node
  // (the requests are every rank's) and for the other kinds.
  std::shared_ptr<const AgreedShapes> agreed;
};

// Tensors run together (a fused group), a few held inline: no heap allocation per group for
// the groups most steps have.
using TensorGroup = absl::InlinedVector<const ReadyTensor*, 4>;

// Requests that cannot proceed, with the error each of them gets.
struct FailedTensor {
  std::vector<Request> requests;
  Status error;
};

// Whether every request of one name agrees; the error names the tensor, the property and which
// ranks had which value.
using AgreementCheck = Status (*)(const std::vector<Request>& requests);
// The stand-in of a joined rank (global `rank`, `set_rank`, local index `local`) in a collective
// like `like`: collectives/collective.h JoinedRequest, which knows each kind's rule.
using JoinFill = StatusOr<Request> (*)(const Request& like, uint32_t rank, uint32_t set_rank, uint32_t local,
                                       bool lost);

class TensorTable {
 public:
  // `join`: how joined ranks stand in (nullptr: ranks cannot join, as in process sets).
  TensorTable(uint32_t local_size, AgreementCheck check, JoinFill join = nullptr)
      : local_size_(local_size), check_(check), join_(join), joined_(local_size) {}

  // Records one rank's request. Fails (and keeps nothing) when the same rank already has this
  // name in flight, or the local rank is out of range. A join (abi::kJoinName) marks the rank
  // joined: from then on every name waits for the others only, and the rank stands in (JoinFill)
  // until every local rank has joined and the join leaves the table (its requests' root is then
  // the last of them to join).
  Status Add(Request r);

  // Moves out every tensor that all ranks have submitted: consistent ones into `ready` (in the
  // order they completed), disagreeing ones into `failed` with a message naming the ranks.
  void TakeCompleted(std::vector<ReadyTensor>* ready, std::vector<FailedTensor>* failed);

  // The rank at local index `local` is gone and the job goes on without it (--on-loss continue):
  // it stands in for every name from now on, as a joined rank does, for the rest of the job (a
  // join that completes does not end it); what it submitted before stays and runs. `join` is its
  // stand-in join: when no rank of this node is left, it is submitted for it, so that the node
  // joins and the other nodes' collectives go on without it. Requires a table whose ranks can join.
  void MarkLost(uint32_t local, const Request& join);
  // A join of the whole job completed (every node's, this one's stand-in included): a node with
  // no rank left joins again at once, so that the collectives after it, and the next join, go on
  // without it too.
  void JoinCompleted();
  // A replacement attached in the place of lost rank `local`: the first name taken with a request
  // of its own (not one the lost rank left) ends the stand-in; it takes part again from then on.
  void Replaced(uint32_t local);
  // Ranks standing in for good (MarkLost, until Replaced).
  uint32_t lost() const { return lost_count_; }
  bool LostForGood(uint32_t local) const { return local < local_size_ && joined_[local].lost; }

  // Fails every pending tensor (a rank is gone): each is returned with `error`.
  void FailAll(const Status& error, std::vector<FailedTensor>* failed);

  // A request list done with (its requests recycled or moved out): its room holds a later name's
  // requests (no heap allocation per name once lists were made).
  void GiveBack(std::vector<Request>&& spent) {
    if (spent.capacity() >= local_size_ && spare_lists_.size() < kSpareEntries) {
      spent.clear();
      spare_lists_.push_back(std::move(spent));
    }
  }

  size_t pending() const { return pending_.size(); }
  // Whether `local_rank` has a request waiting here (for ranks that have not all submitted yet).
  bool HasRequestsOf(uint32_t local_rank) const;

  // Names some local ranks submitted at least `min_age_ns` ago and others not yet (missing: the
  // local ranks), oldest first.
  std::vector<Stall> Stalled(uint64_t now_ns, uint64_t min_age_ns) const;

 private:
  struct Entry {
    std::vector<Request> requests;  // by local rank
    std::vector<bool> present;
    uint32_t count = 0;
    uint64_t first_seen_ns = 0;
    bool queued = false;  // in completed_
  };
  struct Joined {
    bool joined = false;
    uint32_t rank = 0, set_rank = 0;
    bool lost = false;  // MarkLost: joined for good
    bool replaced = false;  // Replaced: a request of its own ends `lost`
  };
  // After a join completed or the table failed: only lost ranks stay joined.
  void ResetJoined();
  // Whether every local rank has submitted `name` or (another name) joined; queues it once.
  void QueueIfReady(const std::string& name, Entry& e);

  uint32_t local_size_;
  AgreementCheck check_;
  JoinFill join_;
  std::vector<Joined> joined_;  // by local rank
  uint32_t last_joined_ = 0;    // global rank
  uint32_t lost_count_ = 0;
  Request lost_join_;  // MarkLost's, for the node once no rank is left
  std::unordered_map<std::string, Entry> pending_;
  // Names in the order their last rank arrived: the keys of pending_'s entries (a node's key
  // stays where it is until the node leaves the map).
  std::vector<const std::string*> completed_;
  // Entries that left pending_, kept (up to kSpareEntries) with their name's and flags' room
  // for the next names: a name submitted every step then costs no hash-node, key or flag
  // allocation (issue 35: a hot path without allocation).
  static constexpr size_t kSpareEntries = 64;
  std::vector<std::unordered_map<std::string, Entry>::node_type> spare_;
  std::vector<std::vector<Request>> spare_lists_;  // GiveBack's
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_TENSOR_TABLE_H_
