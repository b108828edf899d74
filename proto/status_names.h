// Names of the syncd_status codes, shared by the client library and the daemon.
#ifndef SYNCD_PROTO_STATUS_NAMES_H_
#define SYNCD_PROTO_STATUS_NAMES_H_

#include "syncd/client.h"

namespace syncd::abi {

inline const char* StatusName(int s) {
  switch (s) {
    case SYNCD_OK: return "OK";
    case SYNCD_IN_PROGRESS: return "IN_PROGRESS";
    case SYNCD_ERR_INVALID: return "INVALID";
    case SYNCD_ERR_MISMATCH: return "MISMATCH";
    case SYNCD_ERR_DUPLICATE: return "DUPLICATE";
    case SYNCD_ERR_RANK_LOST: return "RANK_LOST";
    case SYNCD_ERR_DAEMON_LOST: return "DAEMON_LOST";
    case SYNCD_ERR_TIMEOUT: return "TIMEOUT";
    case SYNCD_ERR_NO_MEMORY: return "NO_MEMORY";
    case SYNCD_ERR_PROTOCOL: return "PROTOCOL";
    case SYNCD_ERR_REFUSED: return "REFUSED";
    case SYNCD_ERR_SYSTEM: return "SYSTEM";
    case SYNCD_ERR_INTERNAL: return "INTERNAL";
    case SYNCD_ERR_STALLED: return "STALLED";
    default: return "UNKNOWN";
  }
}

inline size_t DtypeSize(uint32_t dtype) {
  switch (dtype) {
    case SYNCD_INT8: case SYNCD_UINT8: case SYNCD_BOOL: return 1;
    case SYNCD_FLOAT16: case SYNCD_BFLOAT16: case SYNCD_INT16: return 2;
    case SYNCD_INT32: case SYNCD_FLOAT32: return 4;
    case SYNCD_INT64: case SYNCD_FLOAT64: return 8;
    default: return 0;
  }
}

inline const char* DtypeName(uint32_t dtype) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32", "int64", "float16",
                                       "bfloat16", "float32", "float64", "int16", "bool"};
  return dtype < SYNCD_DTYPE_COUNT ? kNames[dtype] : "invalid-dtype";
}

inline const char* ReduceOpName(uint32_t op) {
  static const char* const kNames[] = {"sum", "average", "min", "max", "product", "adasum"};
  return op < SYNCD_REDUCE_OP_COUNT ? kNames[op] : "invalid-op";
}

// syncd_compression as --compression spells it.
inline const char* CompressionName(uint32_t c) {
  static const char* const kNames[] = {"default", "none", "fp16", "bf16", "topk", "randomk", "onebit", "powersgd"};
  return c < SYNCD_COMPRESSION_COUNT ? kNames[c] : c == SYNCD_COMPRESSION_DEFAULT_CAST ? "default-cast"
                                                                                       : "invalid-compression";
}

// Whether method `c` can reduce with `op`: the casts (fp16, bf16) reduce in their type with any op
// but Adasum (none: it runs uncompressed); top-k, 1-bit and PowerSGD sum what each node keeps (Sum
// and Average only).
inline bool CompressionReduces(uint32_t c, uint32_t op) {
  if (op == SYNCD_ADASUM)
    return c == SYNCD_COMPRESSION_DEFAULT || c == SYNCD_COMPRESSION_NONE || c == SYNCD_COMPRESSION_DEFAULT_CAST;
  const bool sums = c == SYNCD_COMPRESSION_TOPK || c == SYNCD_COMPRESSION_ONEBIT || c == SYNCD_COMPRESSION_POWERSGD;
  return !sums || op == SYNCD_SUM || op == SYNCD_AVERAGE;
}

// Why method `c` is no longer offered, or nullptr. Random-k with error feedback does not train under
// momentum: the quickstart's digits network (2 x 2, SGD momentum 0.9, 30 epochs) ended in NaN or
// at chance at ratios 0.01 to 0.25, with error feedback, unbiased (1/ratio), with DGC's momentum
// correction and with EF21; without momentum it reached 79 % at 0.01 (98 % uncompressed), where
// top-k trains within a point.
inline const char* CompressionWithdrawn(uint32_t c) {
  return c == SYNCD_COMPRESSION_RANDOMK
             ? "random-k compression is withdrawn: with error feedback it does not train under momentum (the digits "
               "network with SGD momentum 0.9 ended in NaN or at chance at ratios 0.01 to 0.25); use topk at the "
               "same ratio, which trains within a point of uncompressed"
             : nullptr;
}

// What a rank may ask of an allreduce: a method or one of the two defaults.
inline bool IsCompressionRequest(uint32_t c) {
  return c < SYNCD_COMPRESSION_COUNT || c == SYNCD_COMPRESSION_DEFAULT_CAST;
}

}  // namespace syncd::abi

#endif  // SYNCD_PROTO_STATUS_NAMES_H_
