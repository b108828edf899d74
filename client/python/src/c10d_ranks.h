// Which syncd ranks a torch.distributed process group's ranks are (c10d_backend.cc).
//
// Three cases:
// - the job as launched (process set 0, no ranks): group rank r is launch rank r;
// - the job's live ranks after a loss (process set 0 with `ranks`, launch ranks ascending: the
//   survivors renumbered 0..n-1, as `init_method="syncd://"` numbers them): group rank r is
//   launch rank ranks[r]. The daemons run the job's collectives without the lost ranks (their
//   stand-ins add zeros and no rows), so only what names ranks needs translating: roots, peers,
//   alltoall's splits (one per launch rank) and a reduce_scatter's rows (see PerRankRows);
// - a process set (new_group): group rank r is the set's rank r, global rank ranks[r].
#pragma once

#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

namespace syncd::c10d_backend {

class GroupRanks {
 public:
  // `nodes_changed`: the job's membership of nodes changed before the group was made (a node
  // lost, or back): the daemons made the global set afresh, over ranks the client cannot list.
  GroupRanks(int process_set, std::vector<int> ranks, bool nodes_changed)
      : process_set_(process_set), ranks_(std::move(ranks)), nodes_changed_(nodes_changed) {}

  // Refuses a group whose rank and size are not what the daemon serves this process as.
  void Check(syncd_client* client, int rank, int size) const {
    if (process_set_ != 0) {
      TORCH_CHECK(int(ranks_.size()) == size && syncd_process_set_rank(client, process_set_) == rank &&
                      syncd_process_set_size(client, process_set_) == size,
                  "syncd backend: group rank ", rank, " of ", size, " does not match syncd process set ", process_set_,
                  " (rank ", syncd_process_set_rank(client, process_set_), " of ",
                  syncd_process_set_size(client, process_set_), ")");
      return;
    }
    if (ranks_.empty()) {
      TORCH_CHECK(rank == syncd_rank(client) && size == syncd_size(client),
                  "syncd backend: torch.distributed says rank ", rank, " of ", size,
                  " but the daemon serves this process as rank ", syncd_rank(client), " of ", syncd_size(client),
                  " (set RANK and WORLD_SIZE as syncrun does, or leave them unset)");
      return;
    }
    const auto mine = std::find(ranks_.begin(), ranks_.end(), syncd_rank(client));
    TORCH_CHECK(mine != ranks_.end() && int(mine - ranks_.begin()) == rank && int(ranks_.size()) == size,
                "syncd backend: torch.distributed says rank ", rank, " of ", size, " but the job's live ranks number ",
                "this process (launch rank ", syncd_rank(client), ") ",
                mine == ranks_.end() ? -1 : int(mine - ranks_.begin()), " of ", ranks_.size());
    TORCH_CHECK(std::is_sorted(ranks_.begin(), ranks_.end()) && ranks_.back() < syncd_size(client),
                "syncd backend: the live ranks must be launch ranks in ascending order, below ", syncd_size(client));
  }

  int process_set() const { return process_set_; }

  // A group rank as syncd names it: a global (launch) rank.
  int Global(int64_t group_rank) const { return ranks_.empty() ? int(group_rank) : ranks_[size_t(group_rank)]; }

  // A global rank (a receive's source) as the group numbers it; nullptr where they are the same.
  std::function<int(int)> GroupOf() const {
    if (ranks_.empty()) return nullptr;
    return [ranks = ranks_](int global) {
      return int(std::lower_bound(ranks.begin(), ranks.end(), global) - ranks.begin());
    };
  }

  // alltoall's counts, one per group rank, as the daemon takes them: one per rank of the syncd
  // set (the live ranks' view: one per launch rank, none to a lost one).
  std::vector<int64_t> SetCounts(const std::vector<int64_t>& per_group, int launch_size) const {
    if (process_set_ != 0 || ranks_.empty()) return per_group;
    CheckSetIsLaunch("all_to_all");
    std::vector<int64_t> counts(size_t(launch_size), 0);
    for (size_t i = 0; i < ranks_.size(); ++i) counts[size_t(ranks_[i])] = per_group[i];
    return counts;
  }

  // Whether syncd's scatter and reducescatter hand out one share per group rank: not in the live
  // ranks' view, where the daemon shares the rows among every launch rank, lost ones included.
  bool PerRankRows() const { return process_set_ != 0 || ranks_.empty(); }

  // A scatter's pieces, one per group rank, in the order the daemon shares them out: one per
  // rank of the syncd set (in the live ranks' view zeros for a lost rank, which nobody receives).
  std::vector<at::Tensor> SetPieces(std::vector<at::Tensor> per_group, int launch_size) const {
    if (PerRankRows() || per_group.empty()) return per_group;
    std::vector<at::Tensor> pieces(size_t(launch_size), at::zeros_like(per_group[0]));
    for (size_t i = 0; i < ranks_.size(); ++i) pieces[size_t(ranks_[i])] = std::move(per_group[i]);
    return pieces;
  }

  // The live ranks' view shares out by launch rank: right while the global set is the job's
  // launch ranks (lost ranks stood in for), not after a node was lost. Every rank checks.
  void CheckSetIsLaunch(const char* op) const {
    TORCH_CHECK(PerRankRows() || !nodes_changed_, "syncd backend: ", op, " is not supported yet in a group made after ",
                "the job lost a node (the daemons made the job's set afresh without it; every other operation works)");
  }

 private:
  int process_set_;
  std::vector<int> ranks_;
  bool nodes_changed_;
};

}  // namespace syncd::c10d_backend
