#include "daemon/coord/partial_runner.h"

#include <algorithm>
#include <cstring>

#include "daemon/core/reduce_kernels.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

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

std::string Describe(const Request& r) {
  std::string shape = "[";
  for (size_t d = 0; d < r.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(r.shape[d]);
  return std::string(abi::DtypeName(r.dtype)) + " " + shape + "] " + (r.op == SYNCD_AVERAGE ? "Average" : "Sum") + ", " +
         (r.partial_mode == SYNCD_PARTIAL_MAJORITY ? "majority" : "solo") + " with quorum " + std::to_string(r.root);
}

}  // namespace

uint32_t PartialInitiator(const std::string& name, uint64_t round, uint32_t set_size) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return uint32_t(Mix(h ^ Mix(round)) % std::max<uint32_t>(set_size, 1));
}

struct PartialRunner::Op {
  Request like;  // the name's first request: dtype, op, shape, mode, quorum
  std::vector<std::vector<char>> accum;  // by local rank: its tensors no round took yet
  std::vector<uint64_t> counts;          // how many they are
  std::vector<uint64_t> last_round;      // the round whose result the rank got last
  std::vector<std::optional<Request>> waiting;
  uint32_t fresh = 0;
  uint32_t first_fresh = 0;  // the set rank that arrived first for the next round
  uint64_t round = 0;        // the last round run
  std::vector<char> result;
  std::string result_text;  // "nap <n> initiator <r>" of the last round
  uint64_t nap_total = 0, late = 0;
  std::vector<uint64_t> absent;  // by local rank: rounds run without its fresh tensor
};

PartialRunner::PartialRunner(uint32_t set_size, uint32_t first, uint32_t local_size, Complete complete)
    : set_size_(set_size), first_(first), local_size_(local_size), complete_(std::move(complete)) {}

PartialRunner::~PartialRunner() = default;

Status PartialRunner::Check(const Op& op, const Request& r) const {
  const Request& a = op.like;
  if (a.dtype == r.dtype && a.shape == r.shape && a.op == r.op && a.partial_mode == r.partial_mode && a.root == r.root)
    return Status::Ok();
  return Status(SYNCD_ERR_MISMATCH, "tensor '" + r.name + "': partial allreduce from rank " + std::to_string(r.rank) +
                                        " is " + Describe(r) + ", but the name's earlier requests were " + Describe(a) +
                                        " (a partial allreduce keeps its dtype, shape, op, mode and quorum)");
}

Status PartialRunner::Add(Request r) {
  auto [it, created] = ops_.try_emplace(r.name);
  Op& op = it->second;
  if (created) {
    op.like = r;
    op.like.data = nullptr;
    op.like.memory.reset();
    op.accum.assign(local_size_, std::vector<char>(r.bytes, 0));
    op.counts.assign(local_size_, 0);
    op.last_round.assign(local_size_, 0);
    op.waiting.resize(local_size_);
    op.absent.assign(local_size_, 0);
  } else if (Status st = Check(op, r); !st.ok()) {
    return st;
  }
  const uint32_t l = r.local_rank;
  if (op.waiting[l])
    return InvalidArgument("tensor '" + r.name + "': rank " + std::to_string(r.rank) + " already waits for round " +
                           std::to_string(op.round + 1) + " of this partial allreduce");
  // The rank's tensor joins what it has not contributed yet.
  if (r.bytes > 0) {
    if (op.counts[l] == 0) memcpy(op.accum[l].data(), r.data, r.bytes);
    else Sum(r.dtype, {op.accum[l].data(), r.data}, op.accum[l].data(), r.bytes, 1);
  }
  ++op.counts[l];
  if (op.last_round[l] < op.round) {
    // Late: its round ran without it. It gets the latest result now; its tensor goes into the next.
    ++op.late;
    op.last_round[l] = op.round;
    if (r.bytes > 0) memcpy(r.data, op.result.data(), r.bytes);
    complete_({r}, Status(SYNCD_OK, "round " + std::to_string(op.round) + " " + op.result_text + " fresh 0"));
    return Status::Ok();
  }
  if (op.fresh++ == 0) op.first_fresh = first_ + l;
  op.waiting[l] = std::move(r);
  MaybeRun(it->first, op);
  return Status::Ok();
}

void PartialRunner::MaybeRun(const std::string& name, Op& op) {
  const uint32_t quorum = std::max<uint32_t>(uint32_t(op.like.root), 1);
  if (op.fresh < quorum) return;
  if (op.like.partial_mode == SYNCD_PARTIAL_SOLO) return Run(op, op.first_fresh);
  const uint32_t initiator = PartialInitiator(name, op.round + 1, set_size_);
  if (initiator >= first_ && initiator - first_ < local_size_ && op.waiting[initiator - first_])
    Run(op, initiator);
}

void PartialRunner::Run(Op& op, uint32_t initiator) {
  const Request& like = op.like;
  std::vector<const char*> inputs;
  uint64_t total = 0;
  for (uint32_t l = 0; l < local_size_; ++l) {
    if (op.counts[l] == 0) continue;
    inputs.push_back(op.accum[l].data());
    total += op.counts[l];
  }
  op.result.resize(like.bytes);
  if (like.bytes > 0) Sum(like.dtype, inputs, op.result.data(), like.bytes, like.op == SYNCD_AVERAGE ? total : 1);
  ++op.round;
  // Which set ranks were fresh: hex digit i holds ranks 4i..4i+3 (bit j: rank 4i+j).
  std::string bits((set_size_ + 3) / 4, '0');
  for (uint32_t l = 0; l < local_size_; ++l) {
    if (op.counts[l] > 0) {
      std::fill(op.accum[l].begin(), op.accum[l].end(), 0);
      op.counts[l] = 0;
    }
    if (!op.waiting[l]) {
      ++op.absent[l];
      continue;
    }
    const uint32_t s = first_ + l;
    const int digit = (bits[s / 4] - '0') | (1 << (s % 4));
    bits[s / 4] = "0123456789abcdef"[digit];
  }
  op.nap_total += op.fresh;
  op.result_text = "nap " + std::to_string(op.fresh) + " initiator " + std::to_string(initiator);
  std::string text = "round " + std::to_string(op.round) + " " + op.result_text + " fresh 1";
  if (text.size() + 7 + bits.size() < abi::kMessageBytes) text += " ranks " + bits;
  for (uint32_t l = 0; l < local_size_; ++l) {
    if (!op.waiting[l]) continue;
    Request r = std::move(*op.waiting[l]);
    op.waiting[l].reset();
    op.last_round[l] = op.round;
    if (r.bytes > 0) memcpy(r.data, op.result.data(), r.bytes);
    complete_({r}, Status(SYNCD_OK, text));
  }
  op.fresh = 0;
}

size_t PartialRunner::in_flight() const {
  size_t n = 0;
  for (const auto& [name, op] : ops_) n += op.fresh;
  return n;
}

void PartialRunner::FailAll(const Status& why) {
  std::map<std::string, Op> ops = std::move(ops_);
  ops_.clear();
  for (auto& [name, op] : ops)
    for (std::optional<Request>& w : op.waiting)
      if (w) complete_({*w}, Status(why.code(), "tensor '" + name + "': " + why.message()));
}

std::vector<PartialOpSnapshot> PartialRunner::Snapshot() const {
  std::vector<PartialOpSnapshot> out;
  for (const auto& [name, op] : ops_) {
    PartialOpSnapshot s;
    s.name = name;
    s.mode = op.like.partial_mode == SYNCD_PARTIAL_MAJORITY ? "majority" : "solo";
    s.quorum = uint32_t(op.like.root);
    s.rounds = op.round;
    s.mean_nap = op.round > 0 ? double(op.nap_total) / double(op.round) : 0;
    s.late = op.late;
    s.waiting = op.fresh;
    for (uint32_t l = 0; l < local_size_; ++l)
      if (op.absent[l] > 0) s.most_absent.emplace_back(first_ + l, op.absent[l]);
    std::stable_sort(s.most_absent.begin(), s.most_absent.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    if (s.most_absent.size() > 8) s.most_absent.resize(8);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace syncd
