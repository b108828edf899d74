// syncd._client: the Python face of libsyncclient. A thin layer: tensors travel as (address,
// dtype, shape) so the binding depends on the C client and pybind11 only; syncd.torch decides
// where tensors live (arena or not) and keeps them alive while requests are in flight.
//
// Errors: bad arguments and duplicate in-flight names raise ValueError (as Horovod does at
// submission); everything else raises syncd.errors.SyncdError(message, status_name), a
// RuntimeError. syncd_wait releases the GIL; nothing else blocks.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "client/python/src/compression_code.h"
#include "syncd/client.h"

namespace py = pybind11;

namespace {

// syncd.errors.SyncdError(message, status_name), a RuntimeError.
[[noreturn]] void RaiseSyncdError(const std::string& message, int status) {
  py::object cls = py::module_::import("syncd.errors").attr("SyncdError");
  PyErr_SetObject(cls.ptr(), py::make_tuple(message, syncd_status_name(status)).ptr());
  throw py::error_already_set();
}

// A submission the client refused: bad arguments and duplicate names are ValueErrors, as in Horovod.
[[noreturn]] void Raise(int status) {
  const std::string message = syncd_last_error();
  if (status == SYNCD_ERR_INVALID || status == SYNCD_ERR_DUPLICATE) throw py::value_error(message);
  RaiseSyncdError(message, status);
}

void Check(int status) {
  if (status != SYNCD_OK) Raise(status);
}

class PyClient {
 public:
  PyClient(std::optional<std::string> run_dir, int rank, int size, int local_rank, int local_size,
           int attach_timeout_ms, uint64_t job_id) {
    syncd_init_options o;
    syncd_init_options_default(&o);
    if (run_dir) o.run_dir = run_dir->c_str();
    o.rank = rank;
    o.size = size;
    o.local_rank = local_rank;
    o.local_size = local_size;
    o.attach_timeout_ms = attach_timeout_ms;
    o.job_id = job_id;
    int rc;
    {
      py::gil_scoped_release nogil;  // the attach retries while the daemon starts
      rc = syncd_init(&o, &c_);
    }
    Check(rc);
  }
  ~PyClient() { Close(); }

  void Close() {
    if (c_ != nullptr) syncd_shutdown(c_);
    c_ = nullptr;
    results_.clear();  // the segment is unmapped: no result is readable any more
    partial_.clear();
  }
  bool closed() const { return c_ == nullptr; }
  // syncd_leave: the daemon lets this rank go; the mappings stay for whatever still points into them.
  void Leave() {
    if (c_ != nullptr) syncd_leave(c_);
  }

  syncd_client* get() const {
    if (c_ == nullptr) RaiseSyncdError("syncd client is shut down", SYNCD_ERR_INVALID);
    return c_;
  }

  uintptr_t Alloc(size_t bytes) {
    void* p = syncd_alloc(get(), bytes);
    if (p == nullptr) {
      PyErr_SetString(PyExc_MemoryError, syncd_last_error());
      throw py::error_already_set();
    }
    return reinterpret_cast<uintptr_t>(p);
  }

  py::memoryview View(uintptr_t addr, size_t bytes) {
    if (!syncd_in_arena(get(), reinterpret_cast<void*>(addr), bytes)) throw py::value_error("view outside the client's arena");
    return py::memoryview::from_memory(reinterpret_cast<void*>(addr), py::ssize_t(bytes), false);
  }

  static syncd_tensor Tensor(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape,
                             int process_set) {
    if (shape.size() > SYNCD_MAX_DIMS)
      throw py::value_error("tensor '" + name + "': " + std::to_string(shape.size()) + " dimensions, at most " +
                            std::to_string(SYNCD_MAX_DIMS) + " are supported");
    return syncd_tensor{name.c_str(), reinterpret_cast<void*>(addr), syncd_dtype(dtype), int(shape.size()), shape.data(),
                        process_set};
  }

  // `stream`: None for host memory; for CUDA memory the cudaStream_t (as an integer, 0 for the
  // default stream) whose queued work produces the tensor. `compression`: syncd_compression (host)
  // in the low 8 bits, top-k's and random-k's ratio in parts per million above them (0: the daemon's).
  uint64_t Allreduce(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape, int op,
                     double prescale, double postscale, std::optional<uintptr_t> stream, int process_set,
                     int compression) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    syncd_handle h = 0;
    if (stream)
      Check(syncd_allreduce_gpu_async(get(), &t, syncd_reduce_op(op), prescale, postscale, reinterpret_cast<void*>(*stream), &h));
    else
      Check(syncd_allreduce_compressed_ratio_async(get(), &t, syncd_reduce_op(op), prescale, postscale,
                                                   syncd::python::CompressionMethod(compression),
                                                   syncd::python::CompressionRatio(compression), &h));
    return h;
  }

  uint64_t Broadcast(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape, int root,
                     std::optional<uintptr_t> stream, int process_set) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    syncd_handle h = 0;
    if (stream)
      Check(syncd_broadcast_gpu_async(get(), &t, root, reinterpret_cast<void*>(*stream), &h));
    else
      Check(syncd_broadcast_async(get(), &t, root, &h));
    return h;
  }

  // Allgather and alltoall: the daemon places the result; after the request completes, Result
  // gives it (a memoryview into the result area and the per-rank rows) until Release.
  uint64_t Allgather(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape,
                     int process_set) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    auto result = std::make_unique<syncd_result>();
    syncd_handle h = 0;
    Check(syncd_allgather_async(get(), &t, result.get(), &h));
    results_[h] = std::move(result);
    return h;
  }

  uint64_t Alltoall(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape,
                    const std::optional<std::vector<int64_t>>& splits, int process_set) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    auto result = std::make_unique<syncd_result>();
    syncd_handle h = 0;
    Check(syncd_alltoall_async(get(), &t, splits ? splits->data() : nullptr, splits ? int(splits->size()) : 0,
                               result.get(), &h));
    results_[h] = std::move(result);
    return h;
  }

  // In place: this rank's rows end at the start of the tensor (reducescatter_rows says how many).
  uint64_t Reducescatter(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape, int op,
                         double prescale, double postscale, int process_set) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    syncd_handle h = 0;
    Check(syncd_reducescatter_async(get(), &t, syncd_reduce_op(op), prescale, postscale, &h));
    return h;
  }

  // Partial allreduce (eager-SGD): Poll and Wait keep its round's info for PartialInfo.
  uint64_t PartialAllreduce(const std::string& name, uintptr_t addr, int dtype, const std::vector<int64_t>& shape, int op,
                            int mode, int quorum, int process_set) {
    const syncd_tensor t = Tensor(name, addr, dtype, shape, process_set);
    syncd_handle h = 0;
    Check(syncd_partial_allreduce_async(get(), &t, syncd_reduce_op(op), mode, quorum, &h));
    partial_[h] = std::nullopt;
    return h;
  }

  // (round, nap, initiator, fresh) of a completed partial allreduce; once per handle.
  py::tuple PartialInfo(uint64_t h) {
    auto it = partial_.find(h);
    if (it == partial_.end() || !it->second) throw py::value_error("no completed partial allreduce for this handle");
    const syncd_partial_info i = *it->second;
    partial_.erase(it);
    return py::make_tuple(i.round, i.nap, i.initiator, bool(i.fresh));
  }

  py::tuple Result(uint64_t h) {
    auto it = results_.find(h);
    if (it == results_.end() || it->second->block == nullptr) throw py::value_error("no result for this handle");
    const syncd_result& r = *it->second;
    std::vector<int64_t> rows(r.rows, r.rows + r.nranks);
    // Writable: torch.frombuffer warns on read-only memory. The block is this client's alone.
    return py::make_tuple(py::memoryview::from_memory(const_cast<void*>(r.data), py::ssize_t(r.bytes), false), rows);
  }

  void Release(uint64_t h) {
    auto it = results_.find(h);
    if (it == results_.end()) return;
    syncd_release_result(get(), it->second.get());
    results_.erase(it);
  }

  uint64_t Barrier(int process_set) {
    syncd_handle h = 0;
    Check(syncd_barrier_set_async(get(), process_set, &h));
    return h;
  }

  // syncd_reattach: the same client, its segment handed to the daemon serving the run directory now.
  void Reattach(int timeout_ms) {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = syncd_reattach(get(), timeout_ms);
    }
    Check(rc);
  }

  // syncd_acknowledge_membership: how many times the job's membership changed.
  uint32_t AcknowledgeMembership() {
    uint32_t membership = 0;
    Check(syncd_acknowledge_membership(get(), &membership));
    return membership;
  }

  // syncd_job_set_ranks: the launch ranks of the job's global set.
  std::vector<int> JobSetRanks() {
    std::vector<int> ranks(size_t(syncd_size(get())));
    int count = 0;
    Check(syncd_job_set_ranks(get(), ranks.data(), int(ranks.size()), &count, nullptr));
    ranks.resize(std::min(ranks.size(), size_t(count)));
    return ranks;
  }

  // The job's timeline: blocks (GIL released) until this rank's daemon carried it out.
  void StartTimeline(const std::string& path) {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = syncd_start_timeline(get(), path.c_str());
    }
    Check(rc);
  }
  void StopTimeline() {
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = syncd_stop_timeline(get());
    }
    Check(rc);
  }

  uint64_t Fail(const std::string& name, const std::string& why, int process_set) {
    syncd_handle h = 0;
    Check(syncd_fail_set_async(get(), process_set, name.c_str(), why.c_str(), &h));
    return h;
  }

  // Collectives of every rank: block (GIL released) until every daemon made the change. A bad
  // argument is a ValueError, a change that failed a collective error.
  int AddProcessSet(const std::vector<int>& ranks, int64_t timeout_ms) {
    int id = 0;
    CheckChange(Unlocked([&](syncd_client* c) { return syncd_add_process_set(c, ranks.data(), int(ranks.size()), timeout_ms, &id); }));
    return id;
  }

  // hvd.join: blocks (GIL released) until every rank joined; the last rank to join.
  int Join(int64_t timeout_ms) {
    int last = -1;
    const int rc = Unlocked([&](syncd_client* c) { return syncd_join(c, timeout_ms, &last); });
    if (rc != SYNCD_OK) RaiseCompletion(rc);
    return last;
  }

  void RemoveProcessSet(int id, int64_t timeout_ms) {
    CheckChange(Unlocked([&](syncd_client* c) { return syncd_remove_process_set(c, id, timeout_ms); }));
  }

  // True when complete (the handle is then released); raises on failure.
  bool Poll(uint64_t h) {
    if (partial_.count(h)) return Wait(h, 0);
    const int rc = syncd_poll(get(), h);
    if (rc == SYNCD_IN_PROGRESS) return false;
    if (rc != SYNCD_OK) {
      results_.erase(h);  // a failed request has no result
      RaiseCompletion(rc);
    }
    return true;
  }

  // True when complete; False on timeout (the request stays in flight); raises on failure.
  bool Wait(uint64_t h, int64_t timeout_ms) {
    auto partial = partial_.find(h);
    syncd_partial_info info{};
    const int rc = Unlocked([&](syncd_client* c) {
      return partial != partial_.end() ? syncd_partial_wait(c, h, timeout_ms, &info) : syncd_wait(c, h, timeout_ms);
    });
    if (rc == SYNCD_ERR_TIMEOUT) return false;
    if (partial != partial_.end()) {
      if (rc == SYNCD_OK) partial->second = info;
      else partial_.erase(partial);
    }
    if (rc != SYNCD_OK) {
      results_.erase(h);
      RaiseCompletion(rc);
    }
    return true;
  }

  // ops: (name, tensor or None, dtype, count, op, gpu, compression as compression_code.h codes it);
  // edges: (producer, consumer).
  uint64_t RegisterGraph(
      const std::vector<std::tuple<std::string, std::optional<std::string>, int, uint64_t, int, bool, int>>& ops,
      const std::vector<std::pair<uint32_t, uint32_t>>& edges, const std::vector<uint32_t>& fetches,
      int64_t timeout_ms) {
    std::vector<syncd_graph_op> gops(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& [name, tensor, dtype, count, op, gpu, compression] = ops[i];
      gops[i] = syncd_graph_op{name.c_str(), tensor ? tensor->c_str() : nullptr, syncd_dtype(dtype), count,
                               syncd_reduce_op(op), gpu ? SYNCD_MEMORY_GPU : SYNCD_MEMORY_HOST,
                               syncd::python::CompressionMethod(compression),
                               syncd::python::CompressionRatio(compression)};
    }
    std::vector<uint32_t> flat;
    flat.reserve(2 * edges.size());
    for (const auto& [a, b] : edges) {
      flat.push_back(a);
      flat.push_back(b);
    }
    const syncd_graph g{gops.data(), gops.size(), flat.data(), edges.size(), fetches.data(), fetches.size()};
    syncd_client* c = get();
    uint64_t hash = 0;
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = syncd_register_graph(c, &g, timeout_ms, &hash);
    }
    if (rc != SYNCD_OK) RaiseCompletion(rc);
    return hash;
  }

 private:
  // A request that failed after submission: a collective error, never a ValueError.
  [[noreturn]] static void RaiseCompletion(int status) { RaiseSyncdError(syncd_last_error(), status); }
  static void CheckChange(int rc) {
    if (rc == SYNCD_ERR_INVALID) Raise(rc);
    if (rc != SYNCD_OK) RaiseCompletion(rc);
  }
  // Runs a blocking call of the C client without the GIL.
  template <typename F>
  int Unlocked(F call) {
    syncd_client* c = get();
    py::gil_scoped_release nogil;
    return call(c);
  }

  syncd_client* c_ = nullptr;
  // Where the completions of allgathers and alltoalls in flight (or not yet released) describe
  // their results, by handle.
  std::unordered_map<uint64_t, std::unique_ptr<syncd_result>> results_;
  std::unordered_map<uint64_t, std::optional<syncd_partial_info>> partial_;  // partial allreduces in flight
};

// The library's version, and the C API's dtypes, partial modes and reduce ops, as module integers.
void DefineConstants(py::module_& m) {
  m.attr("version") = syncd_version();  // the library loaded (syncd.__version__ is the package's)
  m.attr("shm_abi_version") = syncd_shm_abi_version();
  m.attr("INT8") = int(SYNCD_INT8);
  m.attr("UINT8") = int(SYNCD_UINT8);
  m.attr("INT32") = int(SYNCD_INT32);
  m.attr("INT64") = int(SYNCD_INT64);
  m.attr("FLOAT16") = int(SYNCD_FLOAT16);
  m.attr("BFLOAT16") = int(SYNCD_BFLOAT16);
  m.attr("FLOAT32") = int(SYNCD_FLOAT32);
  m.attr("FLOAT64") = int(SYNCD_FLOAT64);
  m.attr("INT16") = int(SYNCD_INT16);
  m.attr("BOOL") = int(SYNCD_BOOL);
  m.attr("PARTIAL_SOLO") = int(SYNCD_PARTIAL_SOLO);
  m.attr("PARTIAL_MAJORITY") = int(SYNCD_PARTIAL_MAJORITY);
  m.attr("SUM") = int(SYNCD_SUM);
  m.attr("AVERAGE") = int(SYNCD_AVERAGE);
  m.attr("MIN") = int(SYNCD_MIN);
  m.attr("MAX") = int(SYNCD_MAX);
  m.attr("PRODUCT") = int(SYNCD_PRODUCT);
  m.attr("ADASUM") = int(SYNCD_ADASUM);
}

}  // namespace

PYBIND11_MODULE(_client, m) {
  m.doc() = "libsyncclient binding: attach to the node's syncd and submit collectives";
  py::class_<PyClient>(m, "Client")
      .def(py::init<std::optional<std::string>, int, int, int, int, int, uint64_t>(), py::arg("run_dir") = py::none(),
           py::arg("rank") = -1, py::arg("size") = -1, py::arg("local_rank") = -1, py::arg("local_size") = -1,
           py::arg("attach_timeout_ms") = -1, py::arg("job_id") = 0)
      .def("close", &PyClient::Close)
      .def("leave", &PyClient::Leave)
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("rank", [](const PyClient& c) { return syncd_rank(c.get()); })
      // The syncd_client* for syncd._c10d (the torch.distributed backend shares this attachment).
      .def_property_readonly("address", [](const PyClient& c) { return reinterpret_cast<uintptr_t>(c.get()); })
      .def_property_readonly("size", [](const PyClient& c) { return syncd_size(c.get()); })
      .def_property_readonly("local_rank", [](const PyClient& c) { return syncd_local_rank(c.get()); })
      .def_property_readonly("local_size", [](const PyClient& c) { return syncd_local_size(c.get()); })
      .def_property_readonly("cross_rank", [](const PyClient& c) { return syncd_cross_rank(c.get()); })
      .def_property_readonly("cross_size", [](const PyClient& c) { return syncd_cross_size(c.get()); })
      .def_property_readonly("coord_mode", [](const PyClient& c) { return std::string(syncd_coord_mode(c.get())); })
      .def("alloc", &PyClient::Alloc, py::arg("nbytes"))
      .def("free", [](PyClient& c, uintptr_t addr) { syncd_free(c.get(), reinterpret_cast<void*>(addr)); })
      .def("in_arena", [](const PyClient& c, uintptr_t addr, size_t n) {
        return syncd_in_arena(c.get(), reinterpret_cast<const void*>(addr), n) != 0;
      })
      .def("view", &PyClient::View, py::arg("addr"), py::arg("nbytes"))
      .def("allreduce_async", &PyClient::Allreduce, py::arg("name"), py::arg("addr"), py::arg("dtype"),
           py::arg("shape"), py::arg("op"), py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
           py::arg("stream") = py::none(), py::arg("process_set") = 0, py::arg("compression") = 0)
      .def("broadcast_async", &PyClient::Broadcast, py::arg("name"), py::arg("addr"), py::arg("dtype"),
           py::arg("shape"), py::arg("root"), py::arg("stream") = py::none(), py::arg("process_set") = 0)
      .def("allgather_async", &PyClient::Allgather, py::arg("name"), py::arg("addr"), py::arg("dtype"),
           py::arg("shape"), py::arg("process_set") = 0)
      .def("alltoall_async", &PyClient::Alltoall, py::arg("name"), py::arg("addr"), py::arg("dtype"), py::arg("shape"),
           py::arg("splits") = py::none(), py::arg("process_set") = 0)
      .def("reducescatter_async", &PyClient::Reducescatter, py::arg("name"), py::arg("addr"), py::arg("dtype"),
           py::arg("shape"), py::arg("op"), py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
           py::arg("process_set") = 0)
      .def("partial_allreduce_async", &PyClient::PartialAllreduce, py::arg("name"), py::arg("addr"), py::arg("dtype"),
           py::arg("shape"), py::arg("op"), py::arg("mode"), py::arg("quorum"), py::arg("process_set") = 0)
      .def("partial_info", &PyClient::PartialInfo, py::arg("handle"))
      .def("join", &PyClient::Join, py::arg("timeout_ms") = -1)
      .def("add_process_set", &PyClient::AddProcessSet, py::arg("ranks"), py::arg("timeout_ms") = -1)
      .def("remove_process_set", &PyClient::RemoveProcessSet, py::arg("id"), py::arg("timeout_ms") = -1)
      .def("result", &PyClient::Result, py::arg("handle"))
      .def("release", &PyClient::Release, py::arg("handle"))
      .def_static("reducescatter_rows", [](int64_t first_dim, int size, int rank) {
        return syncd_reducescatter_rows(first_dim, size, rank);
      })
      .def("barrier_async", &PyClient::Barrier, py::arg("process_set") = 0)
      .def("fail_async", &PyClient::Fail, py::arg("name"), py::arg("why"), py::arg("process_set") = 0)
      .def("acknowledge_membership", &PyClient::AcknowledgeMembership)
      .def("job_set_ranks", &PyClient::JobSetRanks)
      .def("reattach", &PyClient::Reattach, py::arg("timeout_ms"))
      .def("replaces_lost_rank", [](PyClient& c) {
        int replaces = 0;
        Check(syncd_replaces_lost_rank(c.get(), &replaces));
        return replaces != 0;
      })
      .def("start_timeline", &PyClient::StartTimeline, py::arg("path"))
      .def("stop_timeline", &PyClient::StopTimeline)
      .def("poll", &PyClient::Poll, py::arg("handle"))
      .def("wait", &PyClient::Wait, py::arg("handle"), py::arg("timeout_ms") = -1)
      .def("register_graph", &PyClient::RegisterGraph, py::arg("ops"), py::arg("edges"), py::arg("fetches"),
           py::arg("timeout_ms") = -1);
  DefineConstants(m);
}
