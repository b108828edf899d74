// Requests whose completion text carries what the daemon decided: TOPO graph registration (the
// plan hash), process sets (their view on this rank, adding and removing them: the set id), join
// (the last rank to join) and a partial allreduce (its round). All but the last are collectives
// of the global set that the caller waits for.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "client/src/client_impl.h"
#include "proto/graph_wire.h"
#include "proto/status_names.h"

namespace syncd::client {

int CompressionPpm(syncd_compression compression, double ratio, const std::string& what, uint32_t* ppm) {
  if (compression == SYNCD_COMPRESSION_POWERSGD) {  // the rank
    if (!(ratio >= 0 && ratio <= 1024 && ratio == std::floor(ratio)))
      return Fail(SYNCD_ERR_INVALID, what + "PowerSGD rank " + std::to_string(ratio) + " is not a whole number in [1, 1024]");
    *ppm = uint32_t(ratio);
    return SYNCD_OK;
  }
  if (!(ratio >= 0 && ratio <= 1))
    return Fail(SYNCD_ERR_INVALID, what + "compression ratio " + std::to_string(ratio) + " is not in (0, 1]");
  *ppm = ratio == 0 ? 0 : std::max(1u, uint32_t(std::lround(ratio * 1e6)));
  return SYNCD_OK;
}

SetView Client::Set(int id) {
  MutexLock lock(&mu_);
  SetView v;
  CheckSet(id, "", &v);
  return v;
}

int Client::CheckSet(int id, const std::string& what, SetView* set) {
  set->id = id;
  if (id == 0) {
    *set = global_;
    return SYNCD_OK;
  }
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    set->size = 0;
    set->rank = -1;
    return Fail(SYNCD_ERR_INVALID, what + "process set " + std::to_string(id) +
                                       " is not one of this job's (syncd_add_process_set makes one; removed sets are gone)");
  }
  const std::vector<int>& ranks = it->second;
  const auto at = std::lower_bound(ranks.begin(), ranks.end(), id_.rank);
  *set = SetView{id, int(ranks.size()), at != ranks.end() && *at == id_.rank ? int(at - ranks.begin()) : -1, &ranks};
  if (set->rank < 0)
    return Fail(SYNCD_ERR_INVALID, what + "rank " + std::to_string(id_.rank) + " is not in process set " + std::to_string(id));
  return SYNCD_OK;
}

int Client::RegisterGraph(const syncd_graph* g, int64_t timeout_ms, uint64_t* plan_hash) {
  if (g == nullptr) return Fail(SYNCD_ERR_INVALID, "graph is NULL");
  if ((g->num_ops > 0 && g->ops == nullptr) || (g->num_edges > 0 && g->edges == nullptr) ||
      (g->num_fetches > 0 && g->fetches == nullptr))
    return Fail(SYNCD_ERR_INVALID, "graph: ops, edges or fetches is NULL but its count is not 0");
  if (g->num_ops > abi::kGraphMaxOps || g->num_edges > abi::kGraphMaxEdges || g->num_fetches > g->num_ops)
    return Fail(SYNCD_ERR_INVALID, "graph: too many operations, edges or fetches");
  abi::GraphWriter w(uint32_t(g->num_ops), uint32_t(g->num_edges), uint32_t(g->num_fetches));
  for (size_t i = 0; i < g->num_ops; ++i) {
    const syncd_graph_op& op = g->ops[i];
    const std::string name = op.name ? op.name : "";
    if (name.size() > 0xffff) return Fail(SYNCD_ERR_INVALID, "graph: operation " + std::to_string(i) + " has a name over 64 KiB");
    const std::string tensor = op.tensor ? op.tensor : "";
    if (op.tensor != nullptr && (tensor.empty() || tensor.size() > SYNCD_MAX_NAME))
      return Fail(SYNCD_ERR_INVALID, "graph: operation " + std::to_string(i) + " ('" + name + "'): tensor name must have 1.." +
                                         std::to_string(SYNCD_MAX_NAME) + " bytes");
    if (op.tensor != nullptr && (abi::DtypeSize(op.dtype) == 0 || op.op < 0 || op.op >= SYNCD_REDUCE_OP_COUNT))
      return Fail(SYNCD_ERR_INVALID, "graph: tensor '" + tensor + "': unknown dtype or reduce op");
    if (op.tensor != nullptr && op.memory != SYNCD_MEMORY_HOST && op.memory != SYNCD_MEMORY_GPU)
      return Fail(SYNCD_ERR_INVALID, "graph: tensor '" + tensor + "': unknown memory kind " + std::to_string(int(op.memory)) +
                                         " (SYNCD_MEMORY_HOST or SYNCD_MEMORY_GPU)");
    if (op.tensor != nullptr && (op.compression < 0 || op.compression >= SYNCD_COMPRESSION_COUNT))
      return Fail(SYNCD_ERR_INVALID, "graph: tensor '" + tensor + "': unknown compression " +
                                         std::to_string(int(op.compression)));
    uint32_t ppm = 0;
    if (op.tensor != nullptr)
      if (int rc = CompressionPpm(op.compression, op.compression_ratio, "graph: tensor '" + tensor + "': ", &ppm); rc != SYNCD_OK)
        return rc;
    w.Op(op.tensor != nullptr, op.dtype, op.op, op.count, name, tensor, op.tensor != nullptr ? uint32_t(op.memory) : 0,
         op.tensor != nullptr ? uint32_t(op.compression) : 0, ppm);
  }
  for (size_t i = 0; i < g->num_edges; ++i) w.Edge(g->edges[2 * i], g->edges[2 * i + 1]);
  for (size_t i = 0; i < g->num_fetches; ++i) w.Fetch(g->fetches[i]);
  const std::string& bytes = w.bytes();

  syncd_handle h = 0;
  {
    MutexLock lock(&mu_);
    const std::string name = abi::kTopoPlanName;
    if (in_flight_names_.count(name))
      return Fail(SYNCD_ERR_DUPLICATE, "a graph registration is already in flight on rank " + std::to_string(id_.rank));
    if (!DaemonAlive()) return DaemonLostError();
    if (free_slots_.empty())
      return Fail(SYNCD_ERR_NO_MEMORY, "too many requests in flight (" + std::to_string(slots_.size()) + ")");
    auto off = arena_alloc_->Allocate(bytes.size());
    if (!off)
      return Fail(SYNCD_ERR_NO_MEMORY, "graph: arena has no room for its " + std::to_string(bytes.size()) +
                                           " bytes (arena " + std::to_string(arena_alloc_->capacity()) + " bytes)");
    memcpy(arena_ + *off, bytes.data(), bytes.size());
    abi::SubmitEntry entry{};
    entry.kind = uint32_t(abi::OpKind::kRegisterGraph);
    entry.arena_offset = *off;
    entry.bytes = bytes.size();
    if (int rc = Enqueue(&entry, name, nullptr, *off, true, &h); rc != SYNCD_OK) return rc;
  }
  std::string reply;
  const int rc = Wait(h, timeout_ms, &reply);
  if (rc == SYNCD_OK && plan_hash != nullptr) {
    unsigned long long v = 0;
    if (sscanf(reply.c_str(), "plan %llx", &v) != 1)
      return Fail(SYNCD_ERR_PROTOCOL, "graph registered but the daemon's reply carries no plan hash");
    *plan_hash = v;
  }
  return rc;
}

int Client::ChangeSets(abi::OpKind kind, const std::vector<int64_t>& ranks, int id, int64_t timeout_ms,
                       std::string* reply) {
  syncd_handle h = 0;
  {
    MutexLock lock(&mu_);
    // Every rank makes its set changes in the same order: the n-th change has the same name.
    const std::string name = "syncd.process_set." + std::to_string(set_change_seq_++);
    if (!DaemonAlive()) return DaemonLostError();
    if (free_slots_.empty())
      return Fail(SYNCD_ERR_NO_MEMORY, "too many requests in flight (" + std::to_string(slots_.size()) + ")");
    abi::SubmitEntry entry{};
    entry.kind = uint32_t(kind);
    entry.root = id;
    const uint64_t bytes = ranks.size() * sizeof(int64_t);
    std::optional<uint64_t> off;
    if (bytes > 0) {
      off = arena_alloc_->Allocate(bytes);
      if (!off) return Fail(SYNCD_ERR_NO_MEMORY, "process set: arena has no room for its ranks");
      memcpy(arena_ + *off, ranks.data(), bytes);
      entry.arena_offset = *off;
      entry.bytes = bytes;
    }
    if (int rc = Enqueue(&entry, name, nullptr, off.value_or(0), off.has_value(), &h); rc != SYNCD_OK) return rc;
  }
  return Wait(h, timeout_ms, reply);
}

int Client::Join(int64_t timeout_ms, int* last_rank) {
  syncd_handle h = 0;
  if (int rc = Submit(abi::OpKind::kJoin, nullptr, SYNCD_SUM, 0, 1.0, 1.0, &h); rc != SYNCD_OK) return rc;
  std::string reply;
  if (int rc = Wait(h, timeout_ms, &reply); rc != SYNCD_OK) return rc;
  int last = -1;
  if (sscanf(reply.c_str(), "last rank %d", &last) != 1)
    return Fail(SYNCD_ERR_PROTOCOL, "join completed but the daemon's reply names no last rank");
  if (last_rank != nullptr) *last_rank = last;
  return SYNCD_OK;
}

int Client::WaitPartial(syncd_handle h, int64_t timeout_ms, syncd_partial_info* info) {
  std::string reply;
  if (int rc = Wait(h, timeout_ms, &reply); rc != SYNCD_OK) return rc;
  unsigned long long round = 0;
  syncd_partial_info got{};
  if (sscanf(reply.c_str(), "round %llu nap %d initiator %d fresh %d", &round, &got.nap, &got.initiator, &got.fresh) != 4)
    return Fail(SYNCD_ERR_PROTOCOL, "partial allreduce completed but the daemon's reply names no round: '" + reply + "'");
  got.round = round;
  if (info != nullptr) *info = got;
  return SYNCD_OK;
}

int Client::WaitRecv(syncd_handle h, int64_t timeout_ms, int* source) {
  std::string reply;
  if (int rc = Wait(h, timeout_ms, &reply); rc != SYNCD_OK) return rc;
  int from = -1;
  if (sscanf(reply.c_str(), "source %d", &from) != 1 || from < 0 || from >= id_.size)
    return Fail(SYNCD_ERR_PROTOCOL, "receive completed but the daemon's reply names no source: '" + reply + "'");
  if (source != nullptr) *source = from;
  return SYNCD_OK;
}

int Client::AddProcessSet(const int* ranks, int n, int64_t timeout_ms, int* id) {
  if (id == nullptr || (ranks == nullptr && n > 0)) return Fail(SYNCD_ERR_INVALID, "add_process_set: NULL argument");
  if (n <= 0 || n > id_.size)
    return Fail(SYNCD_ERR_INVALID, "a process set has 1 to " + std::to_string(id_.size) + " ranks, not " + std::to_string(n));
  std::vector<int64_t> sorted(ranks, ranks + n);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] < 0 || sorted[i] >= id_.size || (i > 0 && sorted[i] == sorted[i - 1]))
      return Fail(SYNCD_ERR_INVALID, "process set ranks must be distinct ranks of the job (0.." + std::to_string(id_.size - 1) +
                                         "); " + std::to_string(sorted[i]) + " is not");
  std::string reply;
  if (int rc = ChangeSets(abi::OpKind::kAddProcessSet, sorted, 0, timeout_ms, &reply); rc != SYNCD_OK) return rc;
  int got = 0;
  if (sscanf(reply.c_str(), "process set %d", &got) != 1 || got <= 0)
    return Fail(SYNCD_ERR_PROTOCOL, "process set added but the daemon's reply carries no id");
  MutexLock lock(&mu_);
  sets_[got] = std::vector<int>(sorted.begin(), sorted.end());
  *id = got;
  return SYNCD_OK;
}

int Client::RemoveProcessSet(int id, int64_t timeout_ms) {
  {
    MutexLock lock(&mu_);
    if (id == 0) return Fail(SYNCD_ERR_INVALID, "the global process set cannot be removed");
    if (!sets_.count(id)) return Fail(SYNCD_ERR_INVALID, "process set " + std::to_string(id) + " is not one of this job's");
  }
  std::string reply;
  const int rc = ChangeSets(abi::OpKind::kRemoveProcessSet, {}, id, timeout_ms, &reply);
  if (rc == SYNCD_OK) {
    MutexLock lock(&mu_);
    sets_.erase(id);
  }
  return rc;
}

}  // namespace syncd::client
