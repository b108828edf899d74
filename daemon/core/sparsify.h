// The error-feedback compressors of an allreduce's inter-node hop: top-k, random-k and 1-bit (a
// scaled sign). Each takes `v`, a node's exact local sum plus the residual the node kept from
// earlier steps, and splits it into what crosses the nodes and what stays; what stays is left in
// `v` itself, as the new residual. Top-k and random-k move whole elements, so what crosses plus
// what stays is `v` exactly; 1-bit's residual is v - scale * sign(v), rounded once in v's dtype.
// Pure functions on float32 and float64; no allocation (the caller passes the scratch).
#ifndef SYNCD_DAEMON_CORE_SPARSIFY_H_
#define SYNCD_DAEMON_CORE_SPARSIFY_H_

#include <cstddef>
#include <cstdint>

namespace syncd {

// The elements a top-k or random-k segment of `n` sends at `ratio_ppm` parts per million: at
// least 1, at most n.
size_t SparseCount(size_t n, uint32_t ratio_ppm);

// Top-k: the `k` elements of largest magnitude (a NaN counts as the largest, so that it crosses as
// an uncompressed sum would carry it; ties go to the lower index), their indices ascending into
// `idx` and their values into `val`; those elements of `v` become 0. `scratch`: `n` entries. A
// sample of the magnitudes picks a threshold first; the k-th largest magnitude among the elements
// above it (nth_element over their magnitudes, copied side by side) is the cut.
void TakeTopK(float* v, size_t n, size_t k, uint32_t* idx, float* val, uint32_t* scratch);
void TakeTopK(double* v, size_t n, size_t k, uint32_t* idx, double* val, uint32_t* scratch);

// Random-k: `k` distinct indices of [0, n), ascending, drawn from `seed` (every node that passes
// the same seed draws the same). `bitmap`: (n + 63) / 64 words.
void RandomIndices(uint64_t seed, size_t n, size_t k, uint32_t* idx, uint64_t* bitmap);
// Moves v[idx[i]] into val[i], leaving 0 in `v`.
void TakeAt(float* v, const uint32_t* idx, size_t k, float* val);
void TakeAt(double* v, const uint32_t* idx, size_t k, double* val);

// out[idx[i]] += val[i].
void AddAt(const uint32_t* idx, const float* val, size_t k, float* out);
void AddAt(const uint32_t* idx, const double* val, size_t k, double* out);

// 1-bit: the scale (the mean magnitude of `v`) is returned, bit i of `bits` ((n + 7) / 8 bytes) is
// set where v[i] >= 0, and `v` becomes v - scale * sign(v).
float TakeScaledSign(float* v, size_t n, uint8_t* bits);
double TakeScaledSign(double* v, size_t n, uint8_t* bits);
// out[i] += scale where bit i is set, -scale where it is not.
void AddScaledSign(const uint8_t* bits, float scale, size_t n, float* out);
void AddScaledSign(const uint8_t* bits, double scale, size_t n, double* out);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_SPARSIFY_H_
