// CUDA and NCCL results as Status, and NCCL's names for syncd's dtypes and ops: what the GPU
// executor and the IPC cache share. Built with CUDA only.
#ifndef SYNCD_DAEMON_EXEC_CUDA_STATUS_H_
#define SYNCD_DAEMON_EXEC_CUDA_STATUS_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <string>

#include "daemon/base/status.h"
#include "syncd/client.h"

namespace syncd {

// "cudaErrorInvalidValue: invalid argument".
std::string CudaText(cudaError_t e);
// A CUDA runtime call's result: Ok, or SYNCD_ERR_SYSTEM "<what> failed (<error>)". The error is
// cleared, so that the next call does not report it again (a sticky error stays in the context
// and fails the next call too, as it should).
Status Cuda(cudaError_t e, const std::string& what);
// Teardown: nothing can be done about a failure but log it.
void CudaWarn(cudaError_t e, const char* what);

Status NcclError(const std::string& what, ncclResult_t r);
// What NCCL is still doing on a communicator: ncclInProgress while a nonblocking call runs, else
// its asynchronous error (ncclSuccess: none).
ncclResult_t NcclState(ncclComm_t comm);
// SYNCD_BOOL as uint8 (reduced with LogicalOp); SYNCD_INT16 has no NCCL type (callers refuse it).
ncclDataType_t NcclType(syncd_dtype d);
// AVERAGE is a sum, divided afterwards.
ncclRedOp_t NcclOp(syncd_reduce_op op);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L writes a device's UUID.
std::string UuidText(const uint8_t* uuid);

}  // namespace syncd

#endif  // SYNCD_DAEMON_EXEC_CUDA_STATUS_H_
