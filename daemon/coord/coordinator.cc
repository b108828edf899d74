// Node 0's side of a negotiation (coordinator.h): every node's announcements in (Coordinate), one
// response per complete name out (Respond), after the same agreement checks as within a node over
// every rank's request, joined nodes' ranks standing in (RankRequests).
#include <algorithm>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/coord/coordinator.h"
#include "daemon/plan/topo.h"
#include "proto/doorbell.h"

namespace syncd {

std::vector<uint32_t> Coordinator::RanksOf(uint32_t node) const {
  if (node_ranks_.empty()) return {node};
  return node_ranks_[node];
}

uint32_t Coordinator::FirstIndexOf(uint32_t node) const {
  if (node_ranks_.empty()) return node;
  uint32_t at = 0;
  for (uint32_t n = 0; n < node; ++n) at += uint32_t(node_ranks_[n].size());
  return at;
}

bool Coordinator::NodeJoined(uint32_t node) const {
  auto it = announced_.find(abi::kJoinName);
  return it != announced_.end() && it->second.ready[node];
}

bool Coordinator::NodeJoinedForLostRanks(uint32_t node) const {
  auto it = announced_.find(abi::kJoinName);
  return it != announced_.end() && it->second.ready[node] && it->second.metas[node].absent == 1;
}

StatusOr<std::vector<NameResponse>> Coordinator::Coordinate(const std::vector<std::string>& all_requests,
                                                             ResponseCache* cache) {
  const uint32_t n = nodes_;
  for (uint32_t node = 0; node < n; ++node) {
    auto reqs = DecodeRequests(all_requests[node]);
    if (!reqs.ok())
      return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(node) + " broke the coordination protocol: " +
                                            reqs.status().message());
    for (NameRequest& r : *reqs) {
      Announcement& a = announced_[r.name];
      if (a.ready.empty()) {
        a.ready.assign(n, false);
        a.metas.resize(n);
        a.errors.resize(n);
        a.first_ns = abi::MonotonicNs();
      }
      // A stall counts from when the first node had the name ready, not from its announcement.
      a.first_ns = std::min(a.first_ns, abi::MonotonicNs() - std::min(r.waited_ns, abi::MonotonicNs()));
      if (a.ready[node]) continue;
      a.ready[node] = true;
      a.last_node = node;
      a.metas[node] = std::move(r.meta);
      a.errors[node] = std::move(r.error);
      ++a.count;
    }
  }
  // A name is agreed once every node announced it, or joined (hvd.join: all of its ranks did,
  // and they stand in with nothing of their own). The join itself needs every node.
  std::vector<std::string> complete;
  for (const auto& [name, a] : announced_) {
    uint32_t ready = 0;
    for (uint32_t node = 0; node < n; ++node) ready += a.ready[node] || (name != abi::kJoinName && NodeJoined(node));
    if (ready == n) complete.push_back(name);
  }
  std::vector<NameResponse> responses;
  for (const std::string& name : complete) {
    responses.push_back(Respond(name, announced_[name], cache));
    announced_.erase(name);
  }
  return responses;
}

std::string Coordinator::PlanMismatch(const Announcement& a) const {
  // TOPO registration: the nodes' plan hashes must agree. Name the nodes, not the ranks: the
  // ranks of one node already agreed. A node not ready (its ranks lost or vacant: it stands in)
  // has no plan of its own; it gets the others'.
  std::vector<int64_t> hashes;
  std::vector<std::string> groups;
  for (uint32_t node = 0; node < a.metas.size(); ++node) {
    if (!a.ready[node]) continue;
    const Shape& plan = a.metas[node].shape;
    const int64_t h = plan.empty() ? 0 : plan[0];
    size_t i = std::find(hashes.begin(), hashes.end(), h) - hashes.begin();
    if (i == hashes.size()) {
      hashes.push_back(h);
      groups.push_back(DescribePlan(std::vector<int64_t>(plan.begin(), plan.end())) + " on node");
    }
    groups[i] += " " + std::to_string(node);
  }
  if (hashes.size() <= 1) return "";
  std::string why = "TOPO plans differ across nodes, the job cannot run:";
  for (size_t i = 0; i < groups.size(); ++i) why += (i ? ";" : "") + std::string(" ") + groups[i];
  return why;
}

Status Coordinator::RankRequests(const std::string& name, const Announcement& a, const TensorMeta& meta,
                                std::vector<Request>* ranks) const {
  for (uint32_t node = 0; node < a.metas.size(); ++node) {
    const std::vector<uint32_t> node_ranks = RanksOf(node);
    for (size_t l = 0; l < node_ranks.size(); ++l) {
      if (a.ready[node]) {
        ranks->push_back(RequestOf(a.metas[node], name, node_ranks[l], l));
        continue;
      }
      // A joined node's ranks stand in.
      StatusOr<Request> stand_in =
          JoinedRequest(RequestOf(meta, name, node_ranks[l], 0), node_ranks[l], FirstIndexOf(node) + uint32_t(l),
                        uint32_t(l), NodeJoinedForLostRanks(node));
      if (!stand_in.ok()) return stand_in.status();
      ranks->push_back(std::move(stand_in.value()));
    }
  }
  return Status::Ok();
}

NameResponse Coordinator::Respond(const std::string& name, const Announcement& a, ResponseCache* cache) const {
  const uint32_t n = nodes_;
  NameResponse resp{name, SYNCD_OK, "", -1, a.metas[a.last_node]};
  for (uint32_t node = 0; node < n && resp.status == SYNCD_OK; ++node)
    if (!a.errors[node].empty()) {
      resp.status = SYNCD_ERR_MISMATCH;
      resp.message = a.errors[node];
    }
  if (resp.status == SYNCD_OK && resp.meta.kind == uint32_t(abi::OpKind::kRegisterGraph)) {
    if (std::string why = PlanMismatch(a); !why.empty()) {
      resp.status = SYNCD_ERR_MISMATCH;
      resp.message = why;
    }
  }
  std::vector<Request> ranks;
  if (resp.status == SYNCD_OK) {
    Status agree = RankRequests(name, a, resp.meta, &ranks);
    if (agree.ok()) agree = CheckAgreement(ranks);  // the same check as within a node
    if (!agree.ok()) {
      resp.status = agree.code();
      resp.message = agree.message();
    }
  }
  const bool shapes_vary = !resp.meta.rows.empty();
  if (resp.status == SYNCD_OK && shapes_vary) {
    // Shapes that vary by rank: every node learns every rank's (a joined rank has none).
    resp.meta.rows.clear();
    resp.meta.splits.clear();
    for (const Request& r : ranks) {
      resp.meta.rows.push_back(r.shape.empty() ? 0 : r.shape[0]);
      resp.meta.splits.insert(resp.meta.splits.end(), r.splits.begin(), r.splits.end());
    }
  }
  // Cached with every rank's rows and splits when they vary: a later step hits where each node's
  // ranks bring the same again (CachedMatches), and one whose shapes changed invalidates it. Not
  // when joined nodes stood in: their ranks' rows are none only while they stay joined.
  const bool stand_ins = std::find(a.ready.begin(), a.ready.end(), false) != a.ready.end();
  if (resp.status == SYNCD_OK && name != abi::kJoinName && !(shapes_vary && stand_ins)) {
    resp.cache_bit = cache->FreeBit();
    if (resp.cache_bit >= 0) cache->Put(resp.cache_bit, name, resp.meta);
  }
  return resp;
}

void Coordinator::Forget(const std::function<bool(const std::string&)>& pred) {
  for (auto it = announced_.begin(); it != announced_.end();) {
    if (pred(it->first)) it = announced_.erase(it);
    else ++it;
  }
}

void Coordinator::Stalled(uint64_t now_ns, uint64_t min_age_ns, std::vector<Stall>* out) const {
  for (const auto& [name, a] : announced_) {
    if (now_ns - a.first_ns < min_age_ns) continue;
    Stall s{name, now_ns - a.first_ns, {}};
    for (uint32_t node = 0; node < a.ready.size(); ++node)
      if (!a.ready[node]) s.missing.push_back(node);
    out->push_back(std::move(s));
  }
}

}  // namespace syncd
