// allreduce of a sparse COO tensor for syncd's c10d backend, as gloo does it: every rank's
// coalesced indices and values are gathered, concatenated and coalesced (duplicates summed), and
// the input tensor is replaced by that sum (sparse, coalesced). SUM only, as gloo.
//
// One allgather of bytes carries each rank's tensor whole (a header, its indices, its values), so
// the collective is one request named as a dense allreduce would be: a rank that passes a dense
// tensor where another passes a sparse one fails on both (the kinds differ) instead of waiting.
// Sizes, sparse dimensions and dtypes that differ across ranks fail on every rank naming the
// first rank that differs from this one.
#ifndef SYNCD_CLIENT_PYTHON_SRC_C10D_SPARSE_H_
#define SYNCD_CLIENT_PYTHON_SRC_C10D_SPARSE_H_

#include <syncd/client.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "client/python/src/c10d_work.h"

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace syncd::c10d_backend {

// A rank's blob: int64 header {ndim, sparse dims, scalar type, nnz, sizes...}, the indices
// ([sparse dims, nnz], int64), the values; padded to a multiple of 8 bytes.
constexpr int64_t kSparseHeader = 4;

inline int64_t Padded(int64_t bytes) { return (bytes + 7) / 8 * 8; }

// This rank's tensor (coalesced) as a byte tensor.
inline at::Tensor SparseBlob(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "syncd backend: allreduce of a sparse tensor on ", t.device(),
              ": only CPU tensors so far");
  (void)DtypeOf(t, "sparse allreduce");  // refuses what syncd cannot carry (complex, ...)
  const at::Tensor c = t.coalesce();
  const at::Tensor indices = c._indices().contiguous();
  const at::Tensor values = c._values().contiguous();
  std::vector<int64_t> header = {t.dim(), t.sparse_dim(), int64_t(t.scalar_type()), c._nnz()};
  for (int64_t s : t.sizes()) header.push_back(s);
  const int64_t hbytes = int64_t(header.size()) * 8, ibytes = indices.numel() * 8;
  const int64_t vbytes = values.numel() * values.element_size();
  at::Tensor blob = at::zeros({Padded(hbytes + ibytes + vbytes)}, at::kByte);
  char* out = static_cast<char*>(blob.data_ptr());
  memcpy(out, header.data(), size_t(hbytes));
  if (ibytes > 0) memcpy(out + hbytes, indices.data_ptr(), size_t(ibytes));
  if (vbytes > 0) memcpy(out + hbytes + ibytes, values.data_ptr(), size_t(vbytes));
  return blob;
}

inline std::string SparseText(const int64_t* h) {
  std::ostringstream s;
  s << c10::toString(c10::ScalarType(h[2])) << " of size [";
  for (int64_t d = 0; d < h[0]; ++d) s << (d ? ", " : "") << h[kSparseHeader + d];
  s << "] with " << h[1] << " sparse dimension" << (h[1] == 1 ? "" : "s");
  return s.str();
}

// The sum of every rank's blob (`rows[q]`: rank q's bytes), coalesced; `mine` is this rank's.
inline at::Tensor SumSparseBlobs(const at::Tensor& mine, const char* data, const int64_t* rows, int nranks) {
  std::vector<int64_t> own = {mine.dim(), mine.sparse_dim(), int64_t(mine.scalar_type()), 0};
  for (int64_t s : mine.sizes()) own.push_back(s);
  std::vector<at::Tensor> indices, values;
  std::vector<int64_t> dense(mine.sizes().begin() + mine.sparse_dim(), mine.sizes().end());
  const char* at = data;
  for (int q = 0; q < nranks; at += rows[q], ++q) {
    std::vector<int64_t> h(own.size());
    const bool fits = rows[q] >= int64_t(own.size()) * 8;
    if (fits) memcpy(h.data(), at, h.size() * 8);
    const bool same = fits && h[0] == own[0] && h[1] == own[1] && h[2] == own[2] &&
                      std::equal(h.begin() + kSparseHeader, h.end(), own.begin() + kSparseHeader);
    TORCH_CHECK(same, "syncd backend: allreduce of a sparse tensor: rank ", q, "'s tensor differs from this rank's (",
                SparseText(own.data()), ")", fits && h[0] == own[0] ? ": " + SparseText(h.data()) : std::string());
    const int64_t nnz = h[3], hbytes = int64_t(h.size()) * 8;
    at::Tensor idx = at::empty({mine.sparse_dim(), nnz}, at::kLong);
    std::vector<int64_t> vshape = {nnz};
    vshape.insert(vshape.end(), dense.begin(), dense.end());
    at::Tensor val = at::empty(vshape, mine.options().layout(at::kStrided));
    // (An empty tensor's data pointer may be null: memcpy must not see it.)
    if (idx.numel() > 0) memcpy(idx.data_ptr(), at + hbytes, size_t(idx.numel()) * 8);
    if (val.numel() > 0)
      memcpy(val.data_ptr(), at + hbytes + idx.numel() * 8, size_t(val.numel()) * val.element_size());
    indices.push_back(idx);
    values.push_back(val);
  }
  return at::sparse_coo_tensor(at::cat(indices, 1), at::cat(values, 0), mine.sizes()).coalesce();
}

// Submits `work`'s one request: the allgather of `buffer` (`bytes` of this rank's blob, staged
// in the arena) named `name`; on completion `t` holds the sum.
inline void SubmitSparseSum(syncd_client* c, SyncdWork* work, at::Tensor t, void* buffer, int64_t bytes,
                            const std::string& name, int process_set) {
  SyncdWork::Request& r = work->requests().emplace_back();
  r.buffer = buffer;
  syncd_tensor st{name.c_str(), buffer, SYNCD_UINT8, 1, &bytes, process_set};
  if (syncd_allgather_async(c, &st, &r.result, &r.handle) != SYNCD_OK) {
    syncd_free(c, buffer);
    work->requests().pop_back();
    work->FailNow(std::string("syncd backend: allreduce failed: ") + syncd_last_error());
    return;
  }
  r.has_result = true;
  work->set_unstage([t](std::deque<SyncdWork::Request>& rs) mutable {
    const syncd_result& res = rs[0].result;
    t.copy_(SumSparseBlobs(t, static_cast<const char*>(res.data), res.rows, res.nranks));
  });
}

}  // namespace syncd::c10d_backend

#endif  // SYNCD_CLIENT_PYTHON_SRC_C10D_SPARSE_H_
