// syncd as a torch.distributed backend: a c10d::ProcessGroup (torch 1.13's interface) whose
// collectives go through the thin client to the node's daemon, as syncd.torch's do. Built as the
// extension syncd._c10d; syncd/torch/distributed.py registers it as the backend "syncd".
//
// Tensors are staged through the client's shared-memory arena: a copy in before the request and
// one out when it completes; none for a contiguous tensor already in the arena where the op's
// result is the tensor itself or the op only reads it (allreduce, broadcast, send, recv);
// staging_stats() counts the copies (c10d_stager.h). send and recv use the daemons' point-to-point
// path (daemon/engine/point_to_point.h). Collectives are named after the process group (torch's
// group name, the same on every member rank) and a per-group sequence number: c10d has every rank
// call a group's collectives in one order, so the names agree without a negotiation of our own.
// Names that never recur leave error feedback out: their allreduces take the daemon's
// --compression only where it is a cast; allreduce_named (DDP's compression_hook) names a bucket
// the same way every step and takes any compression. The Work objects are in c10d_work.h.
//
// Completion: Work::wait() and isCompleted() drive the requests on the caller's thread. A Work's
// future (getFuture(), which DDP's reducer and communication hooks wait on) needs a thread to
// complete it (c10::ivalue::Future cannot be subclassed): the first getFuture() starts one per
// process group, sleeping in syncd_wait (on the doorbell) on the oldest request in flight.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include "client/python/src/c10d_ranks.h"
#include "client/python/src/compression_code.h"
#include "client/python/src/c10d_sparse.h"
#include "client/python/src/c10d_stager.h"
#include "client/python/src/c10d_work.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace syncd::c10d_backend {
namespace {

class ProcessGroupSyncd : public c10d::ProcessGroup, public FutureTracker {
 public:
  // The group's ranks as syncd numbers them (c10d_ranks.h): the job as launched (process_set 0,
  // no ranks), the job's live ranks after a loss (process_set 0, `ranks`: launch ranks, ascending)
  // or the syncd process set of `ranks` (new_group's, sorted), which every rank of the job added
  // (syncd/torch/distributed.py).
  ProcessGroupSyncd(py::object store, int rank, int size, std::chrono::milliseconds timeout, uintptr_t client,
                    py::object keep_alive, int process_set, std::vector<int> ranks, std::string group)
      : c10d::ProcessGroup(rank, size), store_(std::move(store)), keep_alive_(std::move(keep_alive)),
        client_(reinterpret_cast<syncd_client*>(client)), timeout_ms_(int64_t(timeout.count())),
        ranks_(process_set, std::move(ranks)),
        stager_(client_, rank, timeout_ms_, std::move(group), &ranks_, this) {
    TORCH_CHECK(client_ != nullptr, "syncd backend: no syncd client (is this rank attached to a daemon?)");
    ranks_.Check(client_, rank, size);
  }

  ~ProcessGroupSyncd() override {
    {
      std::lock_guard<std::mutex> lock(progress_mu_);
      stop_ = true;
    }
    progress_cv_.notify_all();
    if (progress_.joinable()) progress_.join();
  }

  const std::string getBackendName() const override { return "syncd"; }
  int process_set() const { return ranks_.process_set(); }
  const StagingStats& staging() const { return stager_.stats(); }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: allreduce takes one tensor per process, got ", tensors.size());
    if (tensors[0].is_sparse()) return SparseAllreduce(tensors[0], opts);
    return Reduce(tensors, ReduceOpOf(opts.reduceOp, "allreduce"), c10d::OpType::ALLREDUCE, "allreduce");
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return Reduce(tensors, ReduceOpOf(opts.reduceOp, "allreduce_coalesced"), c10d::OpType::ALLREDUCE_COALESCED,
                  "allreduce_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: broadcast takes one tensor per process, got ", tensors.size());
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < getSize(), "syncd backend: broadcast root ", opts.rootRank,
                " out of range (size ", getSize(), ")");
    auto work = stager_.Stage(tensors, c10d::OpType::BROADCAST, "broadcast",
                      [&](const syncd_tensor& t, syncd_handle* h) {
                        return syncd_broadcast_async(client_, &t, GlobalRank(opts.rootRank), h);
                      });
    return work;
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "syncd backend: allgather takes one input tensor and one output list per process");
    TORCH_CHECK(int(outputs[0].size()) == getSize(), "syncd backend: allgather's output list has ",
                outputs[0].size(), " tensors for ", getSize(), " ranks");
    for (const at::Tensor& o : outputs[0])
      TORCH_CHECK(o.numel() == inputs[0].numel() && o.scalar_type() == inputs[0].scalar_type(),
                  "syncd backend: allgather's outputs must match the input's size and dtype");
    std::vector<at::Tensor> outs = outputs[0];
    return Gather(inputs[0], outs, c10d::OpType::ALLGATHER, "allgather");
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(),
                "syncd backend: _allgather_base's output must hold size x the input (", input.numel() * getSize(),
                " elements of ", input.scalar_type(), ")");
    std::vector<at::Tensor> outs = {output};
    return Gather(input, outs, c10d::OpType::_ALLGATHER_BASE, "_allgather_base");
  }

  // Every rank's list of tensors: one allgather of each rank's tensors end to end, so rank q's
  // i-th tensor lands in outputs[q][i] (torch 1.13 deprecates it, gloo and MPI still have it).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) override {
    TORCH_CHECK(!inputs.empty(), "syncd backend: allgather_coalesced needs at least one input tensor");
    TORCH_CHECK(int(outputs.size()) == getSize(), "syncd backend: allgather_coalesced has ", outputs.size(),
                " output lists for ", getSize(), " ranks");
    std::vector<at::Tensor> flat, outs;
    for (const at::Tensor& t : inputs) {
      TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "syncd backend: allgather_coalesced's inputs differ in dtype");
      flat.push_back(t.flatten());
    }
    for (size_t q = 0; q < outputs.size(); ++q) {
      TORCH_CHECK(outputs[q].size() == inputs.size(), "syncd backend: allgather_coalesced's output list ", q, " has ",
                  outputs[q].size(), " tensors for ", inputs.size(), " inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        TORCH_CHECK(outputs[q][i].numel() == inputs[i].numel() && outputs[q][i].scalar_type() == inputs[i].scalar_type(),
                    "syncd backend: allgather_coalesced's output ", q, ",", i, " must match input ", i,
                    "'s size and dtype");
        outs.push_back(outputs[q][i]);
      }
    }
    return Gather(at::cat(flat), outs, c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: reduce takes one tensor per process, got ", tensors.size());
    CheckRoot(opts.rootRank, "reduce");
    const syncd_reduce_op op = ReduceOpOf(opts.reduceOp, "reduce");
    // syncd's reduce: only the root's tensor changes.
    const bool root = int(opts.rootRank) == getRank();
    std::vector<at::Tensor> outs = root ? tensors : std::vector<at::Tensor>{};
    return stager_.Flat(tensors[0].flatten(), outs, c10d::OpType::REDUCE, "reduce",
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result*) {
                  return syncd_reduce_async(client_, &t, op, GlobalRank(opts.rootRank), 1.0, 1.0, h);
                }, 0);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    TORCH_CHECK(inputs.size() == 1, "syncd backend: gather takes one input tensor per process");
    CheckRoot(opts.rootRank, "gather");
    const bool root = int(opts.rootRank) == getRank();
    std::vector<at::Tensor> outs;
    if (root) {
      TORCH_CHECK(outputs.size() == 1 && int(outputs[0].size()) == getSize(), "syncd backend: gather's root needs ",
                  getSize(), " output tensors");
      outs = outputs[0];
    } else {
      TORCH_CHECK(outputs.empty() || outputs[0].empty(), "syncd backend: gather's output list is for its root only");
    }
    // syncd's gather: only the root receives.
    return stager_.Flat(inputs[0].flatten(), outs, c10d::OpType::GATHER, "gather",
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result* res) {
                  return syncd_gather_async(client_, &t, GlobalRank(opts.rootRank), res, h);
                }, -1);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1, "syncd backend: scatter takes one output tensor per process");
    CheckRoot(opts.rootRank, "scatter");
    const int n = getSize(), r = getRank();
    const bool root = int(opts.rootRank) == r;
    at::Tensor out = outputs[0];
    // syncd's scatter: the root's pieces end to end, one share per rank; the others pass none.
    at::Tensor all = at::empty({0}, out.options());
    if (root) {
      TORCH_CHECK(inputs.size() == 1 && int(inputs[0].size()) == n, "syncd backend: scatter's root needs ", n,
                  " input tensors");
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : inputs[0]) {
        TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                    "syncd backend: scatter's inputs must match the output's size and dtype");
        flat.push_back(t.flatten());
      }
      all = at::cat(ranks_.SetPieces(std::move(flat)));
    } else {
      TORCH_CHECK(inputs.empty() || inputs[0].empty(), "syncd backend: scatter's input list is for its root only");
    }
    std::vector<at::Tensor> outs = {out};
    return stager_.Flat(all, outs, c10d::OpType::SCATTER, "scatter",
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result* res) {
                  return syncd_scatter_async(client_, &t, GlobalRank(opts.rootRank), res, h);
                }, -1);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 && int(inputs[0].size()) == getSize(),
                "syncd backend: reduce_scatter takes one output and ", getSize(), " inputs per process");
    std::vector<at::Tensor> flat;
    for (const at::Tensor& t : inputs[0]) {
      TORCH_CHECK(t.numel() == outputs[0].numel() && t.scalar_type() == outputs[0].scalar_type(),
                  "syncd backend: reduce_scatter's inputs must match the output's size and dtype");
      flat.push_back(t.flatten());
    }
    at::Tensor all = at::cat(flat);
    return ReduceScatter(all, outputs[0], opts, c10d::OpType::REDUCE_SCATTER, "reduce_scatter");
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(input.numel() == output.numel() * getSize() && input.scalar_type() == output.scalar_type(),
                "syncd backend: _reduce_scatter_base's input must hold size x the output (", output.numel() * getSize(),
                " elements of ", output.scalar_type(), ")");
    return ReduceScatter(input.flatten(), output, opts, c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base");
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    const int n = getSize();
    TORCH_CHECK(input.dim() >= 1 && output.dim() >= 1, "syncd backend: alltoall_base needs tensors of 1 or more dimensions");
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "syncd backend: alltoall_base's tensors differ in dtype");
    TORCH_CHECK(in_splits.empty() || int(in_splits.size()) == n, "syncd backend: alltoall_base's input splits name ",
                in_splits.size(), " ranks of ", n);
    TORCH_CHECK(out_splits.empty() || int(out_splits.size()) == n, "syncd backend: alltoall_base's output splits name ",
                out_splits.size(), " ranks of ", n);
    const int64_t row = input.dim() > 1 ? input.numel() / std::max<int64_t>(input.size(0), 1) : 1;
    std::vector<int64_t> splits = in_splits;
    if (splits.empty()) {
      TORCH_CHECK(input.size(0) % n == 0, "syncd backend: alltoall_base without splits needs a first dimension that ",
                  n, " ranks divide, got ", input.size(0));
      splits.assign(size_t(n), input.size(0) / n);
    }
    // Rows of `row` elements: syncd's alltoall sends whole rows.
    std::vector<int64_t> elems;
    for (int64_t s : splits) elems.push_back(s * row);
    elems = ranks_.SetCounts(elems);
    std::vector<at::Tensor> outs = {output};
    return stager_.Flat(input.flatten(), outs, c10d::OpType::ALLTOALL_BASE, "alltoall_base",
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result* res) {
                  return syncd_alltoall_async(client_, &t, elems.data(), int(elems.size()), res, h);
                }, -1);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    const int n = getSize();
    TORCH_CHECK(int(inputs.size()) == n && int(outputs.size()) == n, "syncd backend: alltoall takes ", n,
                " input and ", n, " output tensors");
    std::vector<at::Tensor> flat;
    std::vector<int64_t> elems;
    for (const at::Tensor& t : inputs) {
      TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "syncd backend: alltoall's inputs differ in dtype");
      flat.push_back(t.flatten());
      elems.push_back(t.numel());
    }
    elems = ranks_.SetCounts(elems);
    std::vector<at::Tensor> outs = outputs;
    return stager_.Flat(at::cat(flat), outs, c10d::OpType::ALLTOALL, "alltoall",
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result* res) {
                  return syncd_alltoall_async(client_, &t, elems.data(), int(elems.size()), res, h);
                }, -1);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    auto work = stager_.NewWork(c10d::OpType::BARRIER, {});
    SyncdWork::Request r;
    if (syncd_barrier_set_async(client_, ranks_.process_set(), &r.handle) != SYNCD_OK) {
      work->FailNow(std::string("syncd backend: barrier failed: ") + syncd_last_error());
      return work;
    }
    work->requests().push_back(r);
    return work;
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: send takes one tensor, got ", tensors.size());
    CheckRoot(dst, "send");
    return stager_.PointToPoint(tensors, c10d::OpType::SEND, "send", GlobalRank(dst), tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: recv takes one tensor, got ", tensors.size());
    CheckRoot(src, "recv");
    return stager_.PointToPoint(tensors, c10d::OpType::RECV, "recv", GlobalRank(src), tag);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "syncd backend: recv takes one tensor, got ", tensors.size());
    return stager_.PointToPoint(tensors, c10d::OpType::RECVANYSOURCE, "recv", SYNCD_ANY_SOURCE, tag);
  }

  // An average of `t` over the group under `name` (the same on every rank, and step after step:
  // the daemons keep error feedback per name), compressed as `compression` asks (syncd_compression
  // in the low 8 bits, top-k's and random-k's ratio in parts per million above; 0: the daemon's
  // --compression). DDP's communication hook (syncd.torch.distributed.compression_hook). The tensor
  // goes with its own shape (PowerSGD factors a matrix of its first dimension's rows).
  c10::intrusive_ptr<c10d::Work> allreduce_named(at::Tensor& t, const std::string& name, int compression) {
    TORCH_CHECK(!name.empty(), "syncd backend: allreduce_named needs a name");
    TORCH_CHECK(!t.is_sparse(), "syncd backend: allreduce_named takes dense tensors");
    std::vector<at::Tensor> tensors = {t};
    return stager_.Stage(tensors, c10d::OpType::ALLREDUCE, "allreduce", [&](const syncd_tensor& flat, syncd_handle* h) {
      syncd_tensor st = flat;
      if (t.dim() > 1) {
        st.ndim = int(t.dim());
        st.shape = t.sizes().data();
      }
      return syncd_allreduce_compressed_ratio_async(client_, &st, SYNCD_AVERAGE, 1.0, 1.0,
                                                    syncd::python::CompressionMethod(compression),
                                                    syncd::python::CompressionRatio(compression), h);
    }, stager_.NamedAs(name));
  }

  // Completion thread (for futures): started on the first getFuture().
  void Track(c10::intrusive_ptr<SyncdWork> work) override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    tracked_.push_back(std::move(work));
    if (!progress_.joinable()) progress_ = std::thread([this] { Progress(); });
    progress_cv_.notify_one();
  }

 private:
  // gloo's sparse allreduce (c10d_sparse.h), under the name a dense one would have.
  c10::intrusive_ptr<c10d::Work> SparseAllreduce(at::Tensor& t, const c10d::AllreduceOptions& opts) {
    TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "syncd backend: allreduce of a sparse tensor takes ReduceOp.SUM "
                "only (as gloo)");
    auto work = stager_.NewWork(c10d::OpType::ALLREDUCE, {t});
    const at::Tensor blob = SparseBlob(t);
    void* buffer = stager_.StageIn(blob, work.get(), "allreduce");
    if (buffer != nullptr)
      SubmitSparseSum(client_, work.get(), t, buffer, blob.numel(), stager_.NextName("allreduce") + ".0",
                      ranks_.process_set());
    return work;
  }

  c10::intrusive_ptr<c10d::Work> Reduce(std::vector<at::Tensor>& tensors, syncd_reduce_op op, c10d::OpType type,
                                        const char* what) {
    // The daemon's --compression if it is a cast: error feedback needs a name that recurs every
    // step, and these are numbered (compression_hook names DDP's buckets for it).
    return stager_.Stage(tensors, type, what, [&](const syncd_tensor& t, syncd_handle* h) {
      return syncd_allreduce_compressed_async(client_, &t, op, 1.0, 1.0, SYNCD_COMPRESSION_DEFAULT_CAST, h);
    });
  }

  // A group rank as syncd names it: a global rank (roots of a process set are global ranks).
  int GlobalRank(int64_t group_rank) const { return ranks_.Global(group_rank); }

  void CheckRoot(int64_t root, const char* op) const {
    TORCH_CHECK(root >= 0 && root < getSize(), "syncd backend: ", op, " root ", root, " out of range (size ", getSize(),
                ")");
  }

  // `all` holds every rank's share end to end (size x the output); this rank keeps its reduction.
  c10::intrusive_ptr<c10d::Work> ReduceScatter(const at::Tensor& all, at::Tensor& output,
                                               const c10d::ReduceScatterOptions& opts, c10d::OpType type,
                                               const char* op) {
    const syncd_reduce_op rop = ReduceOpOf(opts.reduceOp, op);
    const int64_t piece = output.numel();
    std::vector<at::Tensor> outs = {output};
    if ((rop == SYNCD_SUM || rop == SYNCD_AVERAGE) && ranks_.PerRankRows()) {
      // syncd's reducescatter over rows of `piece` elements, one per rank: this rank's row lands
      // at the start of the staging buffer.
      return stager_.Flat(all, outs, type, op, [&, rop](const syncd_tensor& t, syncd_handle* h, syncd_result*) {
        syncd_tensor rows = t;
        const int64_t dims[2] = {getSize(), piece};
        rows.ndim = 2;
        rows.shape = dims;
        return syncd_reducescatter_async(client_, &rows, rop, 1.0, 1.0, h);
      }, 0);
    }
    // MIN, MAX, PRODUCT (and the live ranks' view): the whole allreduce, then this rank's part.
    return stager_.Flat(all, outs, type, op, [&, rop](const syncd_tensor& t, syncd_handle* h, syncd_result*) {
      return syncd_allreduce_compressed_async(client_, &t, rop, 1.0, 1.0, SYNCD_COMPRESSION_DEFAULT_CAST, h);
    }, piece * getRank());
  }

  // Allgather of `input` into `outs`: one tensor of size x the input, or a tensor per rank.
  c10::intrusive_ptr<c10d::Work> Gather(const at::Tensor& input, std::vector<at::Tensor>& outs, c10d::OpType type,
                                        const char* op) {
    return stager_.Flat(input.flatten(), outs, type, op,
                [&](const syncd_tensor& t, syncd_handle* h, syncd_result* res) {
                  return syncd_allgather_async(client_, &t, res, h);
                }, -1);
  }

  void Progress() {
    std::unique_lock<std::mutex> lock(progress_mu_);
    while (!stop_) {
      if (tracked_.empty()) {
        progress_cv_.wait(lock, [&] { return stop_ || !tracked_.empty(); });
        continue;
      }
      c10::intrusive_ptr<SyncdWork> oldest = tracked_.front();
      lock.unlock();
      // Sleeps in the client (doorbell) up to 20 ms: new work and stopping are noticed by then.
      const bool done = oldest->Drive(20);
      lock.lock();
      if (done && !tracked_.empty() && tracked_.front() == oldest) tracked_.pop_front();
    }
  }

  py::object store_;       // kept alive as torch.distributed expects of a process group
  py::object keep_alive_;  // the Python client that owns syncd_client
  syncd_client* client_;
  int64_t timeout_ms_;
  GroupRanks ranks_;  // the group's ranks as syncd numbers them, and its process set
  Stager stager_;     // group named after torch's group name: the same on every member rank
  std::mutex progress_mu_;
  std::condition_variable progress_cv_;
  std::deque<c10::intrusive_ptr<SyncdWork>> tracked_;
  std::thread progress_;
  bool stop_ = false;
};

}  // namespace
}  // namespace syncd::c10d_backend

PYBIND11_MODULE(_c10d, m) {
  using syncd::c10d_backend::ProcessGroupSyncd;
  m.doc() = "syncd's torch.distributed backend (c10d ProcessGroup); use syncd.torch.distributed";
  py::module_::import("torch.distributed");  // registers c10d::ProcessGroup with pybind11 first
  py::class_<ProcessGroupSyncd, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupSyncd>>(m, "ProcessGroupSyncd")
      .def(py::init([](py::object store, int rank, int size, std::chrono::milliseconds timeout, uintptr_t client,
                       py::object keep_alive, int process_set, std::vector<int> ranks, std::string group) {
             return c10::make_intrusive<ProcessGroupSyncd>(std::move(store), rank, size, timeout, client,
                                                           std::move(keep_alive), process_set, std::move(ranks),
                                                           std::move(group));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("client"),
           py::arg("keep_alive"), py::arg("process_set") = 0, py::arg("ranks") = std::vector<int>{},
           py::arg("group") = "default")
      .def_property_readonly("process_set", &ProcessGroupSyncd::process_set)
      .def("allreduce_named", &ProcessGroupSyncd::allreduce_named, py::arg("tensor"), py::arg("name"),
           py::arg("compression") = 0, py::call_guard<py::gil_scoped_release>())
      // What staging through the arena cost this group so far (bench/torch_synthetic.py).
      .def("staging_stats", [](const ProcessGroupSyncd& pg) {
        const auto& s = pg.staging();
        py::dict d;
        d["bytes_in"] = s.bytes_in.load();
        d["bytes_out"] = s.bytes_out.load();
        d["seconds_in"] = double(s.ns_in.load()) / 1e9;
        d["seconds_out"] = double(s.ns_out.load()) / 1e9;
        d["zero_copy"] = s.zero_copy.load();
        return d;
      });
}
