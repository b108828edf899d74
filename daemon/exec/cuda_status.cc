#include "daemon/exec/cuda_status.h"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace syncd {

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

Status Cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status(SYNCD_ERR_SYSTEM, what + " failed (" + CudaText(e) + ")");
}

void CudaWarn(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  spdlog::warn("{} failed ({})", what, CudaText(e));
}

Status NcclError(const std::string& what, ncclResult_t r) {
  return Status(SYNCD_ERR_SYSTEM, what + " failed (NCCL: " + ncclGetErrorString(r) + ")");
}

ncclResult_t NcclState(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) return r;
  return state;
}

ncclDataType_t NcclType(syncd_dtype d) {
  switch (d) {
    case SYNCD_INT8: return ncclInt8;
    case SYNCD_UINT8: return ncclUint8;
    case SYNCD_INT32: return ncclInt32;
    case SYNCD_INT64: return ncclInt64;
    case SYNCD_FLOAT16: return ncclFloat16;
    case SYNCD_BFLOAT16: return ncclBfloat16;
    case SYNCD_FLOAT32: return ncclFloat32;
    case SYNCD_FLOAT64: return ncclFloat64;
    case SYNCD_BOOL: return ncclUint8;
    default: return ncclFloat32;
  }
}

ncclRedOp_t NcclOp(syncd_reduce_op op) {
  switch (op) {
    case SYNCD_MIN: return ncclMin;
    case SYNCD_MAX: return ncclMax;
    case SYNCD_PRODUCT: return ncclProd;
    default: return ncclSum;
  }
}

std::string UuidText(const uint8_t* u) {
  char s[48];
  snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
           u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

}  // namespace syncd
