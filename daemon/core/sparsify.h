// The error-feedback compressors of an allreduce's inter-node hop: top-k and 1-bit. Each takes `v`,
// a node's exact local sum plus the residual the node kept from earlier steps, and splits it into
// what crosses the nodes and what stays; what stays is left in `v` itself, as the new residual.
// Top-k moves whole elements, so what crosses plus what stays is `v` exactly; 1-bit's residual is
// v minus its block's value for v's sign, rounded once in v's dtype. Pure functions on float32 and
// float64; no allocation (the caller passes the scratch).
#ifndef SYNCD_DAEMON_CORE_SPARSIFY_H_
#define SYNCD_DAEMON_CORE_SPARSIFY_H_

#include <cstddef>
#include <cstdint>

namespace syncd {

// The elements a top-k segment of `n` sends at `ratio_ppm` parts per million: at
// least 1, at most n.
size_t SparseCount(size_t n, uint32_t ratio_ppm);

// Top-k: the `k` elements of largest magnitude (a NaN counts as the largest, so that it crosses as
// an uncompressed sum would carry it; ties go to the lower index), their indices ascending into
// `idx` and their values into `val`; those elements of `v` become 0. `scratch`: `n` entries. A
// sample of the magnitudes picks a threshold first; the k-th largest magnitude among the elements
// above it (nth_element over their magnitudes, copied side by side) is the cut.
void TakeTopK(float* v, size_t n, size_t k, uint32_t* idx, float* val, uint32_t* scratch);
void TakeTopK(double* v, size_t n, size_t k, uint32_t* idx, double* val, uint32_t* scratch);

// out[idx[i]] += val[i].
void AddAt(const uint32_t* idx, const float* val, size_t k, float* out);
void AddAt(const uint32_t* idx, const double* val, size_t k, double* out);

// 1-bit SGD (Seide et al., Interspeech 2014): in blocks of kOneBitBlock elements, bit i of `bits`
// ((n + 7) / 8 bytes) is set where v[i] >= 0 and block b sends two values, the mean of its elements
// >= 0 (scales[2b]) and the mean of the others (scales[2b + 1]; 0 where a block has none); `v`
// becomes v minus its block's value for its sign. Each block's sum crosses as it is (but for
// rounding), so error feedback stays stable under momentum where one scale per tensor (the mean
// magnitude) let the residuals grow until training diverged. False where `v` held a value that is
// not finite (a NaN or an infinity makes its block's value so).
constexpr size_t kOneBitBlock = 32;
constexpr size_t OneBitBlocks(size_t n) { return (n + kOneBitBlock - 1) / kOneBitBlock; }
bool TakeOneBit(float* v, size_t n, uint8_t* bits, float* scales);
bool TakeOneBit(double* v, size_t n, uint8_t* bits, double* scales);
// out[i] += its block's value for bit i.
void AddOneBit(const uint8_t* bits, const float* scales, size_t n, float* out);
void AddOneBit(const uint8_t* bits, const double* scales, size_t n, double* out);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_SPARSIFY_H_
