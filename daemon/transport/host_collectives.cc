#include "daemon/transport/host_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "daemon/base/sanitizers.h"
#include "daemon/core/reduce_kernels.h"
#include "proto/status_names.h"

namespace syncd {

std::shared_ptr<char[]> ScratchFor(size_t bytes) {
  constexpr size_t kBlock = 4096, kBlocks = 16;
  if (bytes > kBlock || kAddressSanitizer) return std::make_shared_for_overwrite<char[]>(bytes);
  thread_local std::vector<std::shared_ptr<char[]>> blocks;
  for (const std::shared_ptr<char[]>& b : blocks)
    if (b.use_count() == 1) return b;  // nobody else holds it: free
  std::shared_ptr<char[]> b = std::make_shared_for_overwrite<char[]>(kBlock);
  if (blocks.size() < kBlocks) blocks.push_back(b);
  return b;
}

CommTask RecursiveDoublingCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes,
                                  Combiner combine) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1 || bytes == 0) co_return Status::Ok();
  char* buf = static_cast<char*>(data);
  const std::shared_ptr<char[]> tmp = ScratchFor(bytes);
  uint32_t pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const uint32_t extra = n - pow2;
  // Fold: among the first 2*extra nodes, even ones hand their data to the next odd one and wait.
  int64_t vrank;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      Status st = co_await Wait(t, t->Send(r + 1, tag, buf, bytes, owner));
      if (!st.ok()) co_return st;
      vrank = -1;
    } else {
      Status st = co_await Wait(t, t->Recv(r - 1, tag, tmp.get(), bytes, tmp));
      if (!st.ok()) co_return st;
      combine(buf, tmp.get(), bytes);
      vrank = r / 2;
    }
  } else {
    vrank = int64_t(r) - extra;
  }
  if (vrank >= 0) {
    for (uint32_t mask = 1; mask < pow2; mask <<= 1) {
      const uint32_t vpeer = uint32_t(vrank) ^ mask;
      const uint32_t peer = vpeer < extra ? vpeer * 2 + 1 : vpeer + extra;
      Status st = co_await Wait(t, t->Send(peer, tag, buf, bytes, owner), t->Recv(peer, tag, tmp.get(), bytes, tmp));
      if (!st.ok()) co_return st;
      combine(buf, tmp.get(), bytes);
    }
  }
  // Unfold: the odd partners return the result.
  // (One co_await per statement: GCC 12 miscompiles co_await inside ?:.)
  if (r < 2 * extra) {
    const CommHandle h = r % 2 == 0 ? t->Recv(r + 1, tag, buf, bytes, owner) : t->Send(r - 1, tag, buf, bytes, owner);
    Status st = co_await Wait(t, h);
    if (!st.ok()) co_return st;
  }
  co_return Status::Ok();
}

CommTask TreeCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, Combiner combine) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1 || bytes == 0) co_return Status::Ok();
  char* buf = static_cast<char*>(data);
  const std::shared_ptr<char[]> tmp = ScratchFor(bytes);
  // Up: node r takes its children's (r + 1, r + 2, r + 4, ... below its lowest set bit), then
  // hands the sum of its subtree to its parent (r less its lowest set bit).
  uint32_t mask = 1;
  for (; mask < n; mask <<= 1) {
    if (r & mask) {
      Status st = co_await Wait(t, t->Send(r - mask, tag, buf, bytes, owner));
      if (!st.ok()) co_return st;
      break;
    }
    if (r + mask < n) {
      Status st = co_await Wait(t, t->Recv(r + mask, tag, tmp.get(), bytes, tmp));
      if (!st.ok()) co_return st;
      combine(buf, tmp.get(), bytes);
    }
  }
  // Down: the result from the parent, then to the children, the largest subtree first.
  if (r != 0) {
    Status st = co_await Wait(t, t->Recv(r - mask, tag, buf, bytes, owner));
    if (!st.ok()) co_return st;
  }
  while (mask > 1) {
    mask >>= 1;
    if (r + mask < n) {
      Status st = co_await Wait(t, t->Send(r + mask, tag, buf, bytes, owner));
      if (!st.ok()) co_return st;
    }
  }
  co_return Status::Ok();
}

CommTask SmallCombine(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, Combiner combine) {
  if (t->size() >= kTreeCombineFrom) return TreeCombine(t, tag, data, std::move(owner), bytes, combine);
  return RecursiveDoublingCombine(t, tag, data, std::move(owner), bytes, combine);
}

namespace {
template <syncd_dtype D, syncd_reduce_op Op>
void CombineTyped(char* acc, const char* other, size_t bytes) {
  ReduceInto(D, Op, acc, other, bytes / abi::DtypeSize(D));
}
template <syncd_dtype D>
Combiner CombinerFor(syncd_reduce_op op) {
  switch (op) {
    case SYNCD_MIN: return CombineTyped<D, SYNCD_MIN>;
    case SYNCD_MAX: return CombineTyped<D, SYNCD_MAX>;
    case SYNCD_PRODUCT: return CombineTyped<D, SYNCD_PRODUCT>;
    default: return CombineTyped<D, SYNCD_SUM>;
  }
}
Combiner ElementCombiner(syncd_dtype dtype, syncd_reduce_op op) {
  switch (dtype) {
    case SYNCD_INT8: return CombinerFor<SYNCD_INT8>(op);
    case SYNCD_UINT8: return CombinerFor<SYNCD_UINT8>(op);
    case SYNCD_INT32: return CombinerFor<SYNCD_INT32>(op);
    case SYNCD_INT64: return CombinerFor<SYNCD_INT64>(op);
    case SYNCD_FLOAT16: return CombinerFor<SYNCD_FLOAT16>(op);
    case SYNCD_BFLOAT16: return CombinerFor<SYNCD_BFLOAT16>(op);
    case SYNCD_FLOAT64: return CombinerFor<SYNCD_FLOAT64>(op);
    case SYNCD_INT16: return CombinerFor<SYNCD_INT16>(op);
    case SYNCD_BOOL: return CombinerFor<SYNCD_BOOL>(op);
    default: return CombinerFor<SYNCD_FLOAT32>(op);
  }
}
}  // namespace

CommTask RecursiveDoublingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count,
                                    syncd_dtype dtype, syncd_reduce_op op) {
  CommTask rd = RecursiveDoublingCombine(t, tag, data, std::move(owner), count * abi::DtypeSize(dtype),
                                         ElementCombiner(dtype, op));
  co_return co_await Await(&rd);
}

CommTask GatherBytes(Transport* t, uint64_t tag, uint32_t root, const std::string* mine, std::vector<std::string>* all) {
  const uint32_t n = t->size();
  if (t->rank() != root) {
    const auto size = std::make_shared<uint64_t>(mine->size());
    const auto payload = std::make_shared<std::string>(*mine);
    Status st = co_await Wait(t, t->Send(root, tag, size.get(), 8, size));
    if (!st.ok()) co_return st;
    st = co_await Wait(t, t->Send(root, tag, payload->data(), payload->size(), payload));
    co_return st;
  }
  const auto sizes = std::make_shared<std::vector<uint64_t>>(n, 0);
  CommHandles hs;
  for (uint32_t p = 0; p < n; ++p)
    if (p != root) hs.push_back(t->Recv(p, tag, &(*sizes)[p], 8, sizes));
  Status st = co_await Wait(t, std::move(hs));
  if (!st.ok()) co_return st;
  const auto in = std::make_shared<std::vector<std::string>>(n);
  CommHandles payloads;
  for (uint32_t p = 0; p < n; ++p) {
    if (p == root) continue;
    (*in)[p].resize((*sizes)[p]);
    payloads.push_back(t->Recv(p, tag, (*in)[p].data(), (*sizes)[p], in));
  }
  st = co_await Wait(t, std::move(payloads));
  if (!st.ok()) co_return st;
  *all = std::move(*in);
  (*all)[root] = *mine;
  co_return Status::Ok();
}

CommTask BroadcastBytes(Transport* t, uint64_t tag, uint32_t root, std::string* data) {
  const auto size = std::make_shared<uint64_t>(data->size());
  CommTask sz = Broadcast(t, tag, size.get(), size, 8, root);
  Status st = co_await Await(&sz);
  if (!st.ok()) co_return st;
  const auto payload = std::make_shared<std::string>(*data);
  payload->resize(*size);
  CommTask bcast = Broadcast(t, tag + 1, payload->data(), payload, *size, root);
  st = co_await Await(&bcast);
  if (!st.ok()) co_return st;
  *data = std::move(*payload);
  co_return Status::Ok();
}

CommTask RingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                       syncd_reduce_op op) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1 || count == 0) co_return Status::Ok();
  const size_t esize = abi::DtypeSize(dtype);
  char* buf = static_cast<char*>(data);
  // Chunk i covers elements [begin(i), begin(i+1)); the first count % n chunks get one extra.
  auto begin = [&](uint32_t i) { return i * (count / n) + std::min<size_t>(i, count % n); };
  auto len = [&](uint32_t i) { return begin(i + 1) - begin(i); };
  const std::shared_ptr<char[]> tmp = ScratchFor((count / n + 1) * esize);
  const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
  // Reduce-scatter: after n-1 steps node r holds the reduced chunk (r+1) % n.
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_chunk = (r + n - s) % n, recv_chunk = (r + 2 * n - s - 1) % n;
    Status st = co_await Wait(t, t->Send(right, tag, buf + begin(send_chunk) * esize, len(send_chunk) * esize, owner),
                              t->Recv(left, tag, tmp.get(), len(recv_chunk) * esize, tmp));
    if (!st.ok()) co_return st;
    ReduceInto(dtype, op, buf + begin(recv_chunk) * esize, tmp.get(), len(recv_chunk));
  }
  // Allgather: pass the reduced chunks around.
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_chunk = (r + 1 + n - s) % n, recv_chunk = (r + n - s) % n;
    Status st = co_await Wait(t, t->Send(right, tag, buf + begin(send_chunk) * esize, len(send_chunk) * esize, owner),
                              t->Recv(left, tag, buf + begin(recv_chunk) * esize, len(recv_chunk) * esize, owner));
    if (!st.ok()) co_return st;
  }
  co_return Status::Ok();
}

CommTask RecursiveHalvingAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count,
                                   syncd_dtype dtype, syncd_reduce_op op) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1 || count == 0) co_return Status::Ok();
  const size_t esize = abi::DtypeSize(dtype);
  char* buf = static_cast<char*>(data);
  uint32_t pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const uint32_t extra = n - pow2;
  // A folded-in partner receives the whole buffer once; the halving steps at most half of it.
  const std::shared_ptr<char[]> tmp = ScratchFor(std::max<size_t>(1, r < 2 * extra ? count * esize : (count + 1) / 2 * esize));
  // Fold as recursive doubling does: among the first 2*extra nodes, even ones hand their data to
  // the next odd one and wait for the result.
  int64_t vrank;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      Status st = co_await Wait(t, t->Send(r + 1, tag, buf, count * esize, owner));
      if (!st.ok()) co_return st;
      vrank = -1;
    } else {
      Status st = co_await Wait(t, t->Recv(r - 1, tag, tmp.get(), count * esize, tmp));
      if (!st.ok()) co_return st;
      ReduceInto(dtype, op, buf, tmp.get(), count);
      vrank = r / 2;
    }
  } else {
    vrank = int64_t(r) - extra;
  }
  if (vrank >= 0) {
    const uint32_t v = uint32_t(vrank);
    auto real = [extra](uint32_t vpeer) { return vpeer < extra ? vpeer * 2 + 1 : vpeer + extra; };
    // Reduce-scatter by halving: each step keeps one half of the range both partners hold (the
    // upper half when the step's bit is set), sends the other and adds the partner's copy of the
    // kept half. `held` remembers each step's range and which half was kept, for the way back.
    struct Held {
      size_t lo, hi;
      bool upper;
    };
    absl::InlinedVector<Held, 32> held;
    size_t lo = 0, hi = count;
    for (uint32_t mask = pow2 >> 1; mask > 0; mask >>= 1) {
      const uint32_t peer = real(v ^ mask);
      const size_t mid = lo + (hi - lo) / 2;
      const bool upper = (v & mask) != 0;
      const size_t keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
      const size_t send_lo = upper ? lo : mid, send_hi = upper ? mid : hi;
      held.push_back(Held{lo, hi, upper});
      CommHandles hs;
      if (send_hi > send_lo) hs.push_back(t->Send(peer, tag, buf + send_lo * esize, (send_hi - send_lo) * esize, owner));
      if (keep_hi > keep_lo) hs.push_back(t->Recv(peer, tag, tmp.get(), (keep_hi - keep_lo) * esize, tmp));
      Status st = co_await Wait(t, std::move(hs));
      if (!st.ok()) co_return st;
      ReduceInto(dtype, op, buf + keep_lo * esize, tmp.get(), keep_hi - keep_lo);
      lo = keep_lo;
      hi = keep_hi;
    }
    // Allgather by doubling, the steps in reverse: give the partner this node's range, take its.
    while (!held.empty()) {
      const Held h = held.back();
      held.pop_back();
      const uint32_t mask = pow2 >> (held.size() + 1);
      const uint32_t peer = real(v ^ mask);
      const size_t other_lo = h.upper ? h.lo : hi, other_hi = h.upper ? lo : h.hi;
      CommHandles hs;
      if (hi > lo) hs.push_back(t->Send(peer, tag, buf + lo * esize, (hi - lo) * esize, owner));
      if (other_hi > other_lo)
        hs.push_back(t->Recv(peer, tag, buf + other_lo * esize, (other_hi - other_lo) * esize, owner));
      Status st = co_await Wait(t, std::move(hs));
      if (!st.ok()) co_return st;
      lo = h.lo;
      hi = h.hi;
    }
  }
  if (r < 2 * extra) {
    const CommHandle h =
        r % 2 == 0 ? t->Recv(r + 1, tag, buf, count * esize, owner) : t->Send(r - 1, tag, buf, count * esize, owner);
    Status st = co_await Wait(t, h);
    if (!st.ok()) co_return st;
  }
  co_return Status::Ok();
}

CommTask TreeAllreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                       syncd_reduce_op op) {
  CommTask tree =
      TreeCombine(t, tag, data, std::move(owner), count * abi::DtypeSize(dtype), ElementCombiner(dtype, op));
  co_return co_await Await(&tree);
}

HostAllreduce ChooseAllreduce(uint32_t nodes, size_t bytes, const AllreduceOptions& options) {
  if (options.algorithm != HostAllreduce::kAuto) return options.algorithm;
  if (bytes <= options.small_bytes)
    return nodes >= kTreeCombineFrom ? HostAllreduce::kTree : HostAllreduce::kRecursiveDoubling;
  return (nodes & (nodes - 1)) == 0 ? HostAllreduce::kRecursiveHalving : HostAllreduce::kRing;
}

const char* HostAllreduceName(HostAllreduce algorithm) {
  switch (algorithm) {
    case HostAllreduce::kRecursiveDoubling: return "rd";
    case HostAllreduce::kRecursiveHalving: return "halving";
    case HostAllreduce::kRing: return "ring";
    case HostAllreduce::kTree: return "tree";
    default: return "auto";
  }
}

CommTask Allreduce(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t count, syncd_dtype dtype,
                   syncd_reduce_op op, const AllreduceOptions& options) {
  const size_t esize = abi::DtypeSize(dtype);
  const uint32_t n = t->size();
  if (n == 1 || count == 0) co_return Status::Ok();
  HostAllreduce algorithm = ChooseAllreduce(n, count * esize, options);
  if (algorithm == HostAllreduce::kRing && count < n) algorithm = HostAllreduce::kRecursiveDoubling;  // chunks of 0
  if (algorithm != HostAllreduce::kRing) {
    CommTask one;
    if (algorithm == HostAllreduce::kRecursiveHalving)
      one = RecursiveHalvingAllreduce(t, SliceTag(tag), data, std::move(owner), count, dtype, op);
    else if (algorithm == HostAllreduce::kTree)
      one = TreeAllreduce(t, SliceTag(tag), data, std::move(owner), count, dtype, op);
    else
      one = RecursiveDoublingAllreduce(t, SliceTag(tag), data, std::move(owner), count, dtype, op);
    co_return co_await Await(&one);
  }
  // Independent rings over slices of the buffer run concurrently: while one slice's data is on
  // the wire, another slice is being reduced (as many as leave every ring's chunk non-empty).
  const size_t slices = std::clamp<size_t>(count / n, 1, std::max<size_t>(1, options.slices));
  std::vector<CommTask> rings;
  rings.reserve(slices);
  char* buf = static_cast<char*>(data);
  for (size_t i = 0; i < slices; ++i) {
    const size_t b = i * (count / slices) + std::min(i, count % slices);
    const size_t e = (i + 1) * (count / slices) + std::min(i + 1, count % slices);
    rings.push_back(RingAllreduce(t, SliceTag(tag, i), buf + b * esize, owner, e - b, dtype, op));
  }
  std::vector<CommTask*> refs;
  for (auto& ring : rings) refs.push_back(&ring);
  co_return co_await Await(std::move(refs));
}

CommTask Broadcast(Transport* t, uint64_t tag, void* data, BufferOwner owner, size_t bytes, uint32_t root) {
  const uint32_t n = t->size();
  if (n == 1 || bytes == 0) co_return Status::Ok();
  const uint32_t vrank = (t->rank() + n - root) % n;
  uint32_t mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      Status st = co_await Wait(t, t->Recv((vrank - mask + root) % n, SliceTag(tag), data, bytes, owner));
      if (!st.ok()) co_return st;
      break;
    }
    mask <<= 1;
  }
  CommHandles sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vrank + mask < n) sends.push_back(t->Send((vrank + mask + root) % n, SliceTag(tag), data, bytes, owner));
  co_return co_await Wait(t, std::move(sends));
}

CommTask Barrier(Transport* t, uint64_t tag) {
  const auto token = std::make_shared<uint8_t>(1);
  CommTask rd = RecursiveDoublingAllreduce(t, SliceTag(tag), token.get(), token, 1, SYNCD_UINT8, SYNCD_MAX);
  co_return co_await Await(&rd);
}

CommTask AllgatherBlocks(Transport* t, uint64_t tag, void* data, BufferOwner owner, BlockBounds bounds) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1) co_return Status::Ok();
  char* buf = static_cast<char*>(data);
  auto len = [&](uint32_t i) { return bounds[i + 1] - bounds[i]; };
  const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
  // Step s: pass on the block that arrived in step s-1 (at first, this node's own).
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_block = (r + n - s) % n, recv_block = (r + 2 * n - s - 1) % n;
    CommHandles hs;
    if (len(send_block) > 0) hs.push_back(t->Send(right, SliceTag(tag), buf + bounds[send_block], len(send_block), owner));
    if (len(recv_block) > 0) hs.push_back(t->Recv(left, SliceTag(tag), buf + bounds[recv_block], len(recv_block), owner));
    Status st = co_await Wait(t, std::move(hs));
    if (!st.ok()) co_return st;
  }
  co_return Status::Ok();
}

CommTask ReduceScatterBlocks(Transport* t, uint64_t tag, void* data, BufferOwner owner, BlockBounds bounds,
                             syncd_dtype dtype, syncd_reduce_op op) {
  const uint32_t n = t->size(), r = t->rank();
  if (n == 1) co_return Status::Ok();
  const size_t esize = abi::DtypeSize(dtype);
  char* buf = static_cast<char*>(data);
  auto len = [&](uint32_t i) { return bounds[i + 1] - bounds[i]; };
  uint64_t largest = 0;
  for (uint32_t i = 0; i < n; ++i) largest = std::max(largest, len(i));
  const std::shared_ptr<char[]> tmp = ScratchFor(std::max<uint64_t>(1, largest * esize));
  const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
  // Step s sends the partial block (r - s - 1) and adds the left neighbour's partial block
  // (r - s - 2) into this node's: after n-1 steps block r holds every node's contribution.
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_block = (r + 2 * n - s - 1) % n, recv_block = (r + 2 * n - s - 2) % n;
    CommHandles hs;
    if (len(send_block) > 0)
      hs.push_back(t->Send(right, SliceTag(tag), buf + bounds[send_block] * esize, len(send_block) * esize, owner));
    if (len(recv_block) > 0) hs.push_back(t->Recv(left, SliceTag(tag), tmp.get(), len(recv_block) * esize, tmp));
    Status st = co_await Wait(t, std::move(hs));
    if (!st.ok()) co_return st;
    ReduceInto(dtype, op, buf + bounds[recv_block] * esize, tmp.get(), len(recv_block));
  }
  co_return Status::Ok();
}

CommTask Exchange(Transport* t, uint64_t tag, Transfers sends, Transfers recvs) {
  CommHandles hs;
  for (Transfer& x : recvs)
    if (x.bytes > 0) hs.push_back(t->Recv(x.peer, SliceTag(tag), x.data, x.bytes, std::move(x.owner)));
  for (Transfer& x : sends)
    if (x.bytes > 0) hs.push_back(t->Send(x.peer, SliceTag(tag), x.data, x.bytes, std::move(x.owner)));
  co_return co_await Wait(t, std::move(hs));
}

}  // namespace syncd
