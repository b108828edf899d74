#include "daemon/core/link_pacer.h"

#include <algorithm>

namespace syncd {

bool LinkPacer::MayPost(uint64_t job, uint32_t weight, uint64_t bytes, uint64_t now_ns) {
  if (bytes < kSmallBytes) return true;
  const double w = std::max<uint32_t>(weight, 1);
  Flow& mine = flows_[job];
  // The others' least virtual time, among the active ones.
  double least = 0;
  bool others = false;
  for (const auto& [id, f] : flows_) {
    if (id == job || !Active(f, now_ns)) continue;
    least = others ? std::min(least, f.virtual_bytes) : f.virtual_bytes;
    others = true;
  }
  if (!Active(mine, now_ns) && others) mine.virtual_bytes = std::max(mine.virtual_bytes, least);
  mine.seen = true;
  mine.last_try_ns = now_ns;
  const double step = double(bytes) / w;
  if (others && mine.virtual_bytes > least) {
    ++held_;
    ++mine.held;
    return false;
  }
  mine.virtual_bytes += step;
  return true;
}

}  // namespace syncd
