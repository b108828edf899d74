#include "daemon/coord/negotiator.h"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/coord/job_join.h"
#include "daemon/coord/topo_runner.h"
#include "daemon/transport/host_collectives.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

// Tags. A collective's tag is cycle (10 bits) | slot (12) | segment (12); collectives shift it left
// by 8 for their slices, leaving the transport's top 6 bits for the process set's slot
// (set_transport.h). Slot 0 is the negotiation itself
// (segments 1..4), slots 1..4095 the execution groups (see Engine::ExecuteAgreed). Only adjacent
// cycles can overlap, so cycle numbers wrap safely. Control messages use the one tag above them all,
// the job start handshake the two below it (job_join.h).
constexpr uint64_t kControlTag = kTagMask;  // ControlMessage (see wire.h)

// The status an abort from another node carries: its own when it is one (a stall says STALLED
// everywhere), else RANK_LOST.
syncd_status AbortCode(int32_t code) {
  return code > SYNCD_OK && code <= SYNCD_ERR_STALLED && code != SYNCD_IN_PROGRESS ? syncd_status(code) : SYNCD_ERR_RANK_LOST;
}
constexpr uint64_t kCycleShift = 24;

// Layout of the agreement vector:
//   [W][hits: W words, AND][invalid: W words, OR][flags, OR][GPU position, MAX].
// Flags: 1 = some node has names the cache does not know; 2 = some node holds work (drain).
// GPU position: see GpuOrder.
void CombineAgreement(char* acc, const char* other, size_t bytes) {
  auto* a = reinterpret_cast<uint64_t*>(acc);
  const auto* b = reinterpret_cast<const uint64_t*>(other);
  const size_t words = bytes / 8, w = a[0];
  for (size_t i = 1; i <= w; ++i) a[i] &= b[i];
  for (size_t i = w + 1; i + 1 < words; ++i) a[i] |= b[i];
  a[words - 1] = std::max(a[words - 1], b[words - 1]);
}

// Releases a GpuOrder hold when the cycle that took it ends, however it ends (a cancelled cycle's
// frame is destroyed, and this with it).
struct GpuHold {
  GpuOrder* order = nullptr;
  void Release() {
    if (order) order->Release();
    order = nullptr;
  }
  ~GpuHold() { Release(); }
};

void MinCombine(char* acc, const char* other, size_t bytes) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t a, b;
    memcpy(&a, acc + i, 8);
    memcpy(&b, other + i, 8);
    if (b < a) memcpy(acc + i, &b, 8);
  }
}

}  // namespace

Negotiator::Negotiator(Transport* transport, NegotiatorOptions options, Execute execute, Fail fail)
    : counting_(transport), t_(&counting_), options_(options), execute_(std::move(execute)), fail_(std::move(fail)),
      cache_(options.cache_capacity) {
  const uint32_t n = t_->size();
  for (uint32_t p = 0; p < n; ++p) control_in_.push_back(std::make_shared<ControlBytes>());
  control_recvs_.assign(n, 0);
  join_ = JoinJob(t_, options_.job, &joined_nodes_);
}

bool Negotiator::PollJoin() {
  if (joined_) return false;
  if (!join_.Poll()) return false;
  joined_ = true;
  if (!join_.status().ok()) {
    Abort(join_.status());
    return true;
  }
  for (uint32_t p = 0; p < t_->size(); ++p)
    if (p != t_->rank()) PostControlReceive(p);
  last_cycle_start_ = abi::MonotonicNs();
  return true;
}

Negotiator::~Negotiator() {
  cycle_ = CommTask();
  join_ = CommTask();
  for (uint32_t p = 0; p < control_recvs_.size(); ++p)
    if (p != t_->rank() && control_recvs_[p] != 0) t_->Cancel(control_recvs_[p]);
  for (Outgoing& o : control_out_) t_->Cancel(o.handle);
}

void Negotiator::Add(ReadyTensor t, Status local_error) {
  const std::string name = t.first().name;
  if (broken_) {
    fail_(t.requests, Status(failure_.code(), "tensor '" + name + "': cannot run, " + failure_.message()));
    return;
  }
  order_.push_back(name);
  pending_.emplace(name, Pending{std::move(t), std::move(local_error), abi::MonotonicNs()});
  fresh_ = true;
}

bool Negotiator::Poll(uint64_t now_ns) {
  bool did = CheckAbortMessages();
  if (broken_) return did;
  did |= PollJoin();
  if (!joined_ || broken_) return did;
  const uint64_t timer = options_.gs_period ? next_start_ : last_cycle_start_ + options_.cycle_ns;
  const bool due = options_.on_demand
                       ? fresh_ || wanted_cycle_ > cycle_seq_ || (draining_ && now_ns >= last_cycle_start_ + options_.cycle_ns)
                       : now_ns >= timer || (options_.start_on_work && fresh_);
  if (!cycle_running_ && due) {
    if (options_.on_demand && wanted_cycle_ <= cycle_seq_) RequestCycle(cycle_seq_ + 1);
    if (last_cycle_end_ != 0) stats_.idle_ns_total += now_ns - last_cycle_end_;
    last_cycle_start_ = now_ns;
    fresh_ = false;
    cycle_running_ = true;
    cycle_ = Cycle();
    did = true;
    if (options_.blocking) Block();
  }
  if (cycle_running_ && cycle_.Poll()) {
    cycle_running_ = false;
    last_cycle_end_ = abi::MonotonicNs();
    ++stats_.cycles;
    stats_.cycle_ns_total += last_cycle_end_ - last_cycle_start_;
    if (!cycle_.status().ok()) {
      // A failure every node saw in the same cycle needs no abort messages (which would race
      // the other nodes' own reading of it).
      if (failed_everywhere_) Break(cycle_.status());
      else Abort(cycle_.status());
    }
    did = true;
  }
  return did;
}

void Negotiator::Block() {
  const uint64_t start = abi::MonotonicNs();
  uint64_t last_tick = start;
  // Like a blocking MPI collective: spin on the network and nothing else. Abort messages still
  // count, or a node that gave up on the job would leave this one spinning for ever.
  while (cycle_running_ && !cycle_.Poll()) {
    CheckAbortMessages();
    const uint64_t now = abi::MonotonicNs();
    if (options_.while_blocked && now - last_tick > 1'000'000) {
      if (!options_.while_blocked(now - start)) break;
      last_tick = now;
    }
  }
  stats_.blocked_ns_total += abi::MonotonicNs() - start;
}

CommTask Negotiator::Cycle() {
  const uint64_t base = ((++cycle_seq_) % kTopoTagCycleBit) << kCycleShift;  // TOPO groups use the rest
  CommTask body = Negotiate(base);
  Status st = co_await Await(&body);
  if (!st.ok() || options_.gs_period == 0) co_return st;
  // GS: the local sleep Horovod would take, then (every gs_period cycles) the job's minimum.
  const uint64_t elapsed = abi::MonotonicNs() - last_cycle_start_;
  uint64_t sleep = elapsed < options_.cycle_ns ? options_.cycle_ns - elapsed : 0;
  if (cycle_seq_ % options_.gs_period == 0) {
    const auto shared = std::make_shared<uint64_t>(sleep);
    CommTask agree = RecursiveDoublingCombine(t_, (base + 4) << 8, shared.get(), shared, sizeof(sleep), MinCombine);
    st = co_await Await(&agree);
    if (!st.ok()) co_return st;
    sleep = *shared;
    ++stats_.sleep_agreements;
    stats_.agreed_sleep_ns_total += sleep;
  }
  next_start_ = abi::MonotonicNs() + sleep;
  co_return Status::Ok();
}

// Layout of the agreement vector (see CombineAgreement): [W][hits][invalid][flags][GPU position].
struct AgreementView {
  explicit AgreementView(std::vector<uint64_t>& v)
      : words(v[0]), hits(&v[1]), invalid(&v[1 + v[0]]), flags(v[1 + 2 * v[0]]), gpu_position(v[2 + 2 * v[0]]) {}
  uint64_t words;
  uint64_t* hits;
  uint64_t* invalid;
  uint64_t& flags;
  uint64_t& gpu_position;
};

bool Negotiator::FillAgreement(uint64_t now_ns, std::vector<uint64_t>* agree, std::vector<NameRequest>* uncached) {
  const uint32_t words = (cache_.capacity() + 63) / 64;
  agree->assign(2 * words + 3, 0);
  (*agree)[0] = words;
  AgreementView a(*agree);
  bool gpu_pending = false;
  for (const std::string& name : order_) {
    const Pending& p = pending_.at(name);
    gpu_pending |= p.tensor.first().gpu;
    if (announced_.count(name)) continue;
    const TensorMeta meta = TensorMeta::Of(p.tensor);
    const std::optional<int32_t> bit = cache_.Find(name);
    const uint64_t waited = now_ns - p.since_ns;
    const bool stalled = options_.stall_ns != 0 && waited >= options_.stall_ns;
    if (bit && p.local_error.ok() && cache_.meta(*bit) == meta && !stalled) {
      a.hits[*bit / 64] |= uint64_t{1} << (*bit % 64);
    } else {
      if (bit) a.invalid[*bit / 64] |= uint64_t{1} << (*bit % 64);
      uncached->push_back(NameRequest{name, meta, p.local_error.ok() ? "" : p.local_error.message(), waited});
    }
  }
  // Every rank here joined: any cached name the other nodes run, this one runs with stand-ins.
  if (JoinedHere())
    for (uint32_t bit = 0; bit < cache_.capacity(); ++bit)
      if (cache_.used(int32_t(bit))) a.hits[bit / 64] |= uint64_t{1} << (bit % 64);
  if (!uncached->empty()) a.flags |= 1;
  if (local_busy_ || !pending_.empty()) a.flags |= 2;
  return gpu_pending;
}

std::vector<std::string> Negotiator::ApplyAgreement(std::vector<uint64_t>& agree) {
  // Identical on every node: evict invalidated entries, collect hits in bit order. A name this
  // node meant to send as a hit but whose entry was just evicted goes uncached next cycle.
  AgreementView a(agree);
  std::vector<std::string> run;
  for (uint32_t bit = 0; bit < cache_.capacity(); ++bit) {
    const uint64_t mask = uint64_t{1} << (bit % 64);
    if (a.invalid[bit / 64] & mask) {
      cache_.Evict(int32_t(bit));
    } else if (a.hits[bit / 64] & mask) {
      run.push_back(cache_.name(int32_t(bit)));
    }
  }
  stats_.cache_hits += run.size();
  return run;
}

CommTask Negotiator::ExchangeUncached(uint64_t base, std::vector<NameRequest> uncached,
                                      std::vector<NameResponse>* responses) {
  ++stats_.coordinator_rounds;
  for (const NameRequest& r : uncached) announced_.insert(r.name);
  const std::string mine = EncodeRequests(uncached);
  std::vector<std::string> all;
  CommTask gather = GatherBytes(t_, (base + 2) << 8, 0, &mine, &all);
  Status st = co_await Await(&gather);
  if (!st.ok()) co_return st;
  std::string out;
  if (t_->rank() == 0) {
    StatusOr<std::vector<NameResponse>> coordinated = Coordinate(all);
    if (!coordinated.ok()) co_return coordinated.status();
    *responses = std::move(coordinated.value());
    out = EncodeResponses(*responses);
  }
  CommTask bcast = BroadcastBytes(t_, base + 3, 0, &out);
  st = co_await Await(&bcast);
  if (!st.ok()) co_return st;
  if (t_->rank() != 0) {
    auto decoded = DecodeResponses(out);
    if (!decoded.ok()) co_return decoded.status();
    *responses = std::move(decoded.value());
    for (const NameResponse& r : *responses)
      if (r.status == SYNCD_OK && r.cache_bit >= 0) cache_.Put(r.cache_bit, r.name, r.meta);
  }
  stats_.cache_misses += responses->size();
  co_return Status::Ok();
}

Status Negotiator::TakeAgreed(const std::vector<std::string>& run, const std::vector<NameResponse>& responses,
                              std::vector<ReadyTensor>* ready) {
  auto take = [&](const std::string& name) {
    auto it = pending_.find(name);
    ReadyTensor t = std::move(it->second.tensor);
    pending_.erase(it);
    order_.erase(std::find(order_.begin(), order_.end(), name));
    announced_.erase(name);
    return t;
  };
  const bool joined = JoinedHere();
  for (const std::string& name : run) {
    if (pending_.count(name)) ready->push_back(take(name));
    else if (joined) ready->push_back(StandIn(name, cache_.meta(*cache_.Find(name))));
  }
  Status plan_mismatch;
  for (const NameResponse& r : responses) {
    // Daemons that hold different TOPO plans cannot run the job (see Coordinate).
    if (r.name == abi::kTopoPlanName && r.status != SYNCD_OK) plan_mismatch = Status(syncd_status(r.status), r.message);
    if (!pending_.count(r.name)) {
      if (joined && r.status == SYNCD_OK) ready->push_back(StandIn(r.name, r.meta));
      continue;
    }
    if (r.status == SYNCD_OK) {
      ready->push_back(take(r.name));
      ready->back().rank_rows = r.meta.rows;
      ready->back().rank_splits = r.meta.splits;
      for (Request& q : ready->back().requests) q.root = r.meta.root;  // a join: the last rank to join
    } else {
      TakeAndFail(r.name, Status(syncd_status(r.status), r.message));
    }
  }
  return plan_mismatch;
}

CommTask Negotiator::Negotiate(uint64_t base) {
  const uint64_t start = abi::MonotonicNs();
  const auto agree_buffer = std::make_shared<std::vector<uint64_t>>();  // owned with the transfers
  std::vector<uint64_t>& agree = *agree_buffer;
  std::vector<NameRequest> uncached;
  const bool gpu_pending = FillAgreement(start, &agree, &uncached);
  const uint64_t seq = cycle_seq_;
  GpuHold hold;
  if (GpuOrder* order = options_.gpu_order) {
    if (gpu_pending) hold.order = order;
    AgreementView(agree).gpu_position = gpu_pending ? order->Hold() : order->count();
  }

  CommTask agreement = RecursiveDoublingCombine(t_, (base + 1) << 8, agree.data(), agree_buffer, agree.size() * 8,
                                                    CombineAgreement);
  Status st = co_await Await(&agreement);
  if (!st.ok()) co_return st;

  const AgreementView agreed(agree);
  if (!(agreed.flags & 2)) quiet_cycle_ = seq;
  agreed_gpu_position_ = agreed.gpu_position;
  if (hold.order) hold.order->Agreed(agreed.gpu_position);
  const std::vector<std::string> run = ApplyAgreement(agree);
  std::vector<NameResponse> responses;
  if (agreed.flags & 1) {
    CommTask exchange = ExchangeUncached(base, std::move(uncached), &responses);
    st = co_await Await(&exchange);
    if (!st.ok()) co_return st;
  }
  stats_.coordination_ns_total += abi::MonotonicNs() - start;

  std::vector<ReadyTensor> ready;
  if (Status plan_mismatch = TakeAgreed(run, responses, &ready); !plan_mismatch.ok()) {
    failed_everywhere_ = true;
    co_return plan_mismatch;
  }
  if (ready.empty()) co_return Status::Ok();
  if (std::none_of(ready.begin(), ready.end(), [](const ReadyTensor& t) { return t.first().gpu; })) hold.Release();
  executing_ = std::move(ready);
  const uint64_t exec_start = abi::MonotonicNs();
  CommTask exec = execute_(&executing_, base);
  st = co_await Await(&exec);
  stats_.execution_ns_total += abi::MonotonicNs() - exec_start;
  if (st.ok()) executing_.clear();
  co_return st;
}

void Negotiator::CancelCycle(const Status& why) {
  cycle_ = CommTask();  // cancels whatever the cycle awaited
  cycle_running_ = false;
  std::vector<ReadyTensor> executing = std::move(executing_);
  executing_.clear();
  for (ReadyTensor& t : executing)
    if (!t.requests.empty())
      fail_(t.requests, Status(why.code(), "tensor '" + t.first().name + "': " + why.message()));
}

ReadyTensor Negotiator::StandIn(const std::string& name, const TensorMeta& meta) const {
  const std::vector<uint32_t> mine = RanksOf(t_->rank());
  const uint32_t first = FirstIndexOf(t_->rank());
  ReadyTensor t;
  for (uint32_t l = 0; l < mine.size(); ++l) {
    // The coordinator checked that these stand-ins are possible.
    StatusOr<Request> r = JoinedRequest(RequestOf(meta, name, mine[l], 0), mine[l], first + l, l);
    if (r.ok()) t.requests.push_back(std::move(r.value()));
  }
  t.rank_rows = meta.rows;
  t.rank_splits = meta.splits;
  return t;
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
  // ranks of one node already agreed.
  std::vector<int64_t> hashes;
  std::vector<std::string> groups;
  for (uint32_t node = 0; node < a.metas.size(); ++node) {
    const int64_t h = a.metas[node].shape.empty() ? 0 : a.metas[node].shape[0];
    size_t i = std::find(hashes.begin(), hashes.end(), h) - hashes.begin();
    if (i == hashes.size()) {
      hashes.push_back(h);
      char hex[32];
      snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
      groups.push_back(std::string("plan ") + hex + " on node");
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
          JoinedRequest(RequestOf(meta, name, node_ranks[l], 0), node_ranks[l], FirstIndexOf(node) + uint32_t(l), uint32_t(l));
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
  if (resp.status == SYNCD_OK && !resp.meta.rows.empty()) {
    // Shapes that vary by rank: every node learns every rank's (a joined rank has none), and the
    // name is not cached (the next step's shapes may differ).
    resp.meta.rows.clear();
    resp.meta.splits.clear();
    for (const Request& r : ranks) {
      resp.meta.rows.push_back(r.shape.empty() ? 0 : r.shape[0]);
      resp.meta.splits.insert(resp.meta.splits.end(), r.splits.begin(), r.splits.end());
    }
  } else if (resp.status == SYNCD_OK && name != abi::kJoinName) {
    resp.cache_bit = cache_.FreeBit();
    if (resp.cache_bit >= 0) cache_.Put(resp.cache_bit, name, resp.meta);
  }
  return resp;
}

std::vector<Negotiator::NodeStall> Negotiator::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<NodeStall> out;
  if (!joined_) {
    for (const auto& [name, p] : pending_) {
      if (now_ns - p.since_ns < min_age_ns) continue;
      NodeStall s{name, now_ns - p.since_ns, {}};
      for (uint32_t node = 0; node < joined_nodes_.size(); ++node)
        if (!joined_nodes_[node]) s.missing_nodes.push_back(node);
      out.push_back(std::move(s));
    }
    return out;
  }
  for (const auto& [name, a] : coord_) {
    if (now_ns - a.first_ns < min_age_ns) continue;
    NodeStall s{name, now_ns - a.first_ns, {}};
    for (uint32_t node = 0; node < a.ready.size(); ++node)
      if (!a.ready[node]) s.missing_nodes.push_back(node);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const NodeStall& a, const NodeStall& b) { return a.waiting_ns > b.waiting_ns; });
  return out;
}

void Negotiator::TakeAndFail(const std::string& name, const Status& st) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return;
  std::vector<Request> requests = std::move(it->second.tensor.requests);
  pending_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), name));
  announced_.erase(name);
  fail_(requests, st);
}

void Negotiator::Break(Status why) { EndJob(std::move(why), /*tell_peers=*/false); }

void Negotiator::Abort(Status why) { EndJob(std::move(why), /*tell_peers=*/true); }

void Negotiator::EndJob(Status why, bool tell_peers) {
  if (broken_) return;
  broken_ = true;
  failure_ = why;
  spdlog::error("job {}: {}", tell_peers ? "aborted" : "failed", why.message());
  CancelCycle(why);
  if (tell_peers) SendControl(ControlMessage{ControlMessage::Kind::kAbort, options_.job, 0, why.message(), why.code()});
  std::vector<std::string> names = order_;
  for (const std::string& name : names)
    TakeAndFail(name, Status(why.code(), "tensor '" + name + "': " + why.message()));
}

void Negotiator::RequestCycle(uint64_t cycle) {
  ++stats_.cycle_requests;
  SendControl(ControlMessage{ControlMessage::Kind::kCycle, options_.job, cycle, ""});
}

void Negotiator::PostControlReceive(uint32_t p) {
  control_recvs_[p] = t_->Recv(p, kControlTag, control_in_[p]->data(), kControlMessageBytes, control_in_[p]);
}

void Negotiator::SendControl(ControlMessage m) {
  for (uint32_t p = 0; p < t_->size(); ++p) {
    if (p == t_->rank() || t_->PeerLost(p)) continue;
    Outgoing& out = control_out_.emplace_back();
    out.bytes = std::make_shared<ControlBytes>();
    EncodeControl(m, out.bytes->data());
    out.handle = t_->Send(p, kControlTag, out.bytes->data(), kControlMessageBytes, out.bytes);
  }
}

std::vector<std::pair<ReadyTensor, Status>> Negotiator::Withdraw(const std::function<bool(const std::string&)>& pred) {
  std::vector<std::pair<ReadyTensor, Status>> out;
  std::vector<std::string> keep;
  for (const std::string& name : order_) {
    if (!pred(name)) {
      keep.push_back(name);
      continue;
    }
    auto it = pending_.find(name);
    out.emplace_back(std::move(it->second.tensor), std::move(it->second.local_error));
    pending_.erase(it);
    announced_.erase(name);
  }
  order_ = std::move(keep);
  for (auto it = coord_.begin(); it != coord_.end();) {
    if (pred(it->first)) it = coord_.erase(it);
    else ++it;
  }
  return out;
}

void Negotiator::PeerLeft(uint32_t node, const std::string& reason) {
  const std::string who = "node " + std::to_string(node) + " left the job (" + reason + ")";
  if (pending_.empty() && executing_.empty()) {
    // The normal end of a job: every daemon is being stopped, or has moved on to the next job.
    // Nothing is lost, so nothing is reported as an error, but this job cannot go on.
    spdlog::info("{}", who);
    broken_ = true;
    failure_ = Status(SYNCD_ERR_RANK_LOST, who);
    CancelCycle(failure_);  // an idle cycle may be waiting on that node
    return;
  }
  Abort(Status(SYNCD_ERR_RANK_LOST, who + " while " + std::to_string(pending_.size()) + " tensor(s) were pending"));
}

bool Negotiator::Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason) {
  if (!broken_) {
    broken_ = true;
    failure_ = Status(SYNCD_ERR_RANK_LOST, why);
    CancelCycle(failure_);
    std::vector<std::string> names = order_;
    for (const std::string& name : names) TakeAndFail(name, Status(SYNCD_ERR_RANK_LOST, "tensor '" + name + "': " + why));
    SendControl(ControlMessage{ControlMessage::Kind::kLeave, options_.job, 0, peer_reason});
  }
  while (!control_out_.empty() && abi::MonotonicNs() < deadline_ns) {
    t_->Progress();
    CheckAbortMessages();
    if (!control_out_.empty()) sched_yield();
  }
  return control_out_.empty();
}

bool Negotiator::CheckAbortMessages() {
  bool did = false;
  for (auto it = control_out_.begin(); it != control_out_.end();) {
    Status err;  // a failed send means a lost peer: PeerFailure() reports it below
    if (t_->Test(it->handle, &err) == CommState::kPending) ++it;
    else it = control_out_.erase(it);
  }
  if (broken_) return false;
  t_->Progress();
  for (uint32_t p = 0; p < control_recvs_.size(); ++p) {
    if (p == t_->rank() || control_recvs_[p] == 0) continue;
    Status err;
    const CommState s = t_->Test(control_recvs_[p], &err);
    if (s == CommState::kPending) continue;
    control_recvs_[p] = 0;
    did = true;
    if (s == CommState::kFailed) {
      Abort(err);  // the peer itself is lost
      break;
    }
    StatusOr<ControlMessage> m = DecodeControl(control_in_[p]->data(), kControlMessageBytes);
    if (!m.ok()) {
      Abort(Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " broke the coordination protocol: " +
                                           m.status().message()));
      break;
    }
    if (m->job != options_.job || m->kind == ControlMessage::Kind::kCycle) {
      // A notice about another job (sent before this one started here) means nothing to it.
      if (m->job == options_.job) wanted_cycle_ = std::max(wanted_cycle_, m->cycle);
      PostControlReceive(p);
      continue;
    }
    if (m->kind == ControlMessage::Kind::kLeave) PeerLeft(p, m->text);
    else if (m->kind == ControlMessage::Kind::kAbort)
      Abort(Status(AbortCode(m->code), "node " + std::to_string(p) + " aborted the job: " + m->text));
    else
      Abort(Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " sent a job start message on the control channel"));
    break;
  }
  if (!broken_)
    if (std::optional<Status> lost = t_->PeerFailure()) {
      Abort(*lost);
      did = true;
    }
  return did;
}

}  // namespace syncd
