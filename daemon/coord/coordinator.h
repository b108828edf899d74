// Node 0's side of a negotiation (negotiator.h): every node's announcements of the names its ranks
// have ready come in (Coordinate); a name every node announced, or joined (hvd.join: its ranks
// stand in), gets one response, after the same agreement checks as within a node over every
// rank's request. Also which global ranks each node holds, which every node needs (RanksOf,
// FirstIndexOf). It agrees only: it runs nothing and completes nothing.
//
// Engine thread only (the negotiator's).
#ifndef SYNCD_DAEMON_COORD_COORDINATOR_H_
#define SYNCD_DAEMON_COORD_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/coord/response_cache.h"
#include "daemon/coord/wire.h"
#include "daemon/core/stall.h"

namespace syncd {

class Coordinator {
 public:
  // `nodes` nodes; `node_ranks`: the global ranks of the set on each node, node by node (empty:
  // one rank per node, numbered as the nodes).
  Coordinator(uint32_t nodes, std::vector<std::vector<uint32_t>> node_ranks)
      : nodes_(nodes), node_ranks_(std::move(node_ranks)) {}

  // The global ranks on `node`, and the set rank of its first.
  std::vector<uint32_t> RanksOf(uint32_t node) const;
  uint32_t FirstIndexOf(uint32_t node) const;

  // Every node's announcements of one cycle (`all_requests`, encoded, by node) in; the responses
  // for the names now complete out, each agreed name cached in `cache` where it may be. An error
  // when a node's bytes do not decode.
  StatusOr<std::vector<NameResponse>> Coordinate(const std::vector<std::string>& all_requests, ResponseCache* cache);
  // Forgets what was announced of the names `pred` selects (they left negotiation everywhere).
  void Forget(const std::function<bool(const std::string&)>& pred);
  // Names some nodes announced at least `min_age_ns` ago and others not yet, with the nodes
  // still missing (not sorted).
  void Stalled(uint64_t now_ns, uint64_t min_age_ns, std::vector<Stall>* out) const;

 private:
  // Which nodes have announced a name, with what.
  struct Announcement {
    std::vector<bool> ready;
    std::vector<TensorMeta> metas;
    std::vector<std::string> errors;
    uint32_t count = 0;
    uint32_t last_node = 0;  // the last to announce it (a join: the last node to join)
    uint64_t first_ns = 0;
  };
  // Whether all of `node`'s ranks joined (and, ForLostRanks, for ranks the job goes on without
  // (TensorMeta::absent): they stand in for process set changes too).
  bool NodeJoined(uint32_t node) const;
  bool NodeJoinedForLostRanks(uint32_t node) const;
  // The response for an agreed name. Its parts: why the nodes' TOPO plans differ ("" if they do
  // not); every rank's request as announced, joined nodes' stand-ins included (an error when one
  // cannot stand in).
  NameResponse Respond(const std::string& name, const Announcement& a, ResponseCache* cache) const;
  std::string PlanMismatch(const Announcement& a) const;
  Status RankRequests(const std::string& name, const Announcement& a, const TensorMeta& meta,
                      std::vector<Request>* ranks) const;

  const uint32_t nodes_;
  const std::vector<std::vector<uint32_t>> node_ranks_;
  std::unordered_map<std::string, Announcement> announced_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_COORDINATOR_H_
