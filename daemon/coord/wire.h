// What daemons tell each other about a tensor during negotiation, and its byte encoding (the
// control channel's messages: transport/control_message.h).
// Only the engine thread uses it; the encoding is little-endian and length-prefixed. Every
// message carries the daemon protocol's version (kWireVersion, base/version.h): the rendezvous
// refuses a daemon of another version, and a message of another version fails to decode, naming
// both versions.
#ifndef SYNCD_DAEMON_COORD_WIRE_H_
#define SYNCD_DAEMON_COORD_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"
#include "daemon/core/tensor_table.h"
#include "daemon/transport/control_message.h"

namespace syncd {

// The properties every node must agree on for one tensor name.
struct TensorMeta {
  uint32_t kind = 0, dtype = 0, op = 0;
  uint32_t gpu = 0;  // memory: 1 GPU, 0 host (a name's collective runs on NCCL or on the host path)
  // The one integer every rank of the name must agree on, from the request's field of its kind
  // (AgreedArg): a rooted kind's root, the process set a removal names; for a join, the
  // coordinator's answer, the last rank to join. 0 for the other kinds.
  int32_t arg = 0;
  double prescale = 1, postscale = 1;
  uint32_t compression = 0;  // an allreduce's inter-node hop: syncd_compression as resolved (never DEFAULT)
  uint32_t compression_ppm = 0;  // and top-k's or random-k's ratio (parts per million; 0 for the others)
  // A join's: 1 when the node joined for ranks the job goes on without (TensorTable::MarkLost):
  // they stand in for process set changes too (JoinedRequest's `lost`). 0 for the other kinds.
  uint32_t absent = 0;
  Shape shape;  // up to 4 dimensions inline
  // Kinds whose ranks' shapes differ (Collective::shapes_vary): each rank's first dimension and
  // (alltoall) splits, concatenated. A node announces its own ranks'; the coordinator answers
  // with every rank's of the job.
  std::vector<int64_t> rows;
  std::vector<int64_t> splits;

  static TensorMeta Of(const ReadyTensor& t);
  // The same into `out`, reusing its storage.
  static void Fill(const ReadyTensor& t, TensorMeta* out);
  bool operator==(const TensorMeta& o) const = default;
};

// A request of `rank` with what `meta` says (no data; `index`: the rank's place among the meta's
// per-rank rows): how the coordinator checks that every rank of the job agrees, with the same
// check as within a node (CheckAgreement).
Request RequestOf(const TensorMeta& meta, const std::string& name, uint32_t rank, size_t index);

// A request's field that TensorMeta::arg carries, by its kind.
int32_t AgreedArg(const Request& r);
void SetAgreedArg(Request* r, int32_t arg);

// A node's request to the coordinator: "this name is ready here, with this meta".
struct NameRequest {
  std::string name;
  TensorMeta meta;
  std::string error;  // non-empty: this node's ranks disagreed among themselves
  uint64_t waited_ns = 0;  // how long it has been ready on this node (stalls count from then)
};

// The coordinator's answer for one name: run it (status OK) or fail it everywhere.
struct NameResponse {
  std::string name;
  int32_t status = SYNCD_OK;
  std::string message;
  int32_t cache_bit = -1;  // the response cache slot all nodes store it in; -1: not cached
  TensorMeta meta;
};

std::string EncodeRequests(const std::vector<NameRequest>& v);
StatusOr<std::vector<NameRequest>> DecodeRequests(const std::string& bytes);
std::string EncodeResponses(const std::vector<NameResponse>& v);
StatusOr<std::vector<NameResponse>> DecodeResponses(const std::string& bytes);

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_WIRE_H_
