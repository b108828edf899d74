// Client request path: submit, completion draining, poll and wait.
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "client/src/client_impl.h"
#include "client/src/cuda_driver.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd::client {
namespace {

constexpr uint64_t kSleepSliceNs = 50'000'000;       // re-check the daemon at least this often
constexpr uint64_t kHeartbeatStaleNs = 200'000'000;  // older than this: ask the socket
constexpr uint64_t kBarrierNames = 16;  // barriers one rank may have in flight at once

thread_local std::string g_last_error;


void ReleaseGpuSlot(int slot) {
  std::string unused;
  if (CudaDriver* cuda = CudaDriver::Get(&unused)) cuda->Release(slot);
}

}  // namespace

int Fail(int status, std::string message) {
  g_last_error = std::move(message);
  return status;
}
const char* LastError() { return g_last_error.c_str(); }

void* Client::Alloc(size_t bytes) {
  MutexLock lock(&mu_);
  auto off = arena_alloc_->Allocate(bytes);
  if (!off) {
    Fail(SYNCD_ERR_NO_MEMORY, "arena exhausted: " + std::to_string(bytes) + " bytes requested, " +
                                  std::to_string(arena_alloc_->capacity() - arena_alloc_->bytes_in_use()) +
                                  " free of " + std::to_string(arena_alloc_->capacity()));
    return nullptr;
  }
  return arena_ + *off;
}

void Client::Free(void* ptr) {
  if (ptr == nullptr) return;
  MutexLock lock(&mu_);
  if (!InArena(ptr, 0) || !arena_alloc_->Free(uint64_t(static_cast<char*>(ptr) - arena_)))
    Fail(SYNCD_ERR_INVALID, "syncd_free: pointer was not returned by syncd_alloc");
}

bool Client::InArena(const void* ptr, size_t bytes) const {
  const char* p = static_cast<const char*>(ptr);
  return p >= arena_ && p <= arena_ + arena_capacity_ && bytes <= uint64_t(arena_ + arena_capacity_ - p);
}

int Client::DaemonLostError() const {
  if (left_.load(std::memory_order_relaxed))
    return Fail(SYNCD_ERR_INVALID, "rank " + std::to_string(id_.rank) +
                                       " has left the job (syncd_leave: its process is exiting)");
  if (let_go_.load(std::memory_order_relaxed))
    return Fail(SYNCD_ERR_DAEMON_LOST, "syncd daemon at " + id_.run_dir + " disconnected rank " + std::to_string(id_.rank) +
                                           " (its job was removed from the node's daemon, or it broke the "
                                           "shared-memory protocol: the daemon's log says which)");
  return Fail(SYNCD_ERR_DAEMON_LOST,
              "syncd daemon at " + id_.run_dir + " is gone (rank " + std::to_string(id_.rank) + ")");
}

bool Client::DaemonAlive() {
  if (daemon_lost_) return false;
  if (header_->let_go.load(std::memory_order_acquire) != 0) {  // the daemon serves others on
    daemon_lost_ = true;
    let_go_.store(true, std::memory_order_relaxed);
    return false;
  }
  if (node_->daemon_state.load(std::memory_order_acquire) ==
      uint32_t(abi::DaemonState::kStopping)) {
    daemon_lost_ = true;
    return false;
  }
  const uint64_t beat = node_->engine_heartbeat_ns.load(std::memory_order_relaxed);
  if (abi::MonotonicNs() - beat < kHeartbeatStaleNs) return true;
  // The engine may just be busy with a large reduction; the socket says for sure.
  pollfd p{sock_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN))) {
    char byte;
    if (recv(sock_, &byte, 1, MSG_DONTWAIT | MSG_PEEK) <= 0) {
      daemon_lost_ = true;
      return false;
    }
  }
  return true;
}

namespace {
std::string NameKey(const std::string& name, int process_set) {
  return process_set == 0 ? name : name + '\0' + std::to_string(process_set);
}
}  // namespace

int Client::CheckTensor(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, int root, const char* root_kind,
                        const SetView& set, abi::SubmitEntry* entry, std::string* name, uint64_t* bytes) {
  if (t == nullptr || t->name == nullptr) return Fail(SYNCD_ERR_INVALID, "tensor or tensor name is NULL");
  *name = t->name;
  const std::string what = "tensor '" + *name + "'";
  if (name->empty() || name->size() > SYNCD_MAX_NAME)
    return Fail(SYNCD_ERR_INVALID, what + ": name must have 1.." + std::to_string(SYNCD_MAX_NAME) + " bytes");
  const size_t esize = abi::DtypeSize(t->dtype);
  if (esize == 0) return Fail(SYNCD_ERR_INVALID, what + ": unknown dtype " + std::to_string(t->dtype));
  if (t->ndim < 0 || t->ndim > SYNCD_MAX_DIMS || (t->ndim > 0 && t->shape == nullptr))
    return Fail(SYNCD_ERR_INVALID, what + ": ndim must be 0.." + std::to_string(SYNCD_MAX_DIMS));
  uint64_t count = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0) return Fail(SYNCD_ERR_INVALID, what + ": negative extent in dimension " + std::to_string(d));
    if (t->shape[d] != 0 && count > (UINT64_MAX / esize) / uint64_t(t->shape[d]))
      return Fail(SYNCD_ERR_INVALID, what + ": shape overflows");
    count *= uint64_t(t->shape[d]);
    entry->shape[d] = t->shape[d];
  }
  entry->ndim = uint32_t(t->ndim);
  *bytes = count * esize;
  if (*bytes > 0 && t->data == nullptr) return Fail(SYNCD_ERR_INVALID, what + ": data is NULL");
  if (kind == abi::OpKind::kAllreduce && (op < 0 || op >= SYNCD_REDUCE_OP_COUNT))
    return Fail(SYNCD_ERR_INVALID, what + ": unknown reduce op " + std::to_string(op));
  if (kind == abi::OpKind::kAllreduce && t->dtype == SYNCD_BOOL && op == SYNCD_AVERAGE)
    return Fail(SYNCD_ERR_INVALID, what + ": allreduce of bool tensors cannot average; use Sum (logical or) or Min "
                                          "(logical and)");
  if (kind == abi::OpKind::kAllreduce && op == SYNCD_ADASUM && t->dtype != SYNCD_FLOAT16 &&
      t->dtype != SYNCD_BFLOAT16 && t->dtype != SYNCD_FLOAT32 && t->dtype != SYNCD_FLOAT64)
    return Fail(SYNCD_ERR_INVALID, what + ": Adasum reduces float tensors (float16, bfloat16, float32, float64) only");
  // Only rooted kinds and point to point name another rank (no search on the allreduce path).
  auto root_in_set = [&] {
    return set.ranks == nullptr ? root >= 0 && root < id_.size
                                : std::binary_search(set.ranks->begin(), set.ranks->end(), root);
  };
  if (root_kind != nullptr && set.ranks == nullptr && !root_in_set())
    return Fail(SYNCD_ERR_INVALID, what + ": " + root_kind + " root " + std::to_string(root) + " is not a rank (size " +
                                       std::to_string(id_.size) + ")");
  if (root_kind != nullptr && !root_in_set())
    return Fail(SYNCD_ERR_INVALID, what + ": " + root_kind + " root " + std::to_string(root) +
                                       " is not a rank of process set " + std::to_string(set.id));
  if (abi::IsPointToPoint(kind)) {
    const char* op = kind == abi::OpKind::kSend ? "send" : "recv";
    if (!(kind == abi::OpKind::kRecv && root == SYNCD_ANY_SOURCE) && !root_in_set())
      return Fail(SYNCD_ERR_INVALID, what + ": " + op + " peer " + std::to_string(root) + " is not a rank of process set " +
                                         std::to_string(set.id));
    if (root == id_.rank) return Fail(SYNCD_ERR_INVALID, what + ": a rank cannot " + op + " to itself (rank " + std::to_string(root) + ")");
  }
  entry->dtype = t->dtype;
  return SYNCD_OK;
}

int Client::CheckKind(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, const Extra& extra,
                      const SetView& set, const std::string& name, abi::SubmitEntry* entry) {
  const std::string what = "tensor '" + name + "'";
  const bool rows = kind == abi::OpKind::kAllgather || kind == abi::OpKind::kAlltoall || kind == abi::OpKind::kReducescatter;
  const char* kind_name = kind == abi::OpKind::kAllgather ? "allgather" : kind == abi::OpKind::kAlltoall ? "alltoall" : "reducescatter";
  if (rows && t->ndim == 0) return Fail(SYNCD_ERR_INVALID, what + ": " + kind_name + " needs a tensor of at least one dimension");
  if (kind == abi::OpKind::kReducescatter) {
    if (op != SYNCD_SUM && op != SYNCD_AVERAGE)
      return Fail(SYNCD_ERR_INVALID, what + ": reducescatter supports the ops Sum and Average");
    if (t->dtype == SYNCD_BOOL) return Fail(SYNCD_ERR_INVALID, what + ": reducescatter of bool tensors is not supported");
  }
  if (kind == abi::OpKind::kPartialAllreduce) return CheckPartial(t, op, extra, set, what, entry);
  if (kind != abi::OpKind::kAlltoall || extra.splits == nullptr) {
    if (kind == abi::OpKind::kAlltoall && t->shape[0] % set.size != 0)
      return Fail(SYNCD_ERR_INVALID, what + ": alltoall without splits divides the first dimension equally, but " +
                                         std::to_string(t->shape[0]) + " rows do not divide among " +
                                         std::to_string(set.size) + " ranks; pass splits");
    return SYNCD_OK;
  }
  if (extra.nsplits != set.size)
    return Fail(SYNCD_ERR_INVALID, what + ": alltoall has " + std::to_string(extra.nsplits) + " splits for " +
                                       std::to_string(set.size) + " ranks");
  int64_t sum = 0;
  for (int i = 0; i < extra.nsplits; ++i) {
    if (extra.splits[i] < 0) return Fail(SYNCD_ERR_INVALID, what + ": alltoall split " + std::to_string(extra.splits[i]) + " is negative");
    if (extra.splits[i] > t->shape[0] - sum)  // before adding: the sum must not overflow
      return Fail(SYNCD_ERR_INVALID, what + ": alltoall splits add up to more than the tensor's " +
                                         std::to_string(t->shape[0]) + " rows");
    sum += extra.splits[i];
  }
  if (sum != t->shape[0])
    return Fail(SYNCD_ERR_INVALID, what + ": alltoall splits add up to " + std::to_string(sum) + " rows, the tensor has " +
                                       std::to_string(t->shape[0]));
  const uint64_t bytes = uint64_t(extra.nsplits) * sizeof(int64_t);
  auto off = arena_alloc_->Allocate(bytes);
  if (!off) return Fail(SYNCD_ERR_NO_MEMORY, what + ": arena has no room for the alltoall splits");
  memcpy(arena_ + *off, extra.splits, bytes);
  entry->aux_offset = *off;
  entry->aux_bytes = bytes;
  return SYNCD_OK;
}

int Client::CheckPartial(const syncd_tensor* t, syncd_reduce_op op, const Extra& extra, const SetView& set,
                         const std::string& what, abi::SubmitEntry* entry) {
  if (op != SYNCD_SUM && op != SYNCD_AVERAGE)
    return Fail(SYNCD_ERR_INVALID, what + ": partial allreduce supports the ops Sum and Average");
  if (t->dtype == SYNCD_BOOL) return Fail(SYNCD_ERR_INVALID, what + ": partial allreduce of bool tensors is not supported");
  if (extra.partial_mode != SYNCD_PARTIAL_SOLO && extra.partial_mode != SYNCD_PARTIAL_MAJORITY)
    return Fail(SYNCD_ERR_INVALID, what + ": partial allreduce mode must be SYNCD_PARTIAL_SOLO or SYNCD_PARTIAL_MAJORITY, not " +
                                       std::to_string(extra.partial_mode));
  if (entry->root < 0 || entry->root > set.size)
    return Fail(SYNCD_ERR_INVALID, what + ": partial allreduce quorum " + std::to_string(entry->root) + " is not 0.." +
                                       std::to_string(set.size) + " (the set's size)");
  entry->partial_mode = extra.partial_mode;
  return SYNCD_OK;
}

int Client::Submit(abi::OpKind kind, const syncd_tensor* t, syncd_reduce_op op, int root,
                   double prescale, double postscale, syncd_handle* out, bool gpu, void* stream, const Extra& extra) {
  if (out == nullptr) return Fail(SYNCD_ERR_INVALID, "handle output pointer is NULL");
  std::string name;
  uint64_t bytes = 0;
  abi::SubmitEntry entry{};
  MutexLock lock(&mu_);
  SetView set;
  const int set_id = kind == abi::OpKind::kBarrier ? extra.process_set : t != nullptr ? t->process_set : 0;
  // The global set needs no checks (and no message text built on the submit path).
  if (set_id != 0) {
    const std::string what = t != nullptr && t->name != nullptr ? "tensor '" + std::string(t->name) + "': " : "barrier: ";
    if (int rc = CheckSet(set_id, what, &set); rc != SYNCD_OK) return rc;
  } else {
    set = global_;
  }
  entry.process_set = set_id;
  if (kind == abi::OpKind::kBarrier) {
    // Every rank's n-th barrier matches by name. Cycling through a few names (rather than a new
    // one each time) lets a many-node job agree on barriers through the response cache.
    name = "syncd.barrier." + std::to_string(barrier_seqs_[set_id]++ % kBarrierNames);
  } else if (kind == abi::OpKind::kJoin) {
    name = abi::kJoinName;
  } else if (int rc = CheckTensor(kind, t, op, root, extra.root_kind, set, &entry, &name, &bytes); rc != SYNCD_OK) {
    return rc;
  } else if (kind == abi::OpKind::kAllreduce && t->dtype == SYNCD_BOOL && (prescale != 1.0 || postscale != 1.0)) {
    return Fail(SYNCD_ERR_INVALID, "tensor '" + name + "': allreduce of bool tensors takes no prescale or postscale factor");
  }
  if (in_flight_names_.count(set_id == 0 ? name : NameKey(name, set_id)))
    return Fail(SYNCD_ERR_DUPLICATE, "tensor '" + name + "' is already in flight on rank " + std::to_string(id_.rank));
  if (!DaemonAlive()) return DaemonLostError();
  if (free_slots_.empty())
    return Fail(SYNCD_ERR_NO_MEMORY, "too many requests in flight (" + std::to_string(slots_.size()) + ")");
  entry.kind = uint32_t(kind);
  entry.op = uint32_t(op);
  entry.root = root;
  entry.prescale = prescale;
  entry.postscale = postscale;
  entry.bytes = bytes;
  entry.tag = extra.tag;
  entry.compression = extra.compression;
  entry.compression_ppm = extra.compression_ppm;
  if (!abi::IsCompressionRequest(extra.compression))
    return Fail(SYNCD_ERR_INVALID, "tensor '" + name + "': unknown compression " + std::to_string(extra.compression));
  if (abi::IsPointToPoint(kind) && extra.tag < 0)
    return Fail(SYNCD_ERR_INVALID, "tensor '" + name + "': tag " + std::to_string(extra.tag) + " is negative");
  if (kind != abi::OpKind::kBarrier && kind != abi::OpKind::kJoin)
    if (int rc = CheckKind(kind, t, op, extra, set, name, &entry); rc != SYNCD_OK) return rc;
  void* data = bytes > 0 ? t->data : nullptr;
  // An empty GPU tensor has nothing to move: it travels as a host one.
  const int rc = gpu && bytes > 0 ? SubmitGpu(&entry, name, data, stream, out) : SubmitHost(&entry, name, data, out);
  if (rc != SYNCD_OK) {
    if (entry.aux_bytes > 0) arena_alloc_->Free(entry.aux_offset);
    return rc;
  }
  Slot* s = Lookup(*out);  // the completion cannot be drained before mu_ is released
  if (entry.aux_bytes > 0) s->aux_offset = int64_t(entry.aux_offset);
  s->result = extra.result;
  if (s->result != nullptr) *s->result = syncd_result{};  // a rank that gets no result sees an empty one
  // A staged send, or a kind whose result goes to the result area, leaves the tensor as it was:
  // nothing to copy back.
  if (kind == abi::OpKind::kSend || s->result != nullptr) s->user_data = nullptr;
  if (kind == abi::OpKind::kReducescatter) {
    // In place: only this rank's share comes back.
    const int64_t rows = syncd_reducescatter_rows(t->shape[0], set.size, set.rank);
    s->bytes = t->shape[0] == 0 ? 0 : bytes / uint64_t(t->shape[0]) * uint64_t(rows);
  }
  return SYNCD_OK;
}

int Client::SubmitGpu(abi::SubmitEntry* entry, const std::string& name, void* data, void* stream, syncd_handle* out) {
  // The tensor stays where it is: the arena carries its description (freed at completion).
  std::string why;
  CudaDriver* cuda = CudaDriver::Get(&why);
  if (cuda == nullptr) return Fail(SYNCD_ERR_INVALID, "tensor '" + name + "' is a GPU tensor, but " + why);
  auto off = arena_alloc_->Allocate(sizeof(abi::GpuDescriptor));
  if (!off) return Fail(SYNCD_ERR_NO_MEMORY, "tensor '" + name + "': arena has no room for a GPU descriptor");
  int slot = -1;
  auto* desc = reinterpret_cast<abi::GpuDescriptor*>(arena_ + *off);
  if (int rc = cuda->Export(data, entry->bytes, stream, desc, &slot, &why); rc != SYNCD_OK) {
    arena_alloc_->Free(*off);
    return Fail(rc, "tensor '" + name + "' (GPU pointer " + std::to_string(uintptr_t(data)) + "): " + why);
  }
  entry->arena_offset = *off;
  entry->flags = abi::kSubmitGpu;
  return Enqueue(entry, name, nullptr, *off, true, out, slot);
}

int Client::SubmitHost(abi::SubmitEntry* entry, const std::string& name, void* data, syncd_handle* out) {
  const uint64_t bytes = entry->bytes;
  uint64_t offset = 0, staging = 0;
  void* user = nullptr;
  if (bytes > 0) {
    if (InArena(data, bytes)) {
      offset = uint64_t(static_cast<char*>(data) - arena_);
    } else {
      auto off = arena_alloc_->Allocate(bytes);
      if (!off)
        return Fail(SYNCD_ERR_NO_MEMORY, "tensor '" + name + "': arena has no room to stage " +
                                             std::to_string(bytes) + " bytes (arena " +
                                             std::to_string(arena_alloc_->capacity()) +
                                             " bytes; use syncd_alloc or a larger --arena-size)");
      staging = offset = *off;
      user = data;
      memcpy(arena_ + offset, data, bytes);
    }
  }
  entry->arena_offset = offset;
  return Enqueue(entry, name, user, staging, user != nullptr, out);
}

int Client::Enqueue(abi::SubmitEntry* entry, const std::string& name, void* user, uint64_t staging, bool staged,
                    syncd_handle* out, int gpu_slot) {
  abi::SubmitEntry* e = submit_.Reserve();
  if (e == nullptr) {  // cannot happen while slots <= ring entries; keep the invariant checked
    if (staged) arena_alloc_->Free(staging);
    if (gpu_slot >= 0) ReleaseGpuSlot(gpu_slot);
    return Fail(SYNCD_ERR_INTERNAL, "submission ring full");
  }
  const uint32_t idx = free_slots_.back();
  free_slots_.pop_back();
  Slot& s = slots_[idx];
  s.state = SlotState::kInFlight;
  s.generation++;
  s.status = SYNCD_OK;
  s.message.clear();
  s.name = name;
  s.key = NameKey(name, entry->process_set);
  s.user_data = user;
  s.staged = staged;
  s.staging_offset = staging;
  s.bytes = entry->bytes;
  s.gpu_slot = gpu_slot;
  s.aux_offset = -1;
  s.result = nullptr;
  s.result_offset = abi::kNoResult;
  in_flight_names_.emplace(s.key, idx);

  const syncd_handle h = (uint64_t(s.generation) << 32) | idx;
  entry->handle = h;
  memcpy(entry->name, name.c_str(), name.size() + 1);
  memcpy(e, entry, offsetof(abi::SubmitEntry, name) + name.size() + 1);
  submit_.Publish();
  abi::RingFd(&node_->engine_doorbell, engine_wake_fd_);
  *out = h;
  return SYNCD_OK;
}

int Client::SubmitFailure(const char* name_c, const char* why_c, syncd_handle* out, int process_set) {
  if (name_c == nullptr || why_c == nullptr) return Fail(SYNCD_ERR_INVALID, "fail: name or reason is NULL");
  const std::string name = name_c;
  std::string why = why_c;
  if (name.empty() || name.size() > SYNCD_MAX_NAME)
    return Fail(SYNCD_ERR_INVALID, "tensor '" + name + "': name must have 1.." + std::to_string(SYNCD_MAX_NAME) + " bytes");
  if (why.empty()) why = "no reason given";
  why.resize(std::min(why.size(), abi::kFailMessageBytes - 1));
  MutexLock lock(&mu_);
  SetView set;
  if (int rc = CheckSet(process_set, "tensor '" + name + "': ", &set); rc != SYNCD_OK) return rc;
  if (in_flight_names_.count(NameKey(name, process_set)))
    return Fail(SYNCD_ERR_DUPLICATE, "tensor '" + name + "' is already in flight on rank " + std::to_string(id_.rank));
  if (!DaemonAlive()) return DaemonLostError();
  if (free_slots_.empty())
    return Fail(SYNCD_ERR_NO_MEMORY, "too many requests in flight (" + std::to_string(slots_.size()) + ")");
  auto off = arena_alloc_->Allocate(why.size());
  if (!off) return Fail(SYNCD_ERR_NO_MEMORY, "tensor '" + name + "': arena has no room for a failure notice");
  memcpy(arena_ + *off, why.data(), why.size());
  abi::SubmitEntry entry{};
  entry.kind = uint32_t(abi::OpKind::kFail);
  entry.process_set = process_set;
  entry.arena_offset = *off;
  entry.bytes = why.size();
  return Enqueue(&entry, name, nullptr, *off, true, out);
}

int Client::Timeline(const std::string& path, int64_t timeout_ms) {
  if (path.size() >= abi::kTimelinePathBytes)
    return Fail(SYNCD_ERR_INVALID, "timeline: the file name has over " + std::to_string(abi::kTimelinePathBytes - 1) + " bytes");
  syncd_handle h = 0;
  {
    MutexLock lock(&mu_);
    if (in_flight_names_.count(NameKey(abi::kTimelineName, 0)))
      return Fail(SYNCD_ERR_DUPLICATE, "timeline: another start or stop is in flight on rank " + std::to_string(id_.rank));
    if (!DaemonAlive()) return DaemonLostError();
    if (free_slots_.empty())
      return Fail(SYNCD_ERR_NO_MEMORY, "too many requests in flight (" + std::to_string(slots_.size()) + ")");
    uint64_t off = 0;
    if (!path.empty()) {
      auto at = arena_alloc_->Allocate(path.size());
      if (!at) return Fail(SYNCD_ERR_NO_MEMORY, "timeline: the arena has no room for the file name");
      off = *at;
      memcpy(arena_ + off, path.data(), path.size());
    }
    abi::SubmitEntry entry{};
    entry.kind = uint32_t(abi::OpKind::kTimeline);
    entry.arena_offset = off;
    entry.bytes = path.size();
    if (int rc = Enqueue(&entry, abi::kTimelineName, nullptr, off, !path.empty(), &h); rc != SYNCD_OK) return rc;
  }
  return Wait(h, timeout_ms);
}

Client::Slot* Client::Lookup(syncd_handle h) {
  const uint32_t idx = uint32_t(h & 0xffffffffu);
  if (idx >= slots_.size()) return nullptr;
  Slot& s = slots_[idx];
  if (s.state == SlotState::kFree || s.generation != uint32_t(h >> 32)) return nullptr;
  return &s;
}

void Client::DrainCompletions() {
  while (const abi::CompletionEntry* c = completion_.Front()) {
    const uint32_t ring_index = completion_.FrontIndex();
    abi::CompletionEntry entry = *c;
    Slot* s = Lookup(entry.handle);
    if (s != nullptr && s->state == SlotState::kInFlight) {
      s->state = SlotState::kDone;
      s->status = entry.status;
      s->result_offset = entry.result_offset;
      if (entry.message_bytes > 0) {
        const char* text = messages_ + size_t(ring_index & (completion_.capacity() - 1)) * abi::kMessageBytes;
        s->message.assign(text, std::min<size_t>(entry.message_bytes, abi::kMessageBytes));
      }
    }
    completion_.Pop();
  }
}

int Client::Finish(Slot* s, std::string* reply) {
  if (s->staged) {
    if (s->status == SYNCD_OK && s->user_data != nullptr) memcpy(s->user_data, arena_ + s->staging_offset, s->bytes);
    arena_alloc_->Free(s->staging_offset);
  }
  if (s->gpu_slot >= 0) {
    ReleaseGpuSlot(s->gpu_slot);
    s->gpu_slot = -1;
  }
  if (s->aux_offset >= 0) arena_alloc_->Free(uint64_t(s->aux_offset));
  s->aux_offset = -1;
  if (s->result_offset != abi::kNoResult) DeliverResult(s);
  if (reply != nullptr) *reply = s->message;
  in_flight_names_.erase(s->key);
  const int status = s->status;
  if (status != SYNCD_OK) Fail(status, s->message);
  s->state = SlotState::kFree;
  s->user_data = nullptr;
  s->staged = false;
  free_slots_.push_back(uint32_t(s - slots_.data()));
  return status;
}

void Client::DeliverResult(Slot* s) {
  const uint64_t at = s->result_offset;
  s->result_offset = abi::kNoResult;
  // The daemon wrote the block; check it lies in the result area before reading it.
  if (at < results_offset_ || at - results_offset_ + sizeof(abi::ResultHeader) > results_bytes_) {
    if (s->status == SYNCD_OK) {
      s->status = SYNCD_ERR_PROTOCOL;
      s->message = "tensor '" + s->name + "': the daemon's result block lies outside the result area";
    }
    return;
  }
  auto* h = reinterpret_cast<abi::ResultHeader*>(results_ + (at - results_offset_));
  const uint64_t room = results_bytes_ - (at - results_offset_);
  const bool fits = h->data_offset <= room && h->data_bytes <= room - h->data_offset &&
                    sizeof(abi::ResultHeader) + uint64_t(h->ranks) * sizeof(int64_t) <= h->data_offset;
  if (s->status != SYNCD_OK || s->result == nullptr || !fits) {
    if (s->status == SYNCD_OK && !fits) {
      s->status = SYNCD_ERR_PROTOCOL;
      s->message = "tensor '" + s->name + "': the daemon's result block is malformed";
    }
    h->released.store(1, std::memory_order_release);
    return;
  }
  char* block = reinterpret_cast<char*>(h);
  *s->result = syncd_result{block + h->data_offset, h->data_bytes, int(h->ranks),
                            reinterpret_cast<const int64_t*>(block + sizeof(abi::ResultHeader)), h};
}

void Client::ReleaseResult(syncd_result* r) {
  if (r == nullptr || r->block == nullptr) return;
  const char* b = static_cast<const char*>(r->block);
  if (b < results_ || b + sizeof(abi::ResultHeader) > results_ + results_bytes_) {
    Fail(SYNCD_ERR_INVALID, "syncd_release_result: not a result of this client");
    return;
  }
  static_cast<abi::ResultHeader*>(r->block)->released.store(1, std::memory_order_release);
  *r = syncd_result{};
}

int Client::Poll(syncd_handle h) {
  MutexLock lock(&mu_);
  Slot* s = Lookup(h);
  if (s == nullptr) return Fail(SYNCD_ERR_INVALID, "unknown or already completed handle");
  DrainCompletions();
  if (s->state == SlotState::kDone) return Finish(s);
  if (!DaemonAlive()) {
    s->state = SlotState::kDone;
    s->status = DaemonLostError();
    s->message = g_last_error;
    return Finish(s);
  }
  return SYNCD_IN_PROGRESS;
}

int Client::Wait(syncd_handle h, int64_t timeout_ms, std::string* reply) {
  const uint64_t start = abi::MonotonicNs();
  const uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + uint64_t(timeout_ms) * 1'000'000ull;
  uint64_t last_check = start;
  for (;;) {
    {
      MutexLock lock(&mu_);
      Slot* s = Lookup(h);
      if (s == nullptr) return Fail(SYNCD_ERR_INVALID, "unknown or already completed handle");
      DrainCompletions();
      if (s->state == SlotState::kDone) return Finish(s, reply);
      const uint64_t now = abi::MonotonicNs();
      // Also at the deadline: a caller that waits in short slices (the c10d backend's progress
      // thread: 20 ms) would otherwise never reach a check, and wait forever on a dead daemon.
      if (now - last_check >= kSleepSliceNs || now >= deadline) {
        last_check = now;
        if (!DaemonAlive()) {
          s->state = SlotState::kDone;
          s->status = DaemonLostError();
          s->message = g_last_error;
          return Finish(s);
        }
      }
      if (now >= deadline)
        return Fail(SYNCD_ERR_TIMEOUT, "tensor '" + s->name + "' not complete after " +
                                           std::to_string(timeout_ms) + " ms (still in flight)");
    }
    // Poll, handing the core to whoever else is runnable between polls, then sleep on the
    // doorbell. No pure spin first: ranks often share cores (4 ranks on one core here), and a
    // rank spinning there only delays the ranks whose submissions its collective waits for (an
    // 8-byte allreduce of 4 ranks on one core: 13 us with a 2 us spin, 4.6 us without). Where
    // nothing else is runnable sched_yield returns at once.
    const uint64_t now = abi::MonotonicNs();
    if (now - start < spin_ns_) {
      sched_yield();
      continue;
    }
    const uint64_t slice = std::min<uint64_t>(kSleepSliceNs, deadline - now);
    // The ring's depth is two atomic indices: read without mu_, which other threads may need.
    abi::SleepUnlessWork(&header_->client_doorbell, slice,
                         [&]() SYNCD_NO_THREAD_SAFETY_ANALYSIS { return completion_.Depth() > 0; });
  }
}

}  // namespace syncd::client
