// Executes collectives on GPU tensors for the ranks of this node: the daemon's side of CUDA IPC
// and NCCL. The engine thread is the only caller.
//
// - Map(): a client's GPU tensor, described by a GpuDescriptor, becomes a device pointer in the
//   daemon. The IPC side (opening, caching per client and allocation, retiring stale mappings)
//   is GpuIpcCache's (gpu_ipc_cache.h); the executor closes retired mappings once no queued work
//   uses them, and ForgetClient() retires a client's.
// - One NCCL rank per local GPU, created in one group call, spanning every GPU of every daemon
//   of the job (Connect()).
// - Allreduce(): per GPU, waits for the clients' streams (their flags or events), reduces the local ranks' tensors into a
//   fusion buffer (a kernel), runs ncclAllReduce across all GPUs of the job inside one NCCL
//   group, finishes (AVERAGE, postscale) and copies the result back into every rank's tensor. All
//   enqueued on the daemon's streams; Test() says when it is done. Nothing blocks the engine.
// - Errors: CUDA and NCCL failures become Status values naming what failed; NCCL's asynchronous
//   errors are polled in Test(); Abort() (a lost peer) aborts the communicators. The daemon lives:
//   Rebuild() brings the GPU path back for the next job.
#ifndef SYNCD_DAEMON_EXEC_GPU_EXECUTOR_H_
#define SYNCD_DAEMON_EXEC_GPU_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/tensor_table.h"
#include "daemon/transport/transport.h"
#include "proto/shm_abi.h"

namespace syncd {

struct GpuMapping {
  char* data = nullptr;    // the tensor in the daemon's address space
  int device = -1;         // index into the executor's devices
  GpuReady ready;          // what the daemon's stream waits for first
};

struct GpuStats {
  uint32_t devices = 0;
  uint32_t nccl_ranks = 0;       // in the job's communicator (0: not connected)
  uint64_t allreduces = 0;       // fused groups executed
  uint64_t broadcasts = 0;
  uint64_t bytes = 0;            // payload reduced or broadcast
  uint64_t handle_hits = 0;      // Map() found the allocation already open
  uint64_t handle_opens = 0;     // cudaIpcOpenMemHandle calls
  uint64_t handle_closes = 0;    // stale or forgotten mappings closed
  uint64_t open_handles = 0;     // cached now
  uint64_t map_ns = 0;           // engine time in Map() (handle lookups and opens)
  uint64_t issue_ns = 0;         // engine time issuing collectives (kernel, NCCL and copy launches)
  uint64_t device_ns = 0;        // from the end of issuing to the engine seeing the GPU work done
  uint64_t completed = 0;        // collectives whose GPU work completed
  uint64_t flag_waits = 0;       // the daemon's stream waited for a client's flag
  uint64_t event_waits = 0;      // ... for a client's interprocess event
  uint64_t aborts = 0;           // the GPU path was aborted (a lost peer or rank, a failed call)
  uint64_t rebuilds = 0;         // ... and its communicators rebuilt for a later job
  uint64_t flags_released = 0;   // clients' flags raised by the daemon after an abort
  std::string failure;           // why GPU collectives fail now ("": they run)
  std::vector<std::string> names;  // "0: NVIDIA H100 80GB HBM3 (GPU-…)"
};

class GpuExecutor {
 public:
  // The GPUs this process sees (CUDA_VISIBLE_DEVICES applies). nullptr, with *why, when there are
  // none or syncd was built without CUDA.
  // `ipc_cache` false: every request's mapping is closed once no queued work uses it (benchmarks).
  static std::unique_ptr<GpuExecutor> Probe(bool ipc_cache, std::string* why);
  virtual ~GpuExecutor() = default;

  virtual uint32_t devices() const = 0;
  // The GPUs' UUIDs ("GPU-…"), by device index.
  virtual std::vector<std::string> uuids() const = 0;
  // A fresh NCCL unique id (node 0 makes it; the rendezvous hands it to every daemon).
  virtual StatusOr<std::string> MakeNcclId() = 0;
  // Creates this daemon's NCCL ranks: `gpus_per_node[n]` GPUs on node n, ranks numbered node by
  // node. Blocks until every daemon of the job has called it (NCCL's own rendezvous), at most
  // `timeout_s`: then SYNCD_ERR_TIMEOUT naming this daemon's ranks. The same bound applies to a
  // group of collectives that NCCL is still connecting when it returns.
  virtual Status Connect(const std::string& nccl_id, const std::vector<uint32_t>& gpus_per_node, uint32_t node_rank,
                         uint32_t timeout_s) = 0;
  virtual bool connected() const = 0;
  // Whether an abort ended the GPU path (every later collective fails until Rebuild).
  virtual bool aborted() const = 0;
  // The next job on the same daemons runs on the GPUs again: what the last job left is ended
  // (aborted first if it was not), the streams run dry (bounded: a stream stuck for good is an
  // error, the daemon must restart), and the communicators are created again from a fresh unique
  // id (node 0 makes it; every daemon of the job calls Rebuild with it, as Connect).
  virtual Status Rebuild(const std::string& nccl_id) = 0;

  // `bytes` at the descriptor's offset. Errors name the problem, not the tensor (the caller does).
  virtual StatusOr<GpuMapping> Map(uint32_t client_id, const abi::GpuDescriptor& d, uint64_t bytes) = 0;
  virtual void ForgetClient(uint32_t client_id) = 0;
  // Whether the work a client queued before submitting is done, as far as the daemon can tell
  // without waiting on the GPU: false only for an interprocess event that has not fired yet. The
  // engine takes such a request once it has (a client that dies first never fires it, and a
  // daemon stream waiting on it would wait for good: an event, unlike a flag, cannot be released).
  virtual bool Signalled(const GpuReady& ready) = 0;

  // Enqueues one fused allreduce (members share dtype, op and scale factors; every request is a
  // GPU request). `world_size` divides AVERAGE. Returns a ticket for Test().
  virtual StatusOr<uint64_t> Allreduce(const TensorGroup& group, uint32_t world_size) = 0;
  // Enqueues a broadcast from global rank `root`, which lives on node `root_node`.
  virtual StatusOr<uint64_t> Broadcast(const ReadyTensor& t, uint32_t root_node) = 0;
  // kPending, kDone, or kFailed with *error. A finished ticket is forgotten.
  virtual CommState Test(uint64_t ticket, Status* error) = 0;
  virtual size_t in_flight() const = 0;
  // Aborts the communicators (a peer is lost; the job cannot go on): queued work ends, its tickets
  // fail with `why`, and so does everything later (until Rebuild). The clients' flags that queued
  // work waits for are raised by the daemon, so that a rank that died before its stream wrote
  // its flag does not hold the daemon's stream forever.
  virtual void Abort(const Status& why) = 0;

  virtual GpuStats stats() const = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_GPU_EXECUTOR_H_
