// Node 0's side of a negotiation: every node's announcements in (Coordinate), one response per
// complete name out (Respond), after the same agreement checks as within a node over every rank's
// request, joined nodes' ranks standing in (RankRequests, StandIn).
#include <algorithm>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/coord/negotiator.h"
#include "daemon/plan/topo.h"
#include "proto/doorbell.h"

namespace syncd {

ReadyTensor Negotiator::StandIn(const std::string& name, const TensorMeta& meta) const {
  const std::vector<uint32_t> mine = RanksOf(t_->rank());
  const uint32_t first = FirstIndexOf(t_->rank());
  // A rank lost for good stands in as its join does (TensorTable::MarkLost: absent).
  const auto join = pending_.find(abi::kJoinName);
  ReadyTensor t;
  for (uint32_t l = 0; l < mine.size(); ++l) {
    const bool absent = join != pending_.end() && l < join->second.tensor.requests.size() &&
                        join->second.tensor.requests[l].absent;
    // The coordinator checked that these stand-ins are possible.
    StatusOr<Request> r = JoinedRequest(RequestOf(meta, name, mine[l], 0), mine[l], first + l, l, absent);
    if (!r.ok()) continue;
    r->absent = absent;
    t.requests.push_back(std::move(r.value()));
  }
  t.agreed = SharedShapes(meta);
  return t;
}

bool Negotiator::CachedMatches(const TensorMeta& cached, const TensorMeta& mine) const {
  if (cached.rows.empty() || mine.rows.empty()) return cached == mine;
  // Rows and splits cached for every rank of the set: this node's ranks' part, and what must be
  // the same on every rank (the dimensions after the first).
  if (cached.kind != mine.kind || cached.dtype != mine.dtype || cached.op != mine.op || cached.gpu != mine.gpu ||
      cached.arg != mine.arg || cached.prescale != mine.prescale || cached.postscale != mine.postscale ||
      cached.compression != mine.compression || cached.compression_ppm != mine.compression_ppm ||
      cached.shape.size() != mine.shape.size() ||
      (!mine.shape.empty() && !std::equal(mine.shape.begin() + 1, mine.shape.end(), cached.shape.begin() + 1)))
    return false;
  const size_t first = FirstIndexOf(t_->rank()), n = mine.rows.size();
  if (first + n > cached.rows.size() || !std::equal(mine.rows.begin(), mine.rows.end(), cached.rows.begin() + first))
    return false;
  const size_t per = cached.splits.size() / cached.rows.size();  // each rank's splits (wire.cc checks they divide)
  return mine.splits.size() == n * per &&
         std::equal(mine.splits.begin(), mine.splits.end(), cached.splits.begin() + first * per);
}

std::vector<uint32_t> Negotiator::RanksOf(uint32_t node) const {
  if (options_.node_ranks.empty()) return {node};
  return options_.node_ranks[node];
}

uint32_t Negotiator::FirstIndexOf(uint32_t node) const {
  if (options_.node_ranks.empty()) return node;
  uint32_t at = 0;
  for (uint32_t n = 0; n < node; ++n) at += uint32_t(options_.node_ranks[n].size());
  return at;
}

bool Negotiator::NodeJoined(uint32_t node) const {
  auto it = coord_.find(abi::kJoinName);
  return it != coord_.end() && it->second.ready[node];
}

bool Negotiator::NodeJoinedForLostRanks(uint32_t node) const {
  auto it = coord_.find(abi::kJoinName);
  return it != coord_.end() && it->second.ready[node] && it->second.metas[node].absent == 1;
}

StatusOr<std::vector<NameResponse>> Negotiator::Coordinate(const std::vector<std::string>& all_requests) {
  const uint32_t n = t_->size();
  for (uint32_t node = 0; node < n; ++node) {
    auto reqs = DecodeRequests(all_requests[node]);
    if (!reqs.ok())
      return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(node) + " broke the coordination protocol: " +
                                            reqs.status().message());
    for (NameRequest& r : *reqs) {
      Announcement& a = coord_[r.name];
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
  for (const auto& [name, a] : coord_) {
    uint32_t ready = 0;
    for (uint32_t node = 0; node < n; ++node) ready += a.ready[node] || (name != abi::kJoinName && NodeJoined(node));
    if (ready == n) complete.push_back(name);
  }
  std::vector<NameResponse> responses;
  for (const std::string& name : complete) {
    responses.push_back(Respond(name, coord_[name]));
    coord_.erase(name);
  }
  return responses;
}

std::string Negotiator::PlanMismatch(const Announcement& a) const {
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

Status Negotiator::RankRequests(const std::string& name, const Announcement& a, const TensorMeta& meta,
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

NameResponse Negotiator::Respond(const std::string& name, const Announcement& a) {
  const uint32_t n = t_->size();
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
    resp.cache_bit = cache_.FreeBit();
    if (resp.cache_bit >= 0) cache_.Put(resp.cache_bit, name, resp.meta);
  }
  return resp;
}

}  // namespace syncd
