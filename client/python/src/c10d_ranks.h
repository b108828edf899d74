// Which syncd ranks a torch.distributed process group's ranks are (c10d_backend.cc).
//
// Three cases:
// - the job as launched (process set 0, no ranks): group rank r is launch rank r;
// - the job's live ranks after a loss (process set 0 with `ranks`, launch ranks ascending: the
//   survivors renumbered 0..n-1, as `init_method="syncd://"` numbers them): group rank r is
//   launch rank ranks[r]. The daemons run the job's collectives without the lost ranks (their
//   stand-ins add zeros and no rows), so only what names ranks needs translating: roots, peers,
//   alltoall's splits and a scatter's pieces (one per rank of the job's global set:
//   syncd_job_set_ranks, every launch rank until a node is lost) and a reduce_scatter's rows (see
//   PerRankRows);
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
  GroupRanks(int process_set, std::vector<int> ranks) : process_set_(process_set), ranks_(std::move(ranks)) {}

  // Refuses a group whose rank and size are not what the daemon serves this process as; in the
  // live ranks' view reads the job's global set.
  void Check(syncd_client* client, int rank, int size) {
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
    // The global set the daemons run the group's collectives in, as the membership it joined has it.
    set_.resize(size_t(syncd_size(client)));  // as many as it may hold
    int count = 0;
    TORCH_CHECK(syncd_job_set_ranks(client, set_.data(), int(set_.size()), &count, nullptr) == SYNCD_OK,
                "syncd backend: ", syncd_last_error());
    set_.resize(size_t(std::min(count, syncd_size(client))));
    for (int r : ranks_)
      TORCH_CHECK(std::binary_search(set_.begin(), set_.end(), r), "syncd backend: live rank ", r,
                  " is not in the job's global set (its node was lost): make the group again (init_process_group)");
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
  // set (the live ranks' view: one per rank of the global set, none to a lost one).
  std::vector<int64_t> SetCounts(const std::vector<int64_t>& per_group) const {
    if (process_set_ != 0 || ranks_.empty()) return per_group;
    std::vector<int64_t> counts(set_.size(), 0);
    for (size_t i = 0; i < ranks_.size(); ++i) counts[SetPosition(ranks_[i])] = per_group[i];
    return counts;
  }

  // Whether syncd's scatter and reducescatter hand out one share per group rank: not in the live
  // ranks' view, where the daemon shares the rows among every rank of the global set, lost ones
  // included.
  bool PerRankRows() const { return process_set_ != 0 || ranks_.empty(); }

  // A scatter's pieces, one per group rank, in the order the daemon shares them out: one per
  // rank of the syncd set (in the live ranks' view zeros for a lost rank, which nobody receives).
  std::vector<at::Tensor> SetPieces(std::vector<at::Tensor> per_group) const {
    if (PerRankRows() || per_group.empty()) return per_group;
    std::vector<at::Tensor> pieces(set_.size(), at::zeros_like(per_group[0]));
    for (size_t i = 0; i < ranks_.size(); ++i) pieces[SetPosition(ranks_[i])] = std::move(per_group[i]);
    return pieces;
  }

 private:
  // A live rank's position in the global set (Check made sure it is there).
  size_t SetPosition(int launch_rank) const {
    return size_t(std::lower_bound(set_.begin(), set_.end(), launch_rank) - set_.begin());
  }

  int process_set_;
  std::vector<int> ranks_;
  std::vector<int> set_;  // the live ranks' view: the launch ranks of the job's global set
};

}  // namespace syncd::c10d_backend
