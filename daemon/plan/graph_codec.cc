#include "daemon/plan/graph_codec.h"


#include "daemon/base/bytes.h"
#include "proto/graph_wire.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

Status Bad(const std::string& why) { return Status(SYNCD_ERR_INVALID, "graph: " + why); }

}  // namespace

StatusOr<Graph> DecodeGraph(const char* data, size_t bytes) {
  ByteReader rd(data, bytes);
  uint32_t magic = 0, version = 0, ops = 0, edges = 0, fetches = 0, reserved = 0;
  if (!rd.Get(&magic) || !rd.Get(&version) || !rd.Get(&ops) || !rd.Get(&edges) || !rd.Get(&fetches) ||
      !rd.Get(&reserved))
    return Bad("truncated header (" + std::to_string(bytes) + " bytes)");
  if (magic != abi::kGraphMagic) return Bad("not a graph (bad magic)");
  if (version != abi::kGraphVersion)
    return Bad("encoding version " + std::to_string(version) + ", this daemon reads " +
               std::to_string(abi::kGraphVersion));
  if (ops > abi::kGraphMaxOps || edges > abi::kGraphMaxEdges || fetches > ops)
    return Bad(std::to_string(ops) + " operations, " + std::to_string(edges) + " edges, " + std::to_string(fetches) +
               " fetches is more than a graph may hold");
  // Every op takes at least its fixed part: refuse counts the bytes cannot hold before allocating.
  if (rd.left() < uint64_t(ops) * abi::kGraphOpFixedBytes + uint64_t(edges) * 8 + uint64_t(fetches) * 4)
    return Bad("truncated: " + std::to_string(ops) + " operations do not fit in " + std::to_string(bytes) + " bytes");
  Graph g;
  g.ops.resize(ops);
  for (uint32_t i = 0; i < ops; ++i) {
    GraphOp& op = g.ops[i];
    uint8_t collective = 0, dtype = 0, reduce = 0, memory = 0, compression = 0;
    uint16_t name_len = 0, tensor_len = 0;
    if (!rd.Get(&collective) || !rd.Get(&dtype) || !rd.Get(&reduce) || !rd.Get(&memory) || !rd.Get(&compression) ||
        !rd.Get(&op.compression_ppm) || !rd.Get(&op.count) || !rd.Get(&name_len) || !rd.Get(&tensor_len) || !rd.Text(name_len, &op.name) ||
        !rd.Text(tensor_len, &op.tensor))
      return Bad("truncated at operation " + std::to_string(i));
    const std::string what = "operation " + std::to_string(i) + (op.name.empty() ? "" : " ('" + op.name + "')");
    if (collective > 1) return Bad(what + ": collective flag " + std::to_string(collective));
    op.collective = collective == 1;
    if (!op.collective) {
      if (!op.tensor.empty()) return Bad(what + " names tensor '" + op.tensor + "' but is not a collective");
      if (memory != 0) return Bad(what + " names a memory kind but is not a collective");
      if (compression != 0 || op.compression_ppm != 0) return Bad(what + " names a compression but is not a collective");
      continue;
    }
    if (memory > 1) return Bad(what + ": unknown memory kind " + std::to_string(memory) + " (0 host, 1 GPU)");
    op.gpu = memory == 1;
    if (dtype >= SYNCD_DTYPE_COUNT) return Bad(what + ": unknown dtype " + std::to_string(dtype));
    if (reduce >= SYNCD_REDUCE_OP_COUNT) return Bad(what + ": unknown reduce op " + std::to_string(reduce));
    if (op.tensor.empty() || op.tensor.size() > SYNCD_MAX_NAME || op.tensor.find('\0') != std::string::npos)
      return Bad(what + ": tensor name must have 1.." + std::to_string(SYNCD_MAX_NAME) + " bytes and no NUL");
    op.dtype = syncd_dtype(dtype);
    op.op = syncd_reduce_op(reduce);
    if (compression >= SYNCD_COMPRESSION_COUNT) return Bad(what + ": unknown compression " + std::to_string(compression));
    if (op.gpu && compression > SYNCD_COMPRESSION_NONE)
      return Bad(what + ": " + abi::CompressionName(compression) +
                 " compression of GPU tensors is not supported yet (NCCL moves them as they are)");
    if (op.compression_ppm > (compression == SYNCD_COMPRESSION_POWERSGD ? 1024u : 1'000'000u))
      return Bad(what + ": compression " + (compression == SYNCD_COMPRESSION_POWERSGD ? "rank " : "ratio ") +
                 std::to_string(op.compression_ppm) + (compression == SYNCD_COMPRESSION_POWERSGD ? " over 1024" : " ppm over 1"));
    op.compression = compression;  // as asked: the daemon resolves DEFAULT as for a submission
  }
  g.edges.resize(edges);
  for (uint32_t i = 0; i < edges; ++i)
    if (!rd.Get(&g.edges[i].first) || !rd.Get(&g.edges[i].second)) return Bad("truncated at edge " + std::to_string(i));
  g.fetches.resize(fetches);
  for (uint32_t i = 0; i < fetches; ++i)
    if (!rd.Get(&g.fetches[i])) return Bad("truncated at fetch " + std::to_string(i));
  if (rd.left() != 0) return Bad(std::to_string(rd.left()) + " trailing bytes");
  return g;
}

}  // namespace syncd
