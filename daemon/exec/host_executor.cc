#include "daemon/exec/host_executor.h"

#include <cstring>

#include "daemon/exec/reduce_kernels.h"
#include "proto/status_names.h"

namespace syncd {

void HostExecutor::Allreduce(const std::vector<const ReadyTensor*>& group) {
  if (group.empty()) return;
  const Request& head = group.front()->first();
  ReduceSpec spec{head.dtype, head.op, head.prescale, head.postscale,
                  head.op == SYNCD_AVERAGE ? world_size_ : 1u};
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = group.front()->requests.size();
  std::vector<const void*> in(n);
  std::vector<void*> out(n);
  for (const ReadyTensor* t : group) {
    const size_t count = t->first().bytes / esize;
    for (size_t off = 0; off < count; off += kReduceChunkElements) {
      const size_t m = std::min(kReduceChunkElements, count - off);
      for (size_t r = 0; r < n; ++r) {
        char* p = t->requests[r].data + off * esize;
        in[r] = p;
        out[r] = p;
      }
      ReduceChunk(spec, in.data(), n, out.data(), n, m);
    }
  }
}

void HostExecutor::Broadcast(const ReadyTensor& t) {
  const Request* root = nullptr;
  for (const Request& r : t.requests)
    if (int32_t(r.rank) == r.root) root = &r;
  if (root == nullptr || root->bytes == 0) return;
  for (const Request& r : t.requests)
    if (&r != root) memcpy(r.data, root->data, root->bytes);
}

}  // namespace syncd

namespace syncd {

size_t HostExecutor::ReduceToBuffer(const std::vector<const ReadyTensor*>& group, char* buffer) {
  const Request& head = group.front()->first();
  const ReduceSpec spec{head.dtype, head.op == SYNCD_AVERAGE ? SYNCD_SUM : head.op, head.prescale, 1.0, 1};
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = group.front()->requests.size();
  std::vector<const void*> in(n);
  size_t at = 0;
  for (const ReadyTensor* t : group) {
    const size_t count = t->first().bytes / esize;
    for (size_t off = 0; off < count; off += kReduceChunkElements) {
      const size_t m = std::min(kReduceChunkElements, count - off);
      for (size_t r = 0; r < n; ++r) in[r] = t->requests[r].data + off * esize;
      void* out[1] = {buffer + (at + off) * esize};
      ReduceChunk(spec, in.data(), n, out, 1, m);
    }
    at += count;
  }
  return at;
}

void HostExecutor::ScatterFromBuffer(const std::vector<const ReadyTensor*>& group, const char* buffer) {
  const Request& head = group.front()->first();
  const ReduceSpec spec{head.dtype, SYNCD_SUM, 1.0, head.postscale, head.op == SYNCD_AVERAGE ? world_size_ : 1u};
  const size_t esize = abi::DtypeSize(head.dtype);
  const size_t n = group.front()->requests.size();
  std::vector<void*> out(n);
  size_t at = 0;
  for (const ReadyTensor* t : group) {
    const size_t count = t->first().bytes / esize;
    for (size_t off = 0; off < count; off += kReduceChunkElements) {
      const size_t m = std::min(kReduceChunkElements, count - off);
      for (size_t r = 0; r < n; ++r) out[r] = t->requests[r].data + off * esize;
      const void* in[1] = {buffer + (at + off) * esize};
      ReduceChunk(spec, in, 1, out.data(), n, m);
    }
    at += count;
  }
}

void HostExecutor::ScatterBroadcast(const ReadyTensor& t, const char* buffer) {
  for (const Request& r : t.requests)
    if (int32_t(r.rank) != r.root && r.bytes > 0) memcpy(r.data, buffer, r.bytes);
}

}  // namespace syncd
