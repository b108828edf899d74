#include "daemon/collectives/partial/runner.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>

#include "daemon/base/hash.h"
#include "daemon/core/reduce_kernels.h"
#include "daemon/transport/binomial_tree.h"
#include "daemon/transport/comm_task.h"
#include "daemon/transport/host_collectives.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

// Tags: PartialRoundTag (transport/tag_space.h), the cycle field's last value.
// Results kept for late ranks: a rank behind by up to this many rounds still gets its own
// round's result (so its model stays the others'); one further behind gets the latest. Only rounds
// some local rank has yet to call for are kept.
constexpr size_t kPartialHistory = 64;

// out = sum of `inputs` (element-wise, `dtype`), divided by `divisor`; chunk by chunk.
void Sum(syncd_dtype dtype, const std::vector<const char*>& inputs, char* out, uint64_t bytes, uint64_t divisor) {
  const size_t esize = abi::DtypeSize(dtype);
  const ReduceSpec spec{dtype, SYNCD_SUM, 1.0, 1.0, divisor};
  std::vector<const void*> in(inputs.size());
  for (uint64_t at = 0; at < bytes; at += kReduceChunkElements * esize) {
    const size_t count = size_t(std::min<uint64_t>(kReduceChunkElements, (bytes - at) / esize));
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = inputs[i] + at;
    void* o = out + at;
    ReduceChunk(spec, in.data(), in.size(), &o, 1, count);
  }
}

// Splits "a b c rest of text" into `n` numbers and the rest (a name may hold spaces).
bool Fields(const std::string& text, size_t n, std::vector<uint64_t>* out, std::string* rest) {
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t end = text.find(' ', at);
    if (end == std::string::npos || end == at) return false;
    char* stop = nullptr;
    out->push_back(strtoull(text.c_str() + at, &stop, 10));
    if (stop != text.c_str() + end) return false;
    at = end + 1;
  }
  *rest = text.substr(at);
  return !rest->empty();
}

// Which set ranks a header's flags mark: hex digit i holds ranks 4i..4i+3 (bit j: rank 4i+j).
std::string Bitmap(const int64_t* flags, uint32_t n) {
  std::vector<int> digits((n + 3) / 4, 0);
  for (uint32_t s = 0; s < n; ++s)
    if (flags[s] != 0) digits[s / 4] |= 1 << (s % 4);
  std::string bits;
  for (int d : digits) bits += "0123456789abcdef"[d];
  return bits;
}

}  // namespace

uint32_t PartialInitiator(const std::string& name, uint64_t round, uint32_t set_size) {
  // The name's hash seeded with the round: uniform over rounds, the same on every daemon.
  return uint32_t(Hash64(name, round) % std::max<uint32_t>(set_size, 1));
}

uint32_t PartialCoordinator(const std::string& name, uint32_t nodes) {
  // Seeded apart from the initiators' draws (whose seeds are round numbers from 1).
  constexpr uint64_t kSeed = 0x7061727469616c;  // "partial"
  return uint32_t(Hash64(name, kSeed) % std::max<uint32_t>(nodes, 1));
}

// What every rank's requests of a name, on every node, must agree on.
struct PartialRunner::Meta {
  uint64_t dtype = 0, op = 0, mode = 0, quorum = 0, elements = 0, shape_hash = 0;

  static Meta Of(const Request& r) {
    Meta m{uint64_t(r.dtype), uint64_t(r.op), uint64_t(r.partial_mode), uint64_t(std::max(r.quorum, 0)), 1, 0};
    for (int64_t d : r.shape) m.elements *= uint64_t(d);
    m.shape_hash = Hash64(r.shape.data(), r.shape.size() * sizeof(int64_t));
    return m;
  }
  bool operator==(const Meta&) const = default;
  bool majority() const { return mode == SYNCD_PARTIAL_MAJORITY; }
  uint32_t need() const { return std::max<uint32_t>(uint32_t(quorum), 1); }
  uint64_t bytes() const { return elements * abi::DtypeSize(syncd_dtype(dtype)); }
  std::string Encode() const {
    return std::to_string(dtype) + " " + std::to_string(op) + " " + std::to_string(mode) + " " + std::to_string(quorum) +
           " " + std::to_string(elements) + " " + std::to_string(shape_hash) + " ";
  }
  static bool Decode(const std::vector<uint64_t>& f, size_t at, Meta* m) {
    *m = Meta{f[at], f[at + 1], f[at + 2], f[at + 3], f[at + 4], f[at + 5]};
    return m->dtype <= SYNCD_BOOL && (m->op == SYNCD_SUM || m->op == SYNCD_AVERAGE) && m->mode <= SYNCD_PARTIAL_MAJORITY &&
           m->quorum < (1u << 24) && m->elements < (uint64_t{1} << 48);
  }
  // `shape`: the ranks' shape when known here, else the element count.
  std::string Describe(const Shape& shape) const {
    std::string s = std::string(abi::DtypeName(syncd_dtype(dtype))) + " [";
    if (shape.empty()) s += std::to_string(elements) + " elements";
    for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + "] " + (op == SYNCD_AVERAGE ? "Average" : "Sum") + ", " + (majority() ? "majority" : "solo") +
           " with quorum " + std::to_string(quorum);
  }
};

struct PartialRunner::Flight {
  uint64_t round = 0, seq = 0;
  uint32_t initiator = 0;
  uint64_t started_ns = 0;  // for the timeline
  Meta meta;             // the round's, as its coordinator ran it
  bool differs = false;  // this node's ranks submitted something else
  // Header: [tensors summed][fresh flag by set rank][differs flag by node], every node's summed.
  std::shared_ptr<std::vector<int64_t>> header;
  std::shared_ptr<std::vector<char>> data;
  std::vector<Request> fresh;
  CommTask header_task, data_task;
};

struct PartialRunner::Op {
  Meta meta;
  Shape shape;                           // empty while only a peer's run message named it
  std::vector<std::vector<char>> accum;  // by local rank: its tensors no round took yet
  std::vector<uint64_t> counts;          // how many they are
  std::vector<uint64_t> calls;           // by local rank: its requests so far (call i is for round i)
  std::vector<std::optional<Request>> waiting;  // fresh for the next round
  std::vector<uint64_t> since;                  // when each waiting request came
  std::vector<Request> late;             // late for the round in flight: its result when it ends
  uint32_t fresh = 0;
  uint32_t first_fresh = 0;  // the set rank that arrived first for the next round
  uint64_t started = 0;      // the last round taken here
  uint64_t done = 0;         // the last round whose result is here
  struct Queued {
    uint64_t round, seq;
    uint32_t initiator;
    Meta meta;
  };
  std::deque<Queued> queued;  // rounds the coordinator ran while one is in flight here
  std::unique_ptr<Flight> flight;
  uint64_t reported_round = 0;  // what the last report to the coordinator said
  uint32_t reported_fresh = 0;
  bool reported_initiator = false;
  struct Result {
    uint64_t round;
    std::vector<char> data;
    std::string text;  // "nap <n> initiator <r>"
  };
  std::deque<Result> results;  // the last kPartialHistory rounds' results, oldest first
  // Round `round`'s result if it is still kept, else the latest; nullptr before any.
  const Result* ResultFor(uint64_t round) const {
    for (const Result& r : results)
      if (r.round == round) return &r;
    return results.empty() ? nullptr : &results.back();
  }
  uint64_t nap_total = 0, late_total = 0;
  std::vector<uint64_t> absent;  // by local rank: rounds run without its fresh tensor
};

struct PartialRunner::Order {
  Meta meta;
  uint64_t round = 0;            // the last round run
  std::vector<uint32_t> fresh;   // by node: fresh ranks for the next round, as reported
  std::vector<uint32_t> first;   // by node: its first fresh set rank
  int32_t first_node = -1;       // the first node to report a fresh rank
  bool initiator_fresh = false;  // majority: the round's initiator is fresh
};

PartialRunner::PartialRunner(PartialPlace place) : place_(std::move(place)) {}

PartialRunner::~PartialRunner() = default;

PartialRunner::Op& PartialRunner::OpFor(const std::string& name, const Meta& meta, const Request* first) {
  auto [it, created] = ops_.try_emplace(name);
  Op& op = it->second;
  if (first != nullptr && op.shape.empty() && op.meta == Meta::Of(*first)) op.shape = first->shape;
  if (!created) return op;
  const uint32_t n = place_.local_size();
  op.meta = meta;
  if (first != nullptr) op.shape = first->shape;
  op.accum.assign(n, std::vector<char>(meta.bytes(), 0));
  op.counts.assign(n, 0);
  op.calls.assign(n, 0);
  op.waiting.resize(n);
  op.since.assign(n, 0);
  op.absent.assign(n, 0);
  return op;
}

Status PartialRunner::Check(const Op& op, const std::string& name, const Request& r) const {
  if (Meta::Of(r) == op.meta) return Status::Ok();
  return Status(SYNCD_ERR_MISMATCH, "tensor '" + name + "': partial allreduce from rank " + std::to_string(r.rank) +
                                        " is " + Meta::Of(r).Describe(r.shape) + ", but the name's earlier requests were " +
                                        op.meta.Describe(op.shape) +
                                        " (a partial allreduce keeps its dtype, shape, op, mode and quorum)");
}

Status PartialRunner::Add(Request r) {
  const bool created = ops_.count(r.name) == 0;
  Op& op = OpFor(r.name, Meta::Of(r), &r);
  if (!created)
    if (Status st = Check(op, r.name, r); !st.ok()) return st;
  const uint32_t l = r.local_rank;
  const bool is_late = std::any_of(op.late.begin(), op.late.end(), [&](const Request& w) { return w.local_rank == l; });
  if (op.waiting[l] || is_late)
    return InvalidArgument("tensor '" + r.name + "': rank " + std::to_string(r.rank) +
                           " already waits for a round of this partial allreduce");
  // The rank's tensor joins what it has not contributed yet.
  if (r.bytes > 0) {
    if (op.counts[l] == 0) memcpy(op.accum[l].data(), r.data, r.bytes);
    else Sum(r.dtype, {op.accum[l].data(), r.data}, op.accum[l].data(), r.bytes, 1);
  }
  ++op.counts[l];
  if (const uint64_t call = ++op.calls[l]; call <= op.started) {
    // Late: the round of this call started without it. It gets that round's result, as every
    // rank does at this step (the latest if it is too far behind); its tensor goes into the next.
    ++op.late_total;
    if (call > op.done) {
      op.late.push_back(std::move(r));  // the round is on the network: its result comes in Finish
      return Status::Ok();
    }
    const Op::Result* res = op.ResultFor(call);
    if (res == nullptr) {
      Complete({r}, Status(SYNCD_ERR_MISMATCH, "tensor '" + r.name + "': no round of this partial allreduce has "
                                                "completed (they failed: the nodes disagree on it)"));
      return Status::Ok();
    }
    if (r.bytes > 0) memcpy(r.data, res->data.data(), r.bytes);
    Complete({r}, Status(SYNCD_OK, "round " + std::to_string(res->round) + " " + res->text + " fresh 0"));
    return Status::Ok();
  }
  ++fresh_total_;
  if (op.fresh++ == 0) op.first_fresh = place_.first() + l;
  const std::string name = r.name;
  op.since[l] = abi::MonotonicNs();
  op.waiting[l] = std::move(r);
  Report(name, op);
  return Status::Ok();
}

void PartialRunner::Report(const std::string& name, Op& op) {
  const uint64_t round = op.started + 1;
  bool initiator_fresh = false;
  if (op.meta.majority()) {
    const uint32_t init = PartialInitiator(name, round, place_.set_size);
    initiator_fresh = init >= place_.first() && init - place_.first() < place_.local_size() &&
                      (op.waiting[init - place_.first()].has_value() || (any_lost_ && lost_[init - place_.first()]));
  }
  const uint32_t coordinator = PartialCoordinator(name, place_.nodes());
  if (place_.node == coordinator)
    return Count(name, op.meta, place_.node, round, op.fresh, op.first_fresh, initiator_fresh);
  // The coordinator needs a count only when it can decide something: with quorum 1, the first fresh rank
  // (solo) or the initiator (majority) once; with a larger quorum, every change.
  const bool decides = op.meta.need() > 1 || (op.meta.majority() ? initiator_fresh : true);
  const bool told = op.reported_round == round &&
                    (op.meta.need() > 1 ? op.reported_fresh == op.fresh && op.reported_initiator == initiator_fresh
                                        : (op.meta.majority() ? op.reported_initiator : true));
  if (!decides || told) return;
  op.reported_round = round;
  op.reported_fresh = op.fresh;
  op.reported_initiator = initiator_fresh;
  Tell(int32_t(coordinator), ControlMessage{ControlMessage::Kind::kPartialReport, place_.job, round,
                                std::to_string(op.fresh) + " " + std::to_string(op.first_fresh) + " " +
                                    std::to_string(int(initiator_fresh)) + " " + op.meta.Encode() + name});
}

void PartialRunner::Count(const std::string& name, const Meta& meta, uint32_t node, uint64_t round, uint32_t fresh,
                          uint32_t first, bool initiator_fresh) {
  auto [it, created] = orders_.try_emplace(name);
  Order& o = it->second;
  if (created) {
    o.meta = meta;
    o.fresh.assign(place_.nodes(), 0);
    o.first.assign(place_.nodes(), 0);
  }
  if (round != o.round + 1) return;  // a report about a round that ran already
  o.fresh[node] = fresh;
  o.first[node] = first;
  if (o.first_node < 0 && fresh > 0) o.first_node = int32_t(node);
  o.initiator_fresh = o.initiator_fresh || initiator_fresh;
  uint64_t total = 0;
  for (uint32_t f : o.fresh) total += f;
  if (total < o.meta.need() || (o.meta.majority() && !o.initiator_fresh)) return;
  const uint32_t initiator = o.meta.majority() ? PartialInitiator(name, round, place_.set_size) : o.first[o.first_node];
  o.round = round;
  std::fill(o.fresh.begin(), o.fresh.end(), 0);
  o.first_node = -1;
  o.initiator_fresh = false;
  // Unique over the set's coordinators: this node's own count, interleaved with the others'.
  const uint64_t seq = next_seq_++ * place_.nodes() + place_.node;
  if (place_.nodes() > 1)
    Forward(name, ControlMessage{ControlMessage::Kind::kPartialRun, place_.job, round,
                                 std::to_string(seq) + " " + std::to_string(initiator) + " " + o.meta.Encode() + name});
  Run(name, o.meta, round, seq, initiator);
}

void PartialRunner::Forward(const std::string& name, const ControlMessage& run) {
  BinomialTree{place_.nodes(), PartialCoordinator(name, place_.nodes())}.ForEachChild(
      place_.node, [&](uint32_t child) { Tell(int32_t(child), run); });
}

void PartialRunner::Run(const std::string& name, const Meta& meta, uint64_t round, uint64_t seq, uint32_t initiator) {
  Op& op = OpFor(name, meta, nullptr);
  op.queued.push_back(Op::Queued{round, seq, initiator, meta});
  if (!op.flight) Start(name, op);
}

void PartialRunner::Start(const std::string& name, Op& op) {
  const Op::Queued q = op.queued.front();
  op.queued.pop_front();
  auto f = std::make_unique<Flight>();
  f->round = q.round;
  f->started_ns = abi::MonotonicNs();
  f->seq = q.seq;
  f->initiator = q.initiator;
  f->meta = q.meta;
  f->differs = !(q.meta == op.meta);
  const uint32_t first = place_.first();
  f->header = std::make_shared<std::vector<int64_t>>(1 + place_.set_size + place_.nodes(), 0);
  f->data = std::make_shared<std::vector<char>>(q.meta.bytes(), 0);
  std::vector<int64_t>& h = *f->header;
  // Every rank's accumulator goes in, fresh or not; the fresh ranks' requests wait for the result.
  std::vector<const char*> inputs;
  for (uint32_t l = 0; l < place_.local_size(); ++l) {
    if (op.counts[l] == 0) continue;
    inputs.push_back(op.accum[l].data());
    h[0] += int64_t(op.counts[l]);
  }
  if (f->differs) h[0] = 0;
  else if (!inputs.empty() && !f->data->empty()) Sum(syncd_dtype(op.meta.dtype), inputs, f->data->data(), f->data->size(), 1);
  for (uint32_t l = 0; l < place_.local_size(); ++l) {
    if (op.counts[l] > 0) {
      std::fill(op.accum[l].begin(), op.accum[l].end(), 0);
      op.counts[l] = 0;
    }
    if (!op.waiting[l]) {
      ++op.absent[l];
      continue;
    }
    h[1 + first + l] = 1;
    f->fresh.push_back(std::move(*op.waiting[l]));
    op.waiting[l].reset();
  }
  h[1 + place_.set_size + place_.node] = f->differs ? 1 : 0;
  fresh_total_ -= op.fresh;
  op.fresh = 0;
  op.started = q.round;
  if (place_.comm != nullptr) {
    f->header_task = Allreduce(place_.comm, PartialRoundTag(q.seq, 0), h.data(), f->header, h.size(), SYNCD_INT64, SYNCD_SUM);
    if (q.meta.elements > 0)
      f->data_task = Allreduce(place_.comm, PartialRoundTag(q.seq, 1), f->data->data(), f->data, q.meta.elements,
                               syncd_dtype(q.meta.dtype), SYNCD_SUM);
  }
  op.flight = std::move(f);
  ++flights_;
  // The next round's initiator may be a rank that is gone: this node speaks for it now.
  if (any_lost_ && op.meta.majority()) Report(name, op);
  if (place_.comm == nullptr) Finish(name, op);
}

void PartialRunner::LoseRank(uint32_t local) {
  if (local >= place_.local_size()) return;
  lost_.resize(place_.local_size(), false);
  lost_[local] = true;
  any_lost_ = true;
  for (auto& [name, op] : ops_)
    if (op.meta.majority()) Report(name, op);
}

void PartialRunner::Finish(const std::string& name, Op& op) {
  std::unique_ptr<Flight> f = std::move(op.flight);
  --flights_;
  std::vector<Request> late = std::move(op.late);
  op.late.clear();
  const std::vector<int64_t>& h = *f->header;
  const uint32_t n = place_.set_size;
  op.done = f->round;
  std::string differing;
  for (uint32_t node = 0; node < place_.nodes(); ++node)
    if (h[1 + n + node] != 0) differing += (differing.empty() ? "" : ", ") + std::to_string(node);
  if (!differing.empty()) {
    const std::string mine = f->differs ? "; the ranks here submitted " + op.meta.Describe(op.shape) : "";
    const Status st(SYNCD_ERR_MISMATCH, "tensor '" + name + "': partial allreduce round " + std::to_string(f->round) +
                                            " ran as " + f->meta.Describe({}) + ", but the ranks on node(s) " + differing +
                                            " submitted something else" + mine);
    Complete(f->fresh, st);
    Complete(late, st);
  } else {
    uint32_t nap = 0;
    for (uint32_t s = 0; s < n; ++s) nap += h[1 + s] != 0 ? 1 : 0;
    Op::Result& res = op.results.emplace_back(
        Op::Result{f->round, *f->data, "nap " + std::to_string(nap) + " initiator " + std::to_string(f->initiator)});
    // `res` stays valid: a deque keeps its other elements where they are when the front goes.
    const uint64_t slowest = *std::min_element(op.calls.begin(), op.calls.end());  // the next call is for slowest + 1
    while (op.results.size() > 1 && (op.results.size() > kPartialHistory || op.results.front().round <= slowest))
      op.results.pop_front();
    const uint64_t total = uint64_t(std::max<int64_t>(h[0], 1));
    if (op.meta.op == SYNCD_AVERAGE && total > 1 && !res.data.empty())
      Sum(syncd_dtype(op.meta.dtype), {res.data.data()}, res.data.data(), res.data.size(), total);
    op.nap_total += nap;
    if (Timeline* tl = place_.timeline; tl != nullptr && tl->on()) {
      TraceEvent e;
      e.kind = TraceKind::kPartialRound;
      e.t0 = f->started_ns;
      e.t1 = abi::MonotonicNs();
      e.name = tl->Name(name);
      e.set = place_.set;
      e.group = uint32_t(f->round);
      e.count = nap;
      e.bytes = res.data.size();
      e.op_kind = uint8_t(abi::OpKind::kPartialAllreduce);
      tl->Record(e);
    }
    std::string text = "round " + std::to_string(f->round) + " " + res.text + " fresh 1";
    const std::string bits = Bitmap(h.data() + 1, n);
    if (text.size() + 7 + bits.size() < abi::kMessageBytes) text += " ranks " + bits;
    for (Request& r : f->fresh) {
      if (r.bytes > 0) memcpy(r.data, res.data.data(), r.bytes);
      Complete({r}, Status(SYNCD_OK, text));
    }
    for (Request& r : late) {
      if (r.bytes > 0) memcpy(r.data, res.data.data(), r.bytes);
      Complete({r}, Status(SYNCD_OK, "round " + std::to_string(f->round) + " " + res.text + " fresh 0"));
    }
  }
  if (!op.queued.empty()) Start(name, op);
}

void PartialRunner::Receive(uint32_t from, const ControlMessage& m) { inbox_.emplace_back(from, m); }

Status PartialRunner::Take(uint32_t from, const ControlMessage& m) {
  std::vector<uint64_t> f;
  std::string name;
  Meta meta;
  const bool report = m.kind == ControlMessage::Kind::kPartialReport;
  const size_t head = report ? 3 : 2;
  const Status refused(SYNCD_ERR_PROTOCOL, "node " + std::to_string(from) +
                                               " sent a partial allreduce message this node cannot take: '" +
                                               m.text.substr(0, 120) + "'");
  if (!Fields(m.text, head + 6, &f, &name) || !Meta::Decode(f, head, &meta) || from >= place_.nodes() ||
      f[1] >= place_.set_size)
    return refused;
  // Reports go to the name's coordinator; its run messages come down its tree, each from the
  // receiver's parent.
  const BinomialTree tree{place_.nodes(), PartialCoordinator(name, place_.nodes())};
  if (report ? place_.node != tree.root : place_.node == tree.root || from != tree.Parent(place_.node)) return refused;
  if (report) {
    Count(name, meta, from, m.cycle, uint32_t(f[0]), uint32_t(f[1]), f[2] != 0);
  } else {
    Forward(name, m);
    Run(name, meta, m.cycle, f[0], uint32_t(f[1]));
  }
  return Status::Ok();
}

Status PartialRunner::Poll(bool* did) {
  std::vector<std::pair<uint32_t, ControlMessage>> in = std::move(inbox_);
  inbox_.clear();
  for (const auto& [from, m] : in) {
    *did = true;
    if (Status st = Take(from, m); !st.ok()) return st;
  }
  if (place_.comm == nullptr || flights_ == 0) return Status::Ok();
  for (auto& [name, op] : ops_) {
    if (!op.flight) continue;
    Flight& f = *op.flight;
    const bool header = f.header_task.Poll(), data = f.data_task.Poll();
    for (const CommTask* t : {&f.header_task, &f.data_task})
      if (t->done() && (t == &f.header_task || f.meta.elements > 0) && !t->status().ok())
        return Status(t->status().code(), "partial allreduce '" + name + "' round " + std::to_string(f.round) + ": " +
                                              t->status().message());
    if (!header || !data) continue;
    *did = true;
    Finish(name, op);
  }
  return Status::Ok();
}

bool PartialRunner::busy() const {
  // Messages in, rounds on the network, and fresh ranks whose round a coordinator may start any moment.
  return !inbox_.empty() || (place_.comm != nullptr && (flights_ > 0 || fresh_total_ > 0));
}

size_t PartialRunner::in_flight() const {
  size_t n = 0;
  for (const auto& [name, op] : ops_) n += op.fresh + op.late.size() + (op.flight ? op.flight->fresh.size() : 0);
  return n;
}

void PartialRunner::FailAll(const Status& why) {
  std::map<std::string, Op> ops = std::move(ops_);
  ops_.clear();
  orders_.clear();
  inbox_.clear();
  flights_ = 0;
  fresh_total_ = 0;
  for (auto& [name, op] : ops) {
    const Status st(why.code(), "tensor '" + name + "': " + why.message());
    std::vector<Request> all = std::move(op.late);
    for (std::optional<Request>& w : op.waiting)
      if (w) all.push_back(std::move(*w));
    if (op.flight)
      for (Request& r : op.flight->fresh) all.push_back(std::move(r));
    for (const Request& r : all) Complete({r}, st);
  }
}

std::vector<PartialRunner::Stall> PartialRunner::Stalled(uint64_t now_ns, uint64_t min_age_ns) const {
  std::vector<Stall> out;
  for (const auto& [name, op] : ops_) {
    if (op.fresh == 0) continue;
    Stall st;
    uint64_t oldest = UINT64_MAX;
    for (uint32_t l = 0; l < place_.local_size(); ++l)
      if (op.waiting[l]) {
        oldest = std::min(oldest, op.since[l]);
        st.waiting.push_back(place_.first() + l);
      }
    if (oldest == UINT64_MAX || now_ns < oldest || now_ns - oldest < min_age_ns) continue;
    st.waiting_ns = now_ns - oldest;
    const uint64_t round = op.started + 1;
    st.name = name + " (partial round " + std::to_string(round) + ", " +
              (op.meta.majority() ? "majority: waits for its initiator)"
                                  : "quorum " + std::to_string(op.meta.need()) + ": waits for more fresh ranks)");
    if (op.meta.majority()) {
      const uint32_t init = PartialInitiator(name, round, place_.set_size);
      if (std::find(st.waiting.begin(), st.waiting.end(), init) == st.waiting.end()) st.awaited.push_back(init);
    }
    if (st.awaited.empty())
      for (uint32_t s = 0; s < place_.set_size; ++s)
        if (std::find(st.waiting.begin(), st.waiting.end(), s) == st.waiting.end()) st.awaited.push_back(s);
    out.push_back(std::move(st));
  }
  return out;
}

std::vector<PartialOpSnapshot> PartialRunner::Snapshot() const {
  std::vector<PartialOpSnapshot> out;
  for (const auto& [name, op] : ops_) {
    PartialOpSnapshot s;
    s.name = name;
    s.mode = op.meta.majority() ? "majority" : "solo";
    s.quorum = uint32_t(op.meta.quorum);
    s.rounds = op.done;
    s.mean_nap = op.done > 0 ? double(op.nap_total) / double(op.done) : 0;
    s.late = op.late_total;
    s.waiting = op.fresh;
    for (uint32_t l = 0; l < place_.local_size(); ++l)
      if (op.absent[l] > 0) s.most_absent.emplace_back(place_.first() + l, op.absent[l]);
    std::stable_sort(s.most_absent.begin(), s.most_absent.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    if (s.most_absent.size() > 8) s.most_absent.resize(8);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace syncd
