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
    : counting_(transport),
      t_(&counting_),
      options_(std::move(options)),
      cache_(options_.cache_capacity),
      coordinator_(t_->size(), options_.node_ranks),
      clock_(CycleClock::Rules{options_.cycle_ns, options_.gs_period, options_.start_on_work, options_.on_demand}),
      control_(&counting_, transport) {
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
  control_.Open();
  clock_.Joined(abi::MonotonicNs());
  return true;
}

Negotiator::~Negotiator() {
  cycle_ = CommTask();
  join_ = CommTask();
}

void Negotiator::Add(ReadyTensor t, Status local_error) {
  if (broken_) {
    Status why(failure_.code(), "tensor '" + t.first().name + "': cannot run, " + failure_.message());
    Fail(std::move(t.requests), why);
    return;
  }
  // A name already pending here fails rather than replacing or dropping either.
  if (std::vector<Request> refused; !pending_.Add(std::move(t), std::move(local_error), abi::MonotonicNs(), &refused)) {
    const std::string name = refused.front().name;
    Fail(std::move(refused), Status(SYNCD_ERR_DUPLICATE, "tensor '" + name + "' is already being negotiated on this node"));
    return;
  }
  clock_.Fresh();
}

bool Negotiator::Poll(uint64_t now_ns, bool may_start) {
  bool did = CheckAbortMessages();
  if (broken_) return did;
  // The turn the start handshake completes starts no cycle: the set first applies what it carried
  // (an NCCL id, a TOPO plan), as every node does before its first cycle.
  if (PollJoin()) return true;
  if (!joined_ || broken_) return did;
  if (may_start && !clock_.running() && clock_.Due(now_ns, pending_.empty())) {
    if (clock_.MustAsk()) RequestCycle(clock_.seq() + 1);
    stats_.idle_ns_total += clock_.Start(now_ns, /*idle=*/pending_.empty());
    cycle_ = CommTask();  // the last cycle's frame goes first: its buffers are then free to reuse
    cycle_ = Cycle();
    // Starting a cycle is not work by itself (what it agrees is): the engine does not keep
    // spinning for it afterwards (200 us per 1 ms cycle of a job waiting for a late node).
  }
  if (clock_.running() && cycle_.Poll()) {
    const CycleClock::Ended cycle = clock_.End(abi::MonotonicNs());
    ++stats_.cycles;
    if (options_.timeline && options_.timeline->on() && cycle.agreed > 0) {  // idle cycles would flood it
      TraceEvent e;
      e.kind = TraceKind::kCycle;
      e.t0 = cycle.start_ns;
      e.t1 = cycle.end_ns;
      e.set = options_.set;
      e.group = uint32_t(clock_.seq());
      e.count = cycle.agreed;
      options_.timeline->Record(e);
    }
    stats_.cycle_ns_total += cycle.end_ns - cycle.start_ns;
    const bool failed = !cycle_.status().ok();
    if (failed) {
      // A failure every node saw in the same cycle needs no abort messages (which would race
      // the other nodes' own reading of it).
      if (failed_everywhere_) Break(cycle_.status());
      else Abort(cycle_.status());
    }
    // A cycle that agreed nothing (idle, or waiting for other nodes' ranks) is not work: the
    // engine does not keep spinning after it.
    did |= cycle.agreed > 0 || failed;
  }
  return did;
}

CommTask Negotiator::Cycle() {
  const uint64_t base = NegotiationCycleTag(clock_.NextSeq());
  CommTask body = Negotiate(base);
  Status st = co_await Await(&body);
  if (!st.ok() || options_.gs_period == 0) co_return st;
  // GS: the local sleep Horovod would take, then (every gs_period cycles) the job's minimum.
  // (GS agrees the job's minimum: the slower idle timer holds only where every node is idle.)
  uint64_t sleep = clock_.LocalSleep(abi::MonotonicNs(), pending_.empty());
  if (clock_.seq() % options_.gs_period == 0) {
    const auto shared = std::make_shared<uint64_t>(sleep);
    CommTask agree = SmallCombine(t_, SliceTag(base + 4), shared.get(), shared, sizeof(sleep), MinCombine);
    st = co_await Await(&agree);
    if (!st.ok()) co_return st;
    sleep = *shared;
    ++stats_.sleep_agreements;
    stats_.agreed_sleep_ns_total += sleep;
  }
  clock_.SleepUntil(abi::MonotonicNs() + sleep);
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
  for (const std::string* n : pending_.order()) {
    const std::string& name = *n;
    const PendingTensor& p = *pending_.Find(name);
    gpu_pending |= p.tensor.first().gpu;
    if (pending_.Announced(name)) continue;
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
  if (clock_.local_busy() || PendingWork() || handoff_.executing() || (options_.holds_work && options_.holds_work())) a.flags |= 2;
  return gpu_pending;
}

ReadyTensor Negotiator::StandIn(const std::string& name, const TensorMeta& meta) const {
  const std::vector<uint32_t> mine = coordinator_.RanksOf(t_->rank());
  const uint32_t first = coordinator_.FirstIndexOf(t_->rank());
  // A rank lost for good stands in as its join does (TensorTable::MarkLost: absent).
  const PendingTensor* join = pending_.Find(abi::kJoinName);
  ReadyTensor t;
  for (uint32_t l = 0; l < mine.size(); ++l) {
    const bool absent = join != nullptr && l < join->tensor.requests.size() && join->tensor.requests[l].absent;
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
  const size_t first = coordinator_.FirstIndexOf(t_->rank()), n = mine.rows.size();
  if (first + n > cached.rows.size() || !std::equal(mine.rows.begin(), mine.rows.end(), cached.rows.begin() + first))
    return false;
  const size_t per = cached.splits.size() / cached.rows.size();  // each rank's splits (wire.cc checks they divide)
  return mine.splits.size() == n * per &&
         std::equal(mine.splits.begin(), mine.splits.end(), cached.splits.begin() + first * per);
}

bool Negotiator::CanStandIn(const TensorMeta& meta) const {
  const Collective* kind = FindCollective(abi::OpKind(meta.kind));
  if (kind == nullptr || meta.gpu != 0) return false;
  Request probe;  // what JoinedRequest asks of the kind, without the data
  probe.kind = abi::OpKind(meta.kind);
  SetAgreedArg(&probe, meta.arg);
  probe.shape = {1};
  for (uint32_t rank : coordinator_.RanksOf(t_->rank())) {
    probe.rank = rank;
    if (!kind->Joined(&probe).ok()) return false;
  }
  return true;
}

bool Negotiator::PendingWork() const {
  if (pending_.size() != 1) return !pending_.empty();
  const auto& [name, p] = *pending_.map().begin();
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
        if (pending_.Has(cache_.name(int32_t(bit))) && !pending_.Announced(cache_.name(int32_t(bit))))
          clock_.Fresh(/*anew=*/false);
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
  for (const NameRequest& r : uncached) pending_.Announce(r.name);
  const std::string mine = EncodeRequests(uncached);
  std::vector<std::string> all;
  CommTask gather = GatherBytes(t_, SliceTag(base + 2), 0, &mine, &all);
  Status st = co_await Await(&gather);
  if (!st.ok()) co_return st;
  std::string out;
  if (t_->rank() == 0) {
    StatusOr<std::vector<NameResponse>> coordinated = coordinator_.Coordinate(all, &cache_);
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
    return std::move(pending_.Remove(name).tensor);
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
    if (pending_.Has(name)) {
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
    if (!pending_.Has(r.name)) {
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
  const uint64_t seq = clock_.seq();
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
  if (!(agreed.flags & 2)) clock_.Quiet(seq);
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

  std::vector<ReadyTensor> ready = handoff_.Spare();  // empty, with room (Recycle) once a cycle agreed before
  if (Status plan_mismatch = TakeAgreedNames(std::span(run).first(hits), responses, &ready); !plan_mismatch.ok()) {
    failed_everywhere_ = true;
    co_return plan_mismatch;
  }
  if (ready.empty()) {
    Recycle(std::move(ready));
    co_return Status::Ok();
  }
  if (std::none_of(ready.begin(), ready.end(), [](const ReadyTensor& t) { return t.first().gpu; })) hold.Release();
  clock_.Agreed(uint32_t(ready.size()));
  // A fence: a plan registration or a set change (they change what later cycles agree on; no
  // collective kind runs them) or GPU work (its hold on the job-wide GPU order).
  const bool fence = std::any_of(ready.begin(), ready.end(), [](const ReadyTensor& t) {
    return t.first().gpu || FindCollective(t.first().kind) == nullptr;
  });
  if (handoff_.executing()) ++stats_.overlapped_cycles;
  // The process set takes the agreement once the one before it has run; the cycle ends then (a
  // fence's, and a GPU hold with it, once it has run too).
  handoff_.Offer(AgreedWork{std::move(ready), base, agreed.gpu_position}, fence);
  WaitUntil taken;
  taken.ready = [this] { return !handoff_.offered(); };
  co_await taken;
  if (!fence) co_return Status::Ok();
  WaitUntil done;
  done.ready = [this] { return handoff_.has_outcome(); };
  co_await done;
  co_return handoff_.TakeOutcome();
}

std::optional<AgreedWork> Negotiator::TakeAgreed() {
  return handoff_.Take(abi::MonotonicNs());
}

void Negotiator::Executed(Status status) {
  // A fence's cycle ends with its outcome (and aborts the job with an error, as any failed cycle);
  // another cycle may be running meanwhile: an error ends the job here.
  uint64_t ran_ns = 0;
  Status unclaimed = handoff_.Ran(std::move(status), /*cycle_waits=*/clock_.running(), abi::MonotonicNs(), &ran_ns);
  stats_.execution_ns_total += ran_ns;
  if (!unclaimed.ok()) Abort(std::move(unclaimed));
}

void Negotiator::CancelCycle(const Status& why) {
  cycle_ = CommTask();  // cancels whatever the cycle awaited
  clock_.Cancel();
  // What runs is the caller's to fail (it sees broken()); what waits fails here.
  if (std::optional<AgreedWork> agreed = handoff_.Cancel())
    for (ReadyTensor& t : agreed->tensors)
      if (!t.requests.empty()) {
        const std::string what = "tensor '" + t.first().name + "': " + why.message();
        Fail(std::move(t.requests), Status(why.code(), what));
      }
}

std::vector<Stall> Negotiator::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<Stall> out;
  if (!joined_) {
    for (const auto& [name, p] : pending_.map()) {
      if (now_ns - p.since_ns < min_age_ns) continue;
      Stall s{name, now_ns - p.since_ns, {}};
      for (uint32_t node = 0; node < joined_nodes_.size(); ++node)
        if (!joined_nodes_[node]) s.missing.push_back(node);
      out.push_back(std::move(s));
    }
    return out;
  }
  coordinator_.Stalled(now_ns, min_age_ns, &out);
  OldestFirst(out);
  return out;
}

void Negotiator::TakeAndFail(const std::string& name, const Status& st) {
  if (!pending_.Has(name)) return;
  Fail(std::move(pending_.Remove(name).tensor.requests), st);
}

std::vector<std::pair<ReadyTensor, Status>> Negotiator::Withdraw(const std::function<bool(const std::string&)>& pred) {
  std::vector<std::pair<ReadyTensor, Status>> out;
  for (const std::string& name : pending_.Names()) {
    if (!pred(name)) continue;
    PendingTensor p = pending_.Remove(name);
    out.emplace_back(std::move(p.tensor), std::move(p.local_error));
  }
  coordinator_.Forget(pred);
  return out;
}

}  // namespace syncd
