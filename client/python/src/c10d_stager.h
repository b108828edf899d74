// How syncd's c10d backend (c10d_backend.cc) hands a collective to its daemon: each tensor staged
// through the client's shared-memory arena (none where the tensor is already there and the op
// allows), one request per tensor under the group's next name, and a SyncdWork that copies the
// results out when they complete. The process group says what to submit; this says how.
#pragma once

#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "client/python/src/c10d_ranks.h"
#include "client/python/src/c10d_work.h"

namespace syncd::c10d_backend {

class Stager {
 public:
  // `ranks` and `tracker` (the process group) outlive the stager.
  Stager(syncd_client* client, int rank, int64_t timeout_ms, std::string group, const GroupRanks* ranks,
         FutureTracker* tracker)
      : client_(client), rank_(rank), timeout_ms_(timeout_ms), group_(std::move(group)), ranks_(ranks),
        tracker_(tracker) {}

  const StagingStats& stats() const { return *stats_; }

  // The group's next collective's name: the same on every member rank (they call in one order).
  std::string NextName(const char* op) { return "c10d." + group_ + "." + op + "." + std::to_string(seq_++); }
  // A name the caller chose (DDP's communication hook: one per bucket, recurring every step).
  std::string NamedAs(const std::string& name) const { return "c10d." + group_ + "." + name; }

  // Copies `t` into a fresh arena buffer; nullptr (and the work failed) when the arena is full.
  void* StageIn(const at::Tensor& t, SyncdWork* work, const char* op, bool copy = true) {
    const size_t bytes = size_t(t.numel()) * t.element_size();
    void* buf = syncd_alloc(client_, bytes == 0 ? 1 : bytes);
    if (buf == nullptr) {
      work->FailNow(std::string("syncd backend: ") + op + ": the shared arena has no room for " +
                    std::to_string(bytes) + " bytes (raise syncd --arena-size)");
      return nullptr;
    }
    if (!copy || bytes == 0) return buf;
    const uint64_t t0 = NowNs();
    const at::Tensor c = t.contiguous();
    memcpy(buf, c.data_ptr(), bytes);
    stats_->bytes_in += bytes;
    stats_->ns_in += NowNs() - t0;
    return buf;
  }

  c10::intrusive_ptr<SyncdWork> NewWork(c10d::OpType type, const std::vector<at::Tensor>& outputs) {
    auto work = c10::make_intrusive<SyncdWork>(client_, rank_, type, outputs, timeout_ms_);
    work->set_group(tracker_);
    return work;
  }

  // One request per tensor, each on the tensor itself (in the arena) or a staged copy, named
  // `base` (empty: the group's next name) and its index; results copied back into the tensors.
  template <typename Submit>
  c10::intrusive_ptr<c10d::Work> Stage(std::vector<at::Tensor>& tensors, c10d::OpType type, const char* op,
                                       Submit submit, std::string base = {}) {
    for (const at::Tensor& t : tensors) CheckCpu(t, op);
    auto work = NewWork(type, tensors);
    if (base.empty()) base = NextName(op);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      SyncdWork::Request r;
      if (!StageIn(t, work.get(), op, &r, /*in_place=*/true)) return work;
      const std::string name = base + "." + std::to_string(i);
      const int64_t count = t.numel();
      syncd_tensor st{name.c_str(), r.buffer, DtypeOf(t, op), 1, &count, ranks_->process_set()};
      if (submit(st, &r.handle) != SYNCD_OK) {
        if (r.owned) syncd_free(client_, r.buffer);
        work->FailNow(std::string("syncd backend: ") + op + " failed: " + syncd_last_error());
        return work;
      }
      work->requests().push_back(r);
    }
    std::vector<at::Tensor> outs = tensors;
    work->set_unstage([outs, stats = stats_](std::deque<SyncdWork::Request>& rs) mutable {
      for (size_t i = 0; i < outs.size(); ++i) {
        std::vector<at::Tensor> one = {outs[i]};
        CopyOut(static_cast<const char*>(rs[i].buffer), one, stats.get());
      }
    });
    return work;
  }

  // One request on a 1-D staging copy of `flat`. On completion the elements from `offset` on
  // (or, with offset -1, the request's result block) are copied into `outs` end to end.
  template <typename Submit>
  c10::intrusive_ptr<c10d::Work> Flat(const at::Tensor& flat, std::vector<at::Tensor>& outs, c10d::OpType type,
                                      const char* op, Submit submit, int64_t offset) {
    CheckCpu(flat, op);
    for (const at::Tensor& o : outs) CheckCpu(o, op);
    auto work = NewWork(type, outs);
    void* buffer = StageIn(flat, work.get(), op);
    if (buffer == nullptr) return work;
    SyncdWork::Request& r = work->requests().emplace_back();
    r.buffer = buffer;
    const std::string name = NextName(op);
    const int64_t count = flat.numel();
    syncd_tensor st{name.c_str(), buffer, DtypeOf(flat, op), 1, &count, ranks_->process_set()};
    if (submit(st, &r.handle, &r.result) != SYNCD_OK) {
      syncd_free(client_, buffer);
      work->requests().pop_back();
      work->FailNow(std::string("syncd backend: ") + op + " failed: " + syncd_last_error());
      return work;
    }
    r.has_result = offset < 0;
    const size_t esize = flat.element_size();
    const std::string what = op;
    work->set_unstage([outs, offset, esize, what, stats = stats_](std::deque<SyncdWork::Request>& rs) mutable {
      const char* data = offset < 0 ? static_cast<const char*>(rs[0].result.data)
                                    : static_cast<const char*>(rs[0].buffer) + size_t(offset) * esize;
      size_t total = 0;
      for (const at::Tensor& o : outs) total += size_t(o.numel()) * o.element_size();
      // (No outputs: a gather's rank that is not its root.)
      TORCH_CHECK(offset >= 0 || outs.empty() || rs[0].result.bytes == total, "syncd backend: ", what, " received ",
                  rs[0].result.bytes, " bytes where the outputs hold ", total);
      CopyOut(data, outs, stats.get());
    });
    return work;
  }

  // A send or receive of one tensor with a global rank (SYNCD_ANY_SOURCE: any). Not collective,
  // so named apart from the group's collectives (numbered alike everywhere).
  c10::intrusive_ptr<c10d::Work> PointToPoint(std::vector<at::Tensor>& tensors, c10d::OpType type, const char* op,
                                              int peer, int tag) {
    CheckCpu(tensors[0], op);
    TORCH_CHECK(tag >= 0, "syncd backend: ", op, " with tag ", tag, ": tags are 0 or more");
    const bool recv = type != c10d::OpType::SEND;
    auto work = NewWork(type, tensors);
    if (auto group_of = ranks_->GroupOf()) work->set_source_map(std::move(group_of));
    const at::Tensor& t = tensors[0];
    SyncdWork::Request& r = work->requests().emplace_back();
    r.recv = recv;
    if (!StageIn(t, work.get(), op, &r, /*in_place=*/true, /*copy=*/!recv)) {
      work->requests().pop_back();
      return work;
    }
    const std::string name = "c10d." + group_ + ".p2p." + std::to_string(p2p_seq_++);
    const int64_t count = t.numel();
    syncd_tensor st{name.c_str(), r.buffer, DtypeOf(t, op), 1, &count, ranks_->process_set()};
    const int rc = recv ? syncd_recv_async(client_, &st, peer, tag, &r.handle)
                        : syncd_send_async(client_, &st, peer, tag, &r.handle);
    if (rc != SYNCD_OK) {
      if (r.owned) syncd_free(client_, r.buffer);
      work->requests().pop_back();
      work->FailNow(std::string("syncd backend: ") + op + " failed: " + syncd_last_error());
      return work;
    }
    if (recv) {
      std::vector<at::Tensor> outs = tensors;
      work->set_unstage([outs, stats = stats_](std::deque<SyncdWork::Request>& rs) mutable {
        CopyOut(static_cast<const char*>(rs[0].buffer), outs, stats.get());
      });
    }
    return work;
  }

 private:
  // Where request `r` of `t` runs: with `in_place` (the op's result is the tensor itself, or it
  // only reads it) and `t` already in the arena, on the tensor's own memory; otherwise a fresh
  // arena buffer (`copy`: holding `t`'s data). Sets r->buffer and r->owned; false (and the work
  // failed) when the arena is full.
  bool StageIn(const at::Tensor& t, SyncdWork* work, const char* op, SyncdWork::Request* r, bool in_place,
               bool copy = true) {
    const size_t bytes = size_t(t.numel()) * t.element_size();
    if (in_place && bytes > 0 && t.is_contiguous() && syncd_in_arena(client_, t.data_ptr(), bytes)) {
      r->buffer = t.data_ptr();
      r->owned = false;
      ++stats_->zero_copy;
      return true;
    }
    r->buffer = StageIn(t, work, op, copy);
    return r->buffer != nullptr;
  }

  syncd_client* client_;
  int rank_;
  int64_t timeout_ms_;
  std::string group_;  // torch's group name: the same on every member rank
  const GroupRanks* ranks_;
  FutureTracker* tracker_;
  uint64_t seq_ = 0;
  uint64_t p2p_seq_ = 0;
  std::shared_ptr<StagingStats> stats_ = std::make_shared<StagingStats>();
};

}  // namespace syncd::c10d_backend
