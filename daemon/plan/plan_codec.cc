#include "daemon/plan/plan_codec.h"

#include <unordered_set>

#include "daemon/base/bytes.h"
#include "proto/graph_wire.h"

namespace syncd {
namespace {

constexpr uint32_t kPlanMagic = 0x4e4c5054;  // "TPLN"
constexpr uint32_t kPlanVersion = 1;
// dtype, op, memory, compression (1 byte each), ratio or rank, elements, name length.
constexpr size_t kTensorFixedBytes = 4 + 4 + 8 + 2;

Status Bad(const std::string& why) { return Status(SYNCD_ERR_PROTOCOL, "TOPO plan from another node: " + why); }

Status DecodeTensor(ByteReader* rd, uint32_t i, PlannedTensor* t) {
  uint8_t dtype = 0, op = 0, gpu = 0;
  uint16_t name_len = 0;
  if (!rd->Get(&dtype) || !rd->Get(&op) || !rd->Get(&gpu) || !rd->Get(&t->compression) ||
      !rd->Get(&t->compression_ppm) || !rd->Get(&t->count) || !rd->Get(&name_len) || !rd->Text(name_len, &t->name))
    return Bad("truncated at tensor " + std::to_string(i));
  const std::string what = "tensor " + std::to_string(i);
  if (t->name.empty() || t->name.size() > SYNCD_MAX_NAME || t->name.find('\0') != std::string::npos)
    return Bad(what + ": a name must have 1.." + std::to_string(SYNCD_MAX_NAME) + " bytes and no NUL");
  if (dtype >= SYNCD_DTYPE_COUNT || op >= SYNCD_REDUCE_OP_COUNT || gpu > 1 || t->compression >= SYNCD_COMPRESSION_COUNT ||
      t->compression_ppm > 1'000'000 || t->count == 0)
    return Bad(what + " ('" + t->name + "'): dtype " + std::to_string(dtype) + ", op " + std::to_string(op) +
               ", memory " + std::to_string(gpu) + ", compression " + std::to_string(t->compression) + " (" +
               std::to_string(t->compression_ppm) + "), " + std::to_string(t->count) + " elements is not a plan's");
  t->dtype = syncd_dtype(dtype);
  t->op = syncd_reduce_op(op);
  t->gpu = gpu == 1;
  return Status::Ok();
}

}  // namespace

std::string EncodePlan(const TopoPlan& plan) {
  ByteWriter w;
  w.Put(kPlanMagic);
  w.Put(kPlanVersion);
  w.Put(uint32_t(plan.tensors.size()));
  w.Put(uint32_t(plan.groups()));
  for (const PlannedTensor& t : plan.tensors) {
    w.Put(uint8_t(t.dtype));
    w.Put(uint8_t(t.op));
    w.Put(uint8_t(t.gpu));
    w.Put(t.compression);
    w.Put(t.compression_ppm);
    w.Put(t.count);
    w.Put(uint16_t(t.name.size()));
    w.Bytes(t.name);
  }
  for (uint32_t b : plan.group_begin) w.Put(b);
  return w.Take();
}

StatusOr<TopoPlan> DecodePlan(const char* data, size_t bytes) {
  ByteReader rd(data, bytes);
  uint32_t magic = 0, version = 0, tensors = 0, groups = 0;
  if (!rd.Get(&magic) || !rd.Get(&version) || !rd.Get(&tensors) || !rd.Get(&groups))
    return Bad("truncated header (" + std::to_string(bytes) + " bytes)");
  if (magic != kPlanMagic) return Bad("not a plan (bad magic)");
  if (version != kPlanVersion)
    return Bad("encoding version " + std::to_string(version) + ", this daemon reads " + std::to_string(kPlanVersion));
  // Refuse counts the bytes cannot hold before allocating.
  if (tensors > abi::kGraphMaxOps || groups > tensors || (tensors > 0 && groups == 0) ||
      rd.left() < uint64_t(tensors) * kTensorFixedBytes + uint64_t(groups) * 4)
    return Bad(std::to_string(tensors) + " tensors in " + std::to_string(groups) + " groups do not fit in " +
               std::to_string(bytes) + " bytes");
  TopoPlan plan;
  plan.tensors.resize(tensors);
  std::unordered_set<std::string> names;
  for (uint32_t i = 0; i < tensors; ++i) {
    if (Status st = DecodeTensor(&rd, i, &plan.tensors[i]); !st.ok()) return st;
    if (!names.insert(plan.tensors[i].name).second) return Bad("tensor '" + plan.tensors[i].name + "' twice");
  }
  plan.group_begin.resize(groups);
  for (uint32_t g = 0; g < groups; ++g) {
    if (!rd.Get(&plan.group_begin[g])) return Bad("truncated at group " + std::to_string(g));
    const bool ordered = g == 0 ? plan.group_begin[g] == 0 : plan.group_begin[g] > plan.group_begin[g - 1];
    if (!ordered || plan.group_begin[g] >= tensors)
      return Bad("group " + std::to_string(g) + " begins at tensor " + std::to_string(plan.group_begin[g]));
  }
  if (rd.left() != 0) return Bad(std::to_string(rd.left()) + " trailing bytes");
  plan.hash = PlanHash(plan);
  return plan;
}

}  // namespace syncd
