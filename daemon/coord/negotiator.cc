#include "daemon/coord/negotiator.h"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/coord/job_join.h"
#include "daemon/coord/topo_runner.h"
#include "daemon/transport/host_collectives.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

// Tags (transport/tag_space.h): a cycle's base, its agreement in segments 1..4 of group 0, the
// groups it runs in groups 1..4095.

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

Negotiator::Negotiator(Transport* transport, NegotiatorOptions options)
    : counting_(transport), t_(&counting_), raw_(transport), options_(std::move(options)), cache_(options_.cache_capacity) {
  const uint32_t n = t_->size();
  for (uint32_t p = 0; p < n; ++p) control_in_.push_back(std::make_shared<ControlBytes>());
  control_recvs_.assign(n, 0);
  join_ = JoinJob(t_, options_.job, &joined_nodes_, options_.gpu_restart, options_.plan_carry);
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
  if (broken_) {
    Status why(failure_.code(), "tensor '" + t.first().name + "': cannot run, " + failure_.message());
    Fail(std::move(t.requests), why);
    return;
  }
  // The name is read from the tensor, in place, before the tensor moves (no copy of it). A name
  // already pending here (never expected: the table hands a name out once until it completes)
  // fails rather than replacing or dropping either.
  auto duplicate = [](const std::string& name) {
    return Status(SYNCD_ERR_DUPLICATE, "tensor '" + name + "' is already being negotiated on this node");
  };
  PendingMap::iterator it;
  if (!spare_.empty()) {
    PendingMap::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = t.first().name;
    node.mapped() = Pending{std::move(t), std::move(local_error), abi::MonotonicNs()};
    auto placed = pending_.insert(std::move(node));
    if (!placed.inserted) {
      Pending& p = placed.node.mapped();
      Fail(std::move(p.tensor.requests), duplicate(placed.node.key()));
      spare_.push_back(std::move(placed.node));
      return;
    }
    it = placed.position;
  } else {
    bool inserted = false;
    std::tie(it, inserted) = pending_.try_emplace(t.first().name);
    if (!inserted) {
      Fail(std::move(t.requests), duplicate(it->first));
      return;
    }
    it->second = Pending{std::move(t), std::move(local_error), abi::MonotonicNs()};
  }
  order_.push_back(&it->first);
  fresh_ = true;
  idle_since_ns_ = 0;
}

bool Negotiator::Poll(uint64_t now_ns, bool may_start) {
  bool did = CheckAbortMessages();
  if (broken_) return did;
  // The turn the start handshake completes starts no cycle: the set first applies what it carried
  // (an NCCL id, a TOPO plan), as every node does before its first cycle.
  if (PollJoin()) return true;
  if (!joined_ || broken_) return did;
  const uint64_t timer = options_.gs_period ? next_start_ : last_cycle_start_ + Period(now_ns);
  const bool due = options_.on_demand
                       ? fresh_ || wanted_cycle_ > cycle_seq_ || (draining_ && now_ns >= last_cycle_start_ + options_.cycle_ns)
                       : now_ns >= timer || (options_.start_on_work && fresh_);
  if (may_start && !cycle_running_ && due) {
    if (options_.on_demand && wanted_cycle_ <= cycle_seq_) RequestCycle(cycle_seq_ + 1);
    if (last_cycle_end_ != 0) stats_.idle_ns_total += now_ns - last_cycle_end_;
    last_cycle_start_ = now_ns;
    fresh_ = false;
    cycle_running_ = true;
    cycle_idle_ = pending_.empty();
    cycle_ = CommTask();  // the last cycle's frame goes first: its buffers are then free to reuse
    cycle_ = Cycle();
    // Starting a cycle is not work by itself (what it agrees is): the engine does not keep
    // spinning for it afterwards (200 us per 1 ms cycle of a job waiting for a late node).
  }
  if (cycle_running_ && cycle_.Poll()) {
    const bool idle = cycle_idle_ && cycle_agreed_ == 0;
    const uint32_t cycle_agreed_now = cycle_agreed_;
    cycle_running_ = false;
    last_cycle_end_ = abi::MonotonicNs();
    if (!idle) idle_since_ns_ = 0;
    else if (idle_since_ns_ == 0) idle_since_ns_ = last_cycle_end_;
    ++stats_.cycles;
    if (options_.timeline && options_.timeline->on() && cycle_agreed_ > 0) {  // idle cycles would flood it
      TraceEvent e;
      e.kind = TraceKind::kCycle;
      e.t0 = last_cycle_start_;
      e.t1 = last_cycle_end_;
      e.set = options_.set;
      e.group = uint32_t(cycle_seq_);
      e.count = cycle_agreed_;
      options_.timeline->Record(e);
    }
    cycle_agreed_ = 0;
    stats_.cycle_ns_total += last_cycle_end_ - last_cycle_start_;
    const bool failed = !cycle_.status().ok();
    if (failed) {
      // A failure every node saw in the same cycle needs no abort messages (which would race
      // the other nodes' own reading of it).
      if (failed_everywhere_) Break(cycle_.status());
      else Abort(cycle_.status());
    }
    // A cycle that agreed nothing (idle, or waiting for other nodes' ranks) is not work: the
    // engine does not keep spinning after it.
    did |= cycle_agreed_now > 0 || failed;
  }
  return did;
}

CommTask Negotiator::Cycle() {
  const uint64_t base = NegotiationCycleTag(++cycle_seq_);
  CommTask body = Negotiate(base);
  Status st = co_await Await(&body);
  if (!st.ok() || options_.gs_period == 0) co_return st;
  // GS: the local sleep Horovod would take, then (every gs_period cycles) the job's minimum.
  const uint64_t elapsed = abi::MonotonicNs() - last_cycle_start_;
  // (GS agrees the job's minimum: the slower idle timer holds only where every node is idle.)
  const uint64_t period = Period(abi::MonotonicNs());
  uint64_t sleep = elapsed < period ? period - elapsed : 0;
  if (cycle_seq_ % options_.gs_period == 0) {
    const auto shared = std::make_shared<uint64_t>(sleep);
    CommTask agree = SmallCombine(t_, SliceTag(base + 4), shared.get(), shared, sizeof(sleep), MinCombine);
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
  for (const std::string* n : order_) {
    const std::string& name = *n;
    const Pending& p = pending_.at(name);
    gpu_pending |= p.tensor.first().gpu;
    if (announced_.count(name)) continue;
    TensorMeta& meta = meta_scratch_;  // its rows' storage reused from name to name
    TensorMeta::Fill(p.tensor, &meta);
    const std::optional<int32_t> bit = cache_.Find(name);
    const uint64_t waited = now_ns - p.since_ns;
    const bool stalled = options_.stall_ns != 0 && waited >= options_.stall_ns;
    if (bit && p.local_error.ok() && CachedMatches(cache_.meta(*bit), meta) && !stalled) {
      a.hits[*bit / 64] |= uint64_t{1} << (*bit % 64);
    } else {
      if (bit) a.invalid[*bit / 64] |= uint64_t{1} << (*bit % 64);
      uncached->push_back(NameRequest{name, meta, p.local_error.ok() ? "" : p.local_error.message(), waited});
    }
  }
  // Every rank here joined: any cached name the other nodes run, this one runs with stand-ins,
  // except a kind whose shapes vary by rank (the cached rows count this node's ranks' rows, its
  // stand-ins have none) and a TOPO plan's registration (whether a node stands in for one depends
  // on whether each node's ranks are lost or joined, which only the coordinator sees: once every
  // node joined, a cached one would run on some nodes only), and a name this node's ranks cannot
  // stand in for (a root here, GPU memory: once every node joined it would run on the others only,
  // and otherwise it must fail by the coordinator's word). Such a name is evicted and goes through
  // the coordinator.
  if (JoinedHere())
    for (uint32_t bit = 0; bit < cache_.capacity(); ++bit) {
      if (!cache_.used(int32_t(bit))) continue;
      const TensorMeta& meta = cache_.meta(int32_t(bit));
      const bool stands_in = meta.rows.empty() && cache_.name(int32_t(bit)) != abi::kTopoPlanName && CanStandIn(meta);
      (stands_in ? a.hits : a.invalid)[bit / 64] |= uint64_t{1} << (bit % 64);
    }
  if (!uncached->empty()) a.flags |= 1;
  if (local_busy_ || PendingWork() || executing_ || (options_.holds_work && options_.holds_work())) a.flags |= 2;
  return gpu_pending;
}

bool Negotiator::CanStandIn(const TensorMeta& meta) const {
  const Collective* kind = FindCollective(abi::OpKind(meta.kind));
  if (kind == nullptr || meta.gpu != 0) return false;
  Request probe;  // what JoinedRequest asks of the kind, without the data
  probe.kind = abi::OpKind(meta.kind);
  SetAgreedArg(&probe, meta.arg);
  probe.shape = {1};
  for (uint32_t rank : RanksOf(t_->rank())) {
    probe.rank = rank;
    if (!kind->Joined(&probe).ok()) return false;
  }
  return true;
}

bool Negotiator::PendingWork() const {
  if (pending_.size() != 1) return !pending_.empty();
  const auto& [name, p] = *pending_.begin();
  if (name != abi::kJoinName) return true;
  const std::vector<Request>& rs = p.tensor.requests;
  return !std::all_of(rs.begin(), rs.end(), [](const Request& r) { return r.stands_in(); });
}

size_t Negotiator::ApplyAgreement(std::vector<uint64_t>& agree, std::vector<std::string>* names) {
  // Identical on every node: evict invalidated entries, collect hits in bit order. A name this
  // node meant to send as a hit but whose entry was just evicted goes uncached next cycle.
  AgreementView a(agree);
  std::vector<std::string>& run = *names;
  size_t hits = 0;
  // Word by word, set bits only: most cycles have few hits in a large cache (an idle cycle none).
  const uint32_t capacity = uint32_t(cache_.capacity());
  for (uint32_t w = 0; w * 64 < capacity && w < a.words; ++w) {
    uint64_t any = a.invalid[w] | a.hits[w];
    while (any != 0) {
      const uint32_t bit = w * 64 + uint32_t(__builtin_ctzll(any));
      const uint64_t mask = uint64_t{1} << (bit % 64);
      any &= any - 1;
      if (bit >= capacity) break;
      if (a.invalid[w] & mask) {
        // A name waiting here as a hit goes uncached in the next cycle: on demand (topo), one is
        // asked for, or it would wait for a cycle nobody starts.
        if (pending_.count(cache_.name(int32_t(bit))) && !announced_.count(cache_.name(int32_t(bit)))) fresh_ = true;
        cache_.Evict(int32_t(bit));
        continue;
      }
      if (hits == run.size()) run.emplace_back();
      run[hits++] = cache_.name(int32_t(bit));  // a string left from an earlier cycle keeps its room
    }
  }
  stats_.cache_hits += hits;
  return hits;  // run's strings past it are kept for their room
}

CommTask Negotiator::ExchangeUncached(uint64_t base, std::vector<NameRequest> uncached,
                                      std::vector<NameResponse>* responses) {
  ++stats_.coordinator_rounds;
  for (const NameRequest& r : uncached) announced_.insert(r.name);
  const std::string mine = EncodeRequests(uncached);
  std::vector<std::string> all;
  CommTask gather = GatherBytes(t_, SliceTag(base + 2), 0, &mine, &all);
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

Status Negotiator::TakeAgreedNames(std::span<const std::string> run, const std::vector<NameResponse>& responses,
                              std::vector<ReadyTensor>* ready) {
  auto take = [&](const std::string& name) {
    return std::move(Remove(pending_.find(name)).tensor);
  };
  // A joined node's stand-ins: none for what no collective kind runs, except a TOPO plan's
  // registration where every rank of the node is lost or vacant (JoinedRequest): the node gets the
  // plan when the registration runs.
  auto stand_in = [&](const std::string& name, const TensorMeta& meta) {
    ReadyTensor t = StandIn(name, meta);
    if (!t.requests.empty()) ready->push_back(std::move(t));
  };
  const bool joined = JoinedHere();
  for (const std::string& name : run) {
    if (pending_.count(name)) {
      ready->push_back(take(name));
      // A kind whose shapes vary by rank: every rank's rows and splits, as cached (shared).
      ready->back().agreed = cache_.shapes(*cache_.Find(name));
    } else if (joined) {
      stand_in(name, cache_.meta(*cache_.Find(name)));
    }
  }
  Status plan_mismatch;
  for (const NameResponse& r : responses) {
    // Daemons that hold different TOPO plans cannot run the job (see Coordinate).
    if (r.name == abi::kTopoPlanName && r.status != SYNCD_OK) plan_mismatch = Status(syncd_status(r.status), r.message);
    if (!pending_.count(r.name)) {
      if (joined && r.status == SYNCD_OK) stand_in(r.name, r.meta);
      continue;
    }
    if (r.status == SYNCD_OK) {
      ready->push_back(take(r.name));
      ready->back().agreed = r.cache_bit >= 0 ? cache_.shapes(r.cache_bit) : SharedShapes(r.meta);
      for (Request& q : ready->back().requests) SetAgreedArg(&q, r.meta.arg);  // a join: the last rank to join
    } else {
      TakeAndFail(r.name, Status(syncd_status(r.status), r.message));
    }
  }
  return plan_mismatch;
}

CommTask Negotiator::Negotiate(uint64_t base) {
  const uint64_t start = abi::MonotonicNs();
  // Owned with the transfers; the last cycle's is reused once the transport let it go.
  if (!agree_buffer_ || agree_buffer_.use_count() > 1) agree_buffer_ = std::make_shared<std::vector<uint64_t>>();
  const std::shared_ptr<std::vector<uint64_t>> agree_buffer = agree_buffer_;
  std::vector<uint64_t>& agree = *agree_buffer;
  std::vector<NameRequest> uncached;
  const bool gpu_pending = FillAgreement(start, &agree, &uncached);
  const uint64_t seq = cycle_seq_;
  GpuHold hold;
  if (GpuOrder* order = options_.gpu_order) {
    if (gpu_pending) hold.order = order;
    AgreementView(agree).gpu_position = gpu_pending ? order->Hold() : order->count();
  }

  CommTask agreement = SmallCombine(t_, SliceTag(base + 1), agree.data(), agree_buffer, agree.size() * 8,
                                                    CombineAgreement);
  Status st = co_await Await(&agreement);
  if (!st.ok()) co_return st;

  const AgreementView agreed(agree);
  if (!(agreed.flags & 2)) quiet_cycle_ = seq;
  if (hold.order) hold.order->Agreed(agreed.gpu_position);
  // One cycle at a time: the names' storage is the negotiator's, reused cycle after cycle.
  std::vector<std::string>& run = run_names_;
  const size_t hits = ApplyAgreement(agree, &run);
  std::vector<NameResponse> responses;
  if (agreed.flags & 1) {
    CommTask exchange = ExchangeUncached(base, std::move(uncached), &responses);
    st = co_await Await(&exchange);
    if (!st.ok()) co_return st;
  }
  stats_.coordination_ns_total += abi::MonotonicNs() - start;

  std::vector<ReadyTensor> ready;  // empty, with room (Recycle) once a cycle agreed before
  if (!ready_spares_.empty()) {
    ready = std::move(ready_spares_.back());
    ready_spares_.pop_back();
  }
  if (Status plan_mismatch = TakeAgreedNames(std::span(run).first(hits), responses, &ready); !plan_mismatch.ok()) {
    failed_everywhere_ = true;
    co_return plan_mismatch;
  }
  if (ready.empty()) {
    Recycle(std::move(ready));
    co_return Status::Ok();
  }
  if (std::none_of(ready.begin(), ready.end(), [](const ReadyTensor& t) { return t.first().gpu; })) hold.Release();
  cycle_agreed_ = uint32_t(ready.size());
  // A fence: a plan registration or a set change (they change what later cycles agree on; no
  // collective kind runs them) or GPU work (its hold on the job-wide GPU order).
  const bool fence = std::any_of(ready.begin(), ready.end(), [](const ReadyTensor& t) {
    return t.first().gpu || FindCollective(t.first().kind) == nullptr;
  });
  if (executing_) ++stats_.overlapped_cycles;
  // The process set takes the agreement once the one before it has run; the cycle ends then (a
  // fence's, and a GPU hold with it, once it has run too).
  agreed_ = AgreedWork{std::move(ready), base, agreed.gpu_position};
  agreed_fence_ = fence;
  WaitUntil taken;
  taken.ready = [this] { return !agreed_.has_value(); };
  co_await taken;
  if (!fence) co_return Status::Ok();
  WaitUntil done;
  done.ready = [this] { return executed_.has_value(); };
  co_await done;
  co_return *std::exchange(executed_, std::nullopt);
}

std::optional<AgreedWork> Negotiator::TakeAgreed() {
  if (executing_ || !agreed_) return std::nullopt;
  executing_ = true;
  executing_fence_ = agreed_fence_;
  executing_since_ns_ = abi::MonotonicNs();
  return std::exchange(agreed_, std::nullopt);
}

void Negotiator::Executed(Status status) {
  if (!executing_) return;
  executing_ = false;
  stats_.execution_ns_total += abi::MonotonicNs() - executing_since_ns_;
  // A fence's cycle ends with its outcome (and aborts the job with an error, as any failed cycle);
  // another cycle may be running meanwhile: an error ends the job here.
  if (executing_fence_ && cycle_running_) executed_ = std::move(status);
  else if (!status.ok()) Abort(std::move(status));
}

void Negotiator::CancelCycle(const Status& why) {
  cycle_ = CommTask();  // cancels whatever the cycle awaited
  cycle_running_ = false;
  executing_ = false;  // what runs is the caller's to fail: it sees broken()
  executed_.reset();
  if (std::optional<AgreedWork> agreed = std::exchange(agreed_, std::nullopt))
    for (ReadyTensor& t : agreed->tensors)
      if (!t.requests.empty()) {
        const std::string what = "tensor '" + t.first().name + "': " + why.message();
        Fail(std::move(t.requests), Status(why.code(), what));
      }
}

std::vector<Stall> Negotiator::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<Stall> out;
  if (!joined_) {
    for (const auto& [name, p] : pending_) {
      if (now_ns - p.since_ns < min_age_ns) continue;
      Stall s{name, now_ns - p.since_ns, {}};
      for (uint32_t node = 0; node < joined_nodes_.size(); ++node)
        if (!joined_nodes_[node]) s.missing.push_back(node);
      out.push_back(std::move(s));
    }
    return out;
  }
  for (const auto& [name, a] : coord_) {
    if (now_ns - a.first_ns < min_age_ns) continue;
    Stall s{name, now_ns - a.first_ns, {}};
    for (uint32_t node = 0; node < a.ready.size(); ++node)
      if (!a.ready[node]) s.missing.push_back(node);
    out.push_back(std::move(s));
  }
  OldestFirst(out);
  return out;
}

void Negotiator::TakeAndFail(const std::string& name, const Status& st) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return;
  Fail(std::move(Remove(it).tensor.requests), st);
}

Negotiator::Pending Negotiator::Remove(PendingMap::iterator it) {
  order_.erase(std::find(order_.begin(), order_.end(), &it->first));
  announced_.erase(it->first);
  Pending p = std::move(it->second);
  PendingMap::node_type node = pending_.extract(it);
  if (spare_.size() < kSpareNodes) spare_.push_back(std::move(node));
  return p;
}

std::vector<std::string> Negotiator::PendingNames() const {
  std::vector<std::string> names;
  names.reserve(order_.size());
  for (const std::string* n : order_) names.push_back(*n);
  return names;
}
std::vector<std::pair<ReadyTensor, Status>> Negotiator::Withdraw(const std::function<bool(const std::string&)>& pred) {
  std::vector<std::pair<ReadyTensor, Status>> out;
  for (const std::string& name : PendingNames()) {
    if (!pred(name)) continue;
    Pending p = Remove(pending_.find(name));
    out.emplace_back(std::move(p.tensor), std::move(p.local_error));
  }
  for (auto it = coord_.begin(); it != coord_.end();) {
    if (pred(it->first)) it = coord_.erase(it);
    else ++it;
  }
  return out;
}

}  // namespace syncd
