// The NCCL communicators of this daemon's GPUs: one NCCL rank per local GPU, in one communicator
// over every GPU of every daemon of the job (ranks numbered node by node).
//
// - Connect(): creates them in one group call, nonblocking, and gives up after a bound (NCCL's
//   own rendezvous otherwise waits forever for a daemon that never comes).
// - Abort(): aborts them (a lost peer, a failed call); Reconnect() creates them again from a fresh
//   unique id with the layout of the last Connect (the next job on the same daemons).
// - Group(): one call per GPU inside one NCCL group, settled under the same bound.
//
// Built with CUDA only. Engine thread only (through the GPU executor).
#ifndef SYNCD_DAEMON_EXEC_NCCL_COMMS_H_
#define SYNCD_DAEMON_EXEC_NCCL_COMMS_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/exec/cuda_status.h"

namespace syncd {

class NcclComms {
 public:
  struct Gpu {
    int ordinal = 0;
    std::string name;  // for errors: "0: NVIDIA H100 80GB HBM3 (GPU-…)"
  };
  explicit NcclComms(std::vector<Gpu> gpus) : gpus_(std::move(gpus)), comms_(gpus_.size(), nullptr) {}
  ~NcclComms() { Destroy(); }
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  // `gpus_per_node[n]` GPUs on node n; this daemon is node `node_rank`. Blocks until every daemon
  // of the job has called it, at most `timeout_s` (then SYNCD_ERR_TIMEOUT naming this daemon's
  // ranks); the same bound settles every later group.
  Status Connect(const std::string& nccl_id, const std::vector<uint32_t>& gpus_per_node, uint32_t node_rank,
                 uint32_t timeout_s);
  // The layout of the last Connect, from the fresh unique id `nccl_id`: what is left of the old
  // communicators is aborted first. Every daemon of the job calls it, as Connect.
  Status Reconnect(const std::string& nccl_id);
  bool connected() const { return nranks_ > 0; }
  uint32_t nranks() const { return nranks_; }
  // The NCCL rank of node `node`'s first GPU.
  int NodeFirstRank(uint32_t node) const { return int(node_first_rank_.at(node)); }
  ncclComm_t comm(size_t gpu) const { return comms_[gpu]; }

  // `call(i, comm)` for every GPU i inside one NCCL group (the current device set to GPU i's).
  template <typename F>
  Status Group(F call, const char* what) {
    if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return NcclError("ncclGroupStart", r);
    ncclResult_t first = ncclSuccess;
    Status device;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      device = Cuda(cudaSetDevice(gpus_[i].ordinal), "cudaSetDevice(" + gpus_[i].name + ")");
      if (!device.ok()) break;
      if (ncclResult_t r = call(i, comms_[i]); r != ncclSuccess && r != ncclInProgress && first == ncclSuccess) first = r;
    }
    const ncclResult_t end = ncclGroupEnd();
    if (!device.ok()) return device;
    if (first != ncclSuccess || (end != ncclSuccess && end != ncclInProgress))
      return NcclError(what, first != ncclSuccess ? first : end);
    // Nonblocking communicators: the group may still be enqueueing (connecting on first use).
    if (end == ncclInProgress) return Settle(what);
    return Status::Ok();
  }

  // Waits until no communicator has a nonblocking call in progress, at most `timeout_ns`
  // (0: Connect's bound).
  Status Settle(const std::string& what, uint64_t timeout_ns = 0);
  // NCCL's asynchronous errors, the first one named.
  Status AsyncErrors();
  // Aborts every communicator (the job's GPU collectives cannot go on); not connected afterwards.
  void Abort();
  // Finalizes (settled, at most 10 s) and destroys them; aborts those that cannot be finalized.
  void Destroy();

 private:
  const std::vector<Gpu> gpus_;
  std::vector<ncclComm_t> comms_;
  std::vector<uint32_t> gpus_per_node_;
  std::vector<uint32_t> node_first_rank_;
  uint32_t node_rank_ = 0;
  uint32_t nranks_ = 0;
  uint32_t timeout_s_ = 60;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_NCCL_COMMS_H_
