// Ring entries (submission.h): a SubmitEntry and the arena it points into are all the client's.
// The first 360 bytes (sizeof(SubmitEntry)) are the entry, the rest is written at the start of a 1 MiB arena (graphs,
// GPU descriptors and tensor data live there).
#include <cstring>
#include <optional>

#include "daemon/engine/submission.h"

namespace {

syncd::ClientSegment& Segment() {
  static syncd::ClientSegment* segment = [] {
    auto s = syncd::ClientSegment::Create(1, 8, 1 << 20, 1 << 20);
    if (!s.ok()) __builtin_trap();
    return new syncd::ClientSegment(std::move(s.value()));
  }();
  return *segment;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncd::abi::SubmitEntry e{};
  memcpy(&e, data, std::min(size, sizeof(e)));
  syncd::ClientSegment& seg = Segment();
  char* arena = seg.ArenaRange(0, seg.arena_bytes());
  // The arena is zero but for this input's bytes, so every run replays alone (splits or shapes an
  // earlier input left there once made a finding that its saved input did not reproduce).
  static size_t written = 0;
  memset(arena, 0, written);
  written = size > sizeof(e) ? std::min(size - sizeof(e), size_t(seg.arena_bytes())) : 0;
  if (written > 0) memcpy(arena, data + sizeof(e), written);
  const syncd::Submitter who{1, 3, 1, &seg, 4, 64 << 20};
  std::optional<syncd::abi::GpuDescriptor> gpu;
  syncd::StatusOr<syncd::Request> r = syncd::ParseSubmission(e, who, &gpu);
  if (r.ok() && !r->gpu && r->bytes > 0) {
    // An accepted host tensor lies inside the arena, all of it.
    if (r->data < arena || r->data + r->bytes > arena + seg.arena_bytes()) __builtin_trap();
    volatile char last = r->data[r->bytes - 1];
    (void)last;
  }
  if (!r.ok() && r.status().message().empty()) __builtin_trap();  // every refusal says why
  return 0;
}
