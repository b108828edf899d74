#include "daemon/coord/topo_runner.h"

#include "daemon/collectives/collective.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
TopoRunner::TopoRunner(std::shared_ptr<const TopoPlan> plan) : plan_(std::move(plan)) {
  for (uint32_t i = 0; i < plan_->tensors.size(); ++i) index_.emplace(plan_->tensors[i].name, i);
  held_.resize(plan_->tensors.size());
  group_of_.resize(plan_->tensors.size());
  for (uint32_t g = 0; g < plan_->groups(); ++g)
    for (size_t i = plan_->group_begin[g]; i < plan_->group_end(g); ++i) group_of_[i] = g;
  ready_in_group_.assign(plan_->groups(), 0);
  first_ready_ns_.assign(plan_->groups(), 0);
}

Status TopoRunner::Add(ReadyTensor* t) {
  const Request& r = t->first();
  const uint32_t i = index_.at(r.name);
  const PlannedTensor& p = plan_->tensors[i];
  uint64_t count = 1;
  for (int64_t d : r.shape) count *= uint64_t(d);
  std::string why;
  if (r.kind != abi::OpKind::kAllreduce) why = "it is not an allreduce";
  else if (r.dtype != p.dtype)
    why = std::string("dtype ") + abi::DtypeName(r.dtype) + ", the plan says " + abi::DtypeName(p.dtype);
  else if (count != p.count)
    why = std::to_string(count) + " elements, the plan says " + std::to_string(p.count);
  else if (r.op != p.op)
    why = std::string("reduce op ") + abi::ReduceOpName(r.op) + ", the plan says " + abi::ReduceOpName(p.op);
  else if (r.gpu != p.gpu)
    why = std::string(r.gpu ? "GPU" : "host") + " memory, the plan says " + (p.gpu ? "GPU" : "host") + " memory";
  else if (r.compression != p.compression || r.compression_ppm != p.compression_ppm)
    why = "compression " + CompressionText(r.compression, r.compression_ppm) + ", the plan says " +
          CompressionText(p.compression, p.compression_ppm);
  else if (held_[i])
    why = "it was submitted again before its group ran";
  if (!why.empty())
    return Status(SYNCD_ERR_MISMATCH, "tensor '" + r.name + "' does not match the registered TOPO plan (rank " +
                                          std::to_string(r.rank) + "): " + why);
  const uint32_t g = group_of_[i];
  if (ready_in_group_[g]++ == 0) first_ready_ns_[g] = abi::MonotonicNs();
  held_[i] = std::move(*t);
  return Status::Ok();
}

std::optional<AgreedWork> TopoRunner::Next() {
  const uint32_t g = next_group_;
  if (running_ || ready_in_group_[g] != plan_->group_end(g) - plan_->group_begin[g]) return std::nullopt;
  AgreedWork work;
  for (size_t i = plan_->group_begin[g]; i < plan_->group_end(g); ++i) {
    work.tensors.push_back(std::move(*held_[i]));
    held_[i].reset();
  }
  ready_in_group_[g] = 0;
  // Groups run one at a time, so consecutive numbers never overlap; below the all-ones tag.
  work.tag = TopoCycleTag(seq_++);
  running_ = true;
  running_tensors_ = work.tensors.size();
  issued_ns_ = abi::MonotonicNs();
  return work;
}

void TopoRunner::StandInForNext(const std::function<ReadyTensor(const PlannedTensor&)>& make) {
  const uint32_t g = next_group_;
  if (running_) return;
  for (size_t i = plan_->group_begin[g]; i < plan_->group_end(g); ++i) {
    if (held_[i]) continue;
    if (ready_in_group_[g]++ == 0) first_ready_ns_[g] = abi::MonotonicNs();
    held_[i] = make(plan_->tensors[i]);
  }
}

void TopoRunner::Done(bool ok) {
  running_ = false;
  if (!ok) return;
  ++stats_.groups_executed;
  stats_.execution_ns_total += abi::MonotonicNs() - issued_ns_;
  stats_.tensors_executed += running_tensors_;
  if (++next_group_ == plan_->groups()) {
    next_group_ = 0;
    ++stats_.steps;
  }
}

void TopoRunner::FailAll(const Status& why, std::vector<FailedTensor>* ended) {
  running_ = false;
  for (auto& h : held_)
    if (h) {
      if (!h->requests.empty()) {
        const std::string what = "tensor '" + h->first().name + "': " + why.message();
        ended->push_back(FailedTensor{std::move(h->requests), Status(why.code(), what)});
      }
      h.reset();
    }
  ready_in_group_.assign(plan_->groups(), 0);
}

size_t TopoRunner::in_flight() const {
  size_t n = 0;
  for (uint32_t c : ready_in_group_) n += c;
  return n;
}

std::optional<TopoRunner::Wait> TopoRunner::Waiting(uint64_t now_ns, uint64_t min_age_ns) const {
  const uint32_t g = next_group_;
  if (running_ || ready_in_group_[g] == 0 || now_ns - first_ready_ns_[g] < min_age_ns) return std::nullopt;
  Wait w{g, now_ns - first_ready_ns_[g], {}};
  for (size_t i = plan_->group_begin[g]; i < plan_->group_end(g); ++i)
    if (!held_[i]) w.missing.push_back(plan_->tensors[i].name);
  return w;
}

}  // namespace syncd
