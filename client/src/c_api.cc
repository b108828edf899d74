// The exported C functions: argument checks and forwarding to Client.
#include <algorithm>
#include <cmath>

#include "client/src/client_impl.h"
#include "proto/status_names.h"

namespace syncd::client {
const char* LastError();
}  // namespace syncd::client

using syncd::client::Client;
using syncd::client::Fail;
namespace abi = syncd::abi;

namespace {
Client* Unwrap(syncd_client* c) { return reinterpret_cast<Client*>(c); }
const Client* Unwrap(const syncd_client* c) { return reinterpret_cast<const Client*>(c); }
// A kind that names a root rank (checked to be one of the set's), and where its result goes.
syncd::client::SubmitExtra Rooted(const char* kind, syncd_result* result = nullptr) {
  syncd::client::SubmitExtra extra;
  extra.root_kind = kind;
  extra.result = result;
  return extra;
}
}  // namespace

extern "C" {

void syncd_init_options_default(syncd_init_options* o) {
  o->run_dir = nullptr;
  o->rank = o->size = o->local_rank = o->local_size = -1;
  o->attach_timeout_ms = -1;
  o->job_id = 0;
}

int syncd_init(const syncd_init_options* opts, syncd_client** out) {
  if (out == nullptr) return Fail(SYNCD_ERR_INVALID, "syncd_init: out is NULL");
  syncd_init_options defaults;
  syncd_init_options_default(&defaults);
  Client* c = nullptr;
  int rc = Client::Attach(opts ? *opts : defaults, &c);
  *out = reinterpret_cast<syncd_client*>(c);
  return rc;
}

void syncd_shutdown(syncd_client* c) { delete Unwrap(c); }

void syncd_leave(syncd_client* c) { Unwrap(c)->Leave(); }

int syncd_reattach(syncd_client* c, int timeout_ms) { return Unwrap(c)->Reattach(timeout_ms); }

int syncd_acknowledge_membership(syncd_client* c, uint32_t* membership) {
  return Unwrap(c)->AcknowledgeMembership(membership);
}

int syncd_job_set_ranks(syncd_client* c, int* ranks, int capacity, int* count, uint32_t* membership) {
  return Unwrap(c)->JobSetRanks(ranks, capacity, count, membership);
}

int syncd_replaces_lost_rank(syncd_client* c, int* replaces) { return Unwrap(c)->ReplacesLostRank(replaces); }

int syncd_rank(const syncd_client* c) { return Unwrap(c)->identity().rank; }
int syncd_size(const syncd_client* c) { return Unwrap(c)->identity().size; }
int syncd_local_rank(const syncd_client* c) { return Unwrap(c)->identity().local_rank; }
int syncd_local_size(const syncd_client* c) { return Unwrap(c)->identity().local_size; }
int syncd_cross_rank(const syncd_client* c) { return Unwrap(c)->identity().node_rank; }
int syncd_cross_size(const syncd_client* c) { return Unwrap(c)->identity().node_count; }
const char* syncd_coord_mode(const syncd_client* c) { return abi::kCoordModeNames[Unwrap(c)->identity().coord_mode]; }

void* syncd_alloc(syncd_client* c, size_t bytes) { return Unwrap(c)->Alloc(bytes); }
void syncd_free(syncd_client* c, void* p) { Unwrap(c)->Free(p); }
int syncd_in_arena(const syncd_client* c, const void* p, size_t bytes) {
  return Unwrap(c)->InArena(p, bytes) ? 1 : 0;
}

int syncd_allreduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                          double prescale, double postscale, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kAllreduce, t, op, 0, prescale, postscale, out);
}
int syncd_allreduce_compressed_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, double prescale,
                                     double postscale, syncd_compression compression, syncd_handle* out) {
  syncd::client::SubmitExtra extra;
  extra.compression = uint32_t(compression);
  return Unwrap(c)->Submit(abi::OpKind::kAllreduce, t, op, 0, prescale, postscale, out, false, nullptr, extra);
}
int syncd_allreduce_compressed_ratio_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op,
                                           double prescale, double postscale, syncd_compression compression,
                                           double ratio, syncd_handle* out) {
  const std::string what = "tensor '" + std::string(t != nullptr && t->name ? t->name : "") + "': ";
  syncd::client::SubmitExtra extra;
  extra.compression = uint32_t(compression);
  if (int rc = syncd::client::CompressionPpm(compression, ratio, what, &extra.compression_ppm); rc != SYNCD_OK) return rc;
  return Unwrap(c)->Submit(abi::OpKind::kAllreduce, t, op, 0, prescale, postscale, out, false, nullptr, extra);
}
int syncd_broadcast_async(syncd_client* c, const syncd_tensor* t, int root, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kBroadcast, t, SYNCD_SUM, root, 1.0, 1.0, out, false, nullptr,
                           Rooted("broadcast"));
}
int syncd_reduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, int root, double prescale,
                       double postscale, syncd_handle* out) {
  if (op < 0 || op >= SYNCD_REDUCE_OP_COUNT) return Fail(SYNCD_ERR_INVALID, "reduce: unknown reduce op " + std::to_string(op));
  return Unwrap(c)->Submit(abi::OpKind::kReduce, t, op, root, prescale, postscale, out, false, nullptr, Rooted("reduce"));
}
int syncd_allreduce_gpu_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, double prescale,
                              double postscale, void* stream, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kAllreduce, t, op, 0, prescale, postscale, out, true, stream);
}
int syncd_broadcast_gpu_async(syncd_client* c, const syncd_tensor* t, int root, void* stream, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kBroadcast, t, SYNCD_SUM, root, 1.0, 1.0, out, true, stream,
                           Rooted("broadcast"));
}
int syncd_allgather_async(syncd_client* c, const syncd_tensor* t, syncd_result* result, syncd_handle* out) {
  if (result == nullptr) return Fail(SYNCD_ERR_INVALID, "allgather: result is NULL");
  return Unwrap(c)->Submit(abi::OpKind::kAllgather, t, SYNCD_SUM, 0, 1.0, 1.0, out, false, nullptr, {nullptr, 0, result});
}
int syncd_gather_async(syncd_client* c, const syncd_tensor* t, int root, syncd_result* result, syncd_handle* out) {
  if (result == nullptr) return Fail(SYNCD_ERR_INVALID, "gather: result is NULL");
  return Unwrap(c)->Submit(abi::OpKind::kGather, t, SYNCD_SUM, root, 1.0, 1.0, out, false, nullptr,
                           Rooted("gather", result));
}
int syncd_scatter_async(syncd_client* c, const syncd_tensor* t, int root, syncd_result* result, syncd_handle* out) {
  if (result == nullptr) return Fail(SYNCD_ERR_INVALID, "scatter: result is NULL");
  return Unwrap(c)->Submit(abi::OpKind::kScatter, t, SYNCD_SUM, root, 1.0, 1.0, out, false, nullptr,
                           Rooted("scatter", result));
}
int syncd_alltoall_async(syncd_client* c, const syncd_tensor* t, const int64_t* splits, int nsplits,
                         syncd_result* result, syncd_handle* out) {
  if (result == nullptr) return Fail(SYNCD_ERR_INVALID, "alltoall: result is NULL");
  return Unwrap(c)->Submit(abi::OpKind::kAlltoall, t, SYNCD_SUM, 0, 1.0, 1.0, out, false, nullptr, {splits, nsplits, result});
}
int syncd_reducescatter_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, double prescale,
                              double postscale, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kReducescatter, t, op, 0, prescale, postscale, out);
}
int syncd_send_async(syncd_client* c, const syncd_tensor* t, int peer, int tag, syncd_handle* out) {
  syncd::client::SubmitExtra extra;
  extra.tag = tag;
  return Unwrap(c)->Submit(abi::OpKind::kSend, t, SYNCD_SUM, peer, 1.0, 1.0, out, false, nullptr, extra);
}
int syncd_recv_async(syncd_client* c, const syncd_tensor* t, int peer, int tag, syncd_handle* out) {
  syncd::client::SubmitExtra extra;
  extra.tag = tag;
  return Unwrap(c)->Submit(abi::OpKind::kRecv, t, SYNCD_SUM, peer, 1.0, 1.0, out, false, nullptr, extra);
}
int syncd_recv_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms, int* source) {
  return Unwrap(c)->WaitRecv(h, timeout_ms, source);
}
int64_t syncd_reducescatter_rows(int64_t first_dim, int size, int rank) {
  if (first_dim < 0 || size <= 0 || rank < 0 || rank >= size) return 0;
  return first_dim / size + (rank < first_dim % size ? 1 : 0);
}
void syncd_release_result(syncd_client* c, syncd_result* result) { Unwrap(c)->ReleaseResult(result); }

int syncd_join(syncd_client* c, int64_t timeout_ms, int* last_rank) { return Unwrap(c)->Join(timeout_ms, last_rank); }

int syncd_add_process_set(syncd_client* c, const int* ranks, int nranks, int64_t timeout_ms, int* id) {
  return Unwrap(c)->AddProcessSet(ranks, nranks, timeout_ms, id);
}
int syncd_remove_process_set(syncd_client* c, int id, int64_t timeout_ms) {
  return Unwrap(c)->RemoveProcessSet(id, timeout_ms);
}
int syncd_process_set_rank(const syncd_client* c, int id) {
  return const_cast<Client*>(Unwrap(c))->Set(id).rank;
}
int syncd_process_set_size(const syncd_client* c, int id) {
  return const_cast<Client*>(Unwrap(c))->Set(id).size;
}
int syncd_barrier_set_async(syncd_client* c, int process_set, syncd_handle* out) {
  syncd::client::SubmitExtra extra;
  extra.process_set = process_set;
  return Unwrap(c)->Submit(abi::OpKind::kBarrier, nullptr, SYNCD_SUM, 0, 1.0, 1.0, out, false, nullptr, extra);
}
int syncd_fail_set_async(syncd_client* c, int process_set, const char* name, const char* why, syncd_handle* out) {
  return Unwrap(c)->SubmitFailure(name, why, out, process_set);
}
int syncd_fail_async(syncd_client* c, const char* name, const char* why, syncd_handle* out) {
  return Unwrap(c)->SubmitFailure(name, why, out);
}
int syncd_start_timeline(syncd_client* c, const char* path) {
  if (path == nullptr || *path == 0) return Fail(SYNCD_ERR_INVALID, "syncd_start_timeline: no file given");
  return Unwrap(c)->Timeline(path, 10'000);
}
int syncd_stop_timeline(syncd_client* c) { return Unwrap(c)->Timeline("", 10'000); }

int syncd_partial_allreduce_async(syncd_client* c, const syncd_tensor* t, syncd_reduce_op op, int mode, int quorum,
                                  syncd_handle* out) {
  syncd::client::SubmitExtra extra;
  extra.partial_mode = uint32_t(mode);
  return Unwrap(c)->Submit(abi::OpKind::kPartialAllreduce, t, op, quorum, 1.0, 1.0, out, false, nullptr, extra);
}
int syncd_partial_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms, syncd_partial_info* info) {
  return Unwrap(c)->WaitPartial(h, timeout_ms, info);
}

int syncd_barrier_async(syncd_client* c, syncd_handle* out) {
  return Unwrap(c)->Submit(abi::OpKind::kBarrier, nullptr, SYNCD_SUM, 0, 1.0, 1.0, out);
}

int syncd_register_graph(syncd_client* c, const syncd_graph* g, int64_t timeout_ms, uint64_t* plan_hash) {
  return Unwrap(c)->RegisterGraph(g, timeout_ms, plan_hash);
}

int syncd_poll(syncd_client* c, syncd_handle h) { return Unwrap(c)->Poll(h); }
int syncd_wait(syncd_client* c, syncd_handle h, int64_t timeout_ms) {
  return Unwrap(c)->Wait(h, timeout_ms);
}

const char* syncd_last_error(void) { return syncd::client::LastError(); }
size_t syncd_dtype_size(syncd_dtype d) { return abi::DtypeSize(d); }

const char* syncd_status_name(int s) { return abi::StatusName(s); }

const char* syncd_version(void) { return SYNCD_VERSION_STRING; }
int syncd_version_code(void) { return SYNCD_VERSION_CODE; }
uint32_t syncd_shm_abi_version(void) { return abi::kVersion; }

}  // extern "C"
