#include "daemon/exec/nccl_comms.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>

#include "proto/doorbell.h"

namespace syncd {

Status NcclComms::Connect(const std::string& nccl_id, const std::vector<uint32_t>& gpus_per_node, uint32_t node_rank,
                          uint32_t timeout_s) {
  ncclUniqueId id;
  if (nccl_id.size() != sizeof(id.internal))
    return Status(SYNCD_ERR_PROTOCOL, "NCCL unique id of " + std::to_string(nccl_id.size()) + " bytes");
  memcpy(id.internal, nccl_id.data(), sizeof(id.internal));
  if (node_rank >= gpus_per_node.size() || gpus_per_node[node_rank] != gpus_.size())
    return Status(SYNCD_ERR_INTERNAL, "GPU count of this node disagrees with the rendezvous");
  gpus_per_node_ = gpus_per_node;
  node_rank_ = node_rank;
  timeout_s_ = timeout_s;
  uint32_t total = 0;
  node_first_rank_.clear();
  for (uint32_t g : gpus_per_node) {
    node_first_rank_.push_back(total);
    total += g;
  }
  const uint32_t first = node_first_rank_[node_rank];
  const std::string ranks = "NCCL ranks " + std::to_string(first) + ".." + std::to_string(first + gpus_.size() - 1) +
                            " of " + std::to_string(total);
  // Nonblocking communicators: creation can be given up (NCCL's own rendezvous waits forever for
  // a rank that never comes), and every later call is settled the same way (Settle).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return NcclError("ncclGroupStart", r);
  ncclResult_t init = ncclSuccess;
  Status device;
  for (size_t i = 0; i < gpus_.size() && init == ncclSuccess && device.ok(); ++i) {
    device = Cuda(cudaSetDevice(gpus_[i].ordinal), "cudaSetDevice(" + gpus_[i].name + ")");
    if (!device.ok()) break;
    init = ncclCommInitRankConfig(&comms_[i], int(total), id, int(first + i), &config);
    if (init == ncclInProgress) init = ncclSuccess;
  }
  ncclResult_t end = ncclGroupEnd();
  if (end == ncclInProgress) end = ncclSuccess;
  Status st = !device.ok()          ? device
              : init != ncclSuccess ? NcclError("ncclCommInitRankConfig (" + ranks + ")", init)
              : end != ncclSuccess  ? NcclError("ncclCommInitRankConfig (" + ranks + ", group)", end)
                                    : Settle("creating the NCCL communicator (" + ranks + ")");
  if (!st.ok()) {
    Abort();
    if (st.code() == SYNCD_ERR_TIMEOUT)
      st = Status(SYNCD_ERR_TIMEOUT, st.message() + ": every daemon of the job creates its ranks at once; one that "
                                                    "never does is down or cannot reach this one over NCCL's "
                                                    "network (NCCL_SOCKET_IFNAME; NCCL_DEBUG=INFO says more)");
    return st;
  }
  nranks_ = total;
  spdlog::info("NCCL: {} ranks in the job, this daemon holds ranks {}..{} (NCCL {})", total, first,
               first + gpus_.size() - 1, NCCL_VERSION_CODE);
  return Status::Ok();
}

Status NcclComms::Reconnect(const std::string& nccl_id) {
  if (gpus_per_node_.empty()) return Status(SYNCD_ERR_INTERNAL, "NCCL communicators rebuilt before they were built");
  Abort();
  const std::vector<uint32_t> layout = gpus_per_node_;
  return Connect(nccl_id, layout, node_rank_, timeout_s_);
}

Status NcclComms::Settle(const std::string& what, uint64_t timeout_ns) {
  if (timeout_ns == 0) timeout_ns = uint64_t(timeout_s_) * 1'000'000'000ull;
  const uint64_t start = abi::MonotonicNs();
  for (uint32_t spin = 0;; ++spin) {  // spins first: most settle at once
    bool busy = false;
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (!comms_[i]) continue;
      const ncclResult_t state = NcclState(comms_[i]);
      if (state == ncclInProgress) busy = true;
      else if (state != ncclSuccess) return NcclError(what + " on " + gpus_[i].name, state);
    }
    if (!busy) return Status::Ok();
    const uint64_t waited = abi::MonotonicNs() - start;
    if (waited > timeout_ns)
      return Status(SYNCD_ERR_TIMEOUT,
                    what + " did not finish within " + std::to_string(timeout_ns / 1'000'000'000ull) + " s");
    if (spin > 1000) usleep(waited < 10'000'000 ? 50 : 1000);
  }
}

Status NcclComms::AsyncErrors() {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (!comms_[i]) continue;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comms_[i], &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      return NcclError("NCCL on " + gpus_[i].name, async);
  }
  return Status::Ok();
}

void NcclComms::Abort() {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (!comms_[i]) continue;
    CudaWarn(cudaSetDevice(gpus_[i].ordinal), "cudaSetDevice");
    if (ncclResult_t r = ncclCommAbort(comms_[i]); r != ncclSuccess)
      spdlog::warn("ncclCommAbort on {} failed (NCCL: {})", gpus_[i].name, ncclGetErrorString(r));
    comms_[i] = nullptr;
  }
  nranks_ = 0;
}

void NcclComms::Destroy() {
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (!comms_[i]) continue;
    CudaWarn(cudaSetDevice(gpus_[i].ordinal), "cudaSetDevice");
    if (ncclResult_t r = ncclCommFinalize(comms_[i]); r != ncclSuccess && r != ncclInProgress)
      spdlog::warn("ncclCommFinalize on {} failed (NCCL: {})", gpus_[i].name, ncclGetErrorString(r));
  }
  const Status settled = Settle("finalizing the NCCL communicator", 10'000'000'000ull);
  if (!settled.ok()) spdlog::warn("{}: aborting it", settled.message());
  for (size_t i = 0; i < comms_.size(); ++i) {
    if (!comms_[i]) continue;
    CudaWarn(cudaSetDevice(gpus_[i].ordinal), "cudaSetDevice");
    const ncclResult_t r = settled.ok() ? ncclCommDestroy(comms_[i]) : ncclCommAbort(comms_[i]);
    if (r != ncclSuccess)
      spdlog::warn("destroying the NCCL communicator on {} failed (NCCL: {})", gpus_[i].name, ncclGetErrorString(r));
    comms_[i] = nullptr;
  }
  nranks_ = 0;
}

}  // namespace syncd
