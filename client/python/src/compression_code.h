// How syncd.torch's Compression classes pass a method to the bindings (compression.py): the
// syncd_compression in the low 8 bits, above them top-k's and random-k's ratio in parts per million
// or PowerSGD's rank (0: the daemon's --compression-ratio or --compression-rank).
#ifndef SYNCD_CLIENT_PYTHON_SRC_COMPRESSION_CODE_H_
#define SYNCD_CLIENT_PYTHON_SRC_COMPRESSION_CODE_H_

#include "syncd/client.h"

namespace syncd::python {

inline syncd_compression CompressionMethod(int code) { return syncd_compression(code & 0xff); }

// syncd_allreduce_compressed_ratio_async's `ratio`.
inline double CompressionRatio(int code) {
  const int above = code >> 8;
  return CompressionMethod(code) == SYNCD_COMPRESSION_POWERSGD ? double(above) : above / 1e6;
}

}  // namespace syncd::python

#endif  // SYNCD_CLIENT_PYTHON_SRC_COMPRESSION_CODE_H_
