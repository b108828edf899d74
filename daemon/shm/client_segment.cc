#include "daemon/shm/client_segment.h"

#include <atomic>
#include <cstring>
#include <iterator>

#include "proto/doorbell.h"

namespace syncd {

namespace {

// Writes the header Create makes for `layout` at `at` (the rings empty).
abi::SegmentHeader* WriteHeader(void* at, const abi::SegmentLayout& layout, uint32_t client_id, uint32_t ring_entries) {
  auto* h = new (at) abi::SegmentHeader();
  h->magic = abi::kMagic;
  h->version = abi::kVersion;
  h->segment_bytes = layout.total_bytes;
  h->ring_entries = ring_entries;
  h->client_id = client_id;
  h->submit_ring_offset = layout.submit_ring_offset;
  h->completion_ring_offset = layout.completion_ring_offset;
  h->message_offset = layout.message_offset;
  h->arena_offset = layout.arena_offset;
  h->arena_bytes = layout.result_offset - layout.arena_offset;
  h->result_offset = layout.result_offset;
  h->result_bytes = layout.total_bytes - layout.result_offset;
  return h;
}

// Whether the header at `base` (copied first: its client may write it meanwhile) has the layout
// WriteHeader writes for `layout`.
bool HasLayout(const char* base, const abi::SegmentLayout& layout, uint32_t ring_entries) {
  alignas(abi::SegmentHeader) unsigned char seen_bytes[sizeof(abi::SegmentHeader)];
  alignas(abi::SegmentHeader) unsigned char want_bytes[sizeof(abi::SegmentHeader)];
  memcpy(seen_bytes, base, sizeof(seen_bytes));
  const auto& h = *reinterpret_cast<const abi::SegmentHeader*>(seen_bytes);
  const auto& w = *WriteHeader(want_bytes, layout, 0, ring_entries);
  return h.magic == w.magic && h.version == w.version && h.segment_bytes == w.segment_bytes &&
         h.ring_entries == w.ring_entries && h.submit_ring_offset == w.submit_ring_offset &&
         h.completion_ring_offset == w.completion_ring_offset && h.message_offset == w.message_offset &&
         h.arena_offset == w.arena_offset && h.arena_bytes == w.arena_bytes && h.result_offset == w.result_offset &&
         h.result_bytes == w.result_bytes;
}

}  // namespace

StatusOr<ClientSegment> ClientSegment::Create(uint32_t client_id, uint32_t ring_entries, uint64_t arena_bytes,
                                              uint64_t result_bytes) {
  const abi::SegmentLayout layout = abi::ComputeLayout(ring_entries, arena_bytes, result_bytes);
  SYNCD_ASSIGN_OR_RETURN(SharedMapping mapping,
                         SharedMapping::Create("syncd-client-" + std::to_string(client_id), layout.total_bytes));
  WriteHeader(mapping.data(), layout, client_id, ring_entries);
  return Over(std::move(mapping), layout, ring_entries);
}

StatusOr<ClientSegment> ClientSegment::Adopt(int fd, uint32_t client_id, uint32_t ring_entries, uint64_t arena_bytes,
                                             uint64_t result_bytes) {
  const abi::SegmentLayout layout = abi::ComputeLayout(ring_entries, arena_bytes, result_bytes);
  SYNCD_ASSIGN_OR_RETURN(SharedMapping mapping, SharedMapping::Adopt(fd, layout.total_bytes));
  if (!HasLayout(mapping.data(), layout, ring_entries))
    return Status(SYNCD_ERR_INVALID, "the segment handed back has another layout than this daemon makes (its "
                                     "--ring-entries, --arena-size or --result-area-size differ); attach afresh");
  // The rings start empty, the header as Create leaves it; the arena is left as it is.
  WriteHeader(mapping.data(), layout, client_id, ring_entries);
  return Over(std::move(mapping), layout, ring_entries);
}

ClientSegment ClientSegment::Over(SharedMapping mapping, const abi::SegmentLayout& layout, uint32_t ring_entries) {
  ClientSegment s;
  s.mapping_ = std::make_shared<SharedMapping>(std::move(mapping));
  char* base = s.mapping_->data();
  auto* h = reinterpret_cast<abi::SegmentHeader*>(base);
  s.submit_ = abi::RingView<abi::SubmitEntry>(
      &h->submit, reinterpret_cast<abi::SubmitEntry*>(base + layout.submit_ring_offset), ring_entries);
  s.completion_ = abi::RingView<abi::CompletionEntry>(
      &h->completion, reinterpret_cast<abi::CompletionEntry*>(base + layout.completion_ring_offset), ring_entries);
  s.messages_ = base + layout.message_offset;
  s.arena_ = base + layout.arena_offset;
  s.arena_bytes_ = h->arena_bytes;
  s.results_ = std::make_shared<ResultArea>(s.mapping_, base, h->result_offset, h->result_bytes);
  return s;
}

void ClientSegment::LetGo() const {
  header()->let_go.store(1, std::memory_order_release);
  abi::Ring(&header()->client_doorbell);
}

void ClientSegment::PublishJob(uint32_t membership, uint32_t job_nodes, std::span<const uint32_t> set_nodes) const {
  abi::JobView& v = header()->job;
  const uint32_t seq = v.set_nodes_seq.load(std::memory_order_relaxed);
  v.set_nodes_seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);  // odd before any of the words changes
  uint64_t words[abi::kMaxListedNodes / 64] = {};
  const auto add = [&](uint32_t node) {
    if (node < abi::kMaxListedNodes) words[node / 64] |= uint64_t{1} << (node % 64);
  };
  if (set_nodes.empty())
    for (uint32_t n = 0; n < job_nodes; ++n) add(n);
  for (uint32_t n : set_nodes) add(n);
  for (size_t w = 0; w < std::size(words); ++w) v.set_nodes[w].store(words[w], std::memory_order_relaxed);
  v.job_nodes.store(job_nodes, std::memory_order_relaxed);
  v.membership.store(membership, std::memory_order_release);
  v.set_nodes_seq.store(seq + 2, std::memory_order_release);
}

std::optional<abi::SubmitEntry> ClientSegment::PopSubmission(bool* corrupt) {
  const abi::SubmitEntry* e = submit_.Front(corrupt);
  if (e == nullptr) return std::nullopt;
  abi::SubmitEntry copy;
  memcpy(&copy, e, sizeof(copy));
  submit_.Pop();
  return copy;
}

char* ClientSegment::ArenaRange(uint64_t offset, uint64_t bytes) const {
  const uint64_t size = arena_bytes();
  if (offset > size || bytes > size - offset) return nullptr;
  return arena_ + offset;
}

void ClientSegment::Complete(uint64_t handle, int status, const std::string& message, uint64_t result_offset) {
  // Straight into the ring when nothing waits before it (no queueing, no allocation).
  if (overflow_.empty())
    if (abi::CompletionEntry* slot = completion_.Reserve()) return Publish(slot, handle, status, message, result_offset);
  overflow_.push_back(Pending{handle, status, message, result_offset});
}

void ClientSegment::Publish(abi::CompletionEntry* slot, uint64_t handle, int status, const std::string& message,
                            uint64_t result_offset) {
  const uint32_t index = completion_.ReservedIndex() & (completion_.capacity() - 1);
  const size_t n = std::min(message.size(), abi::kMessageBytes);
  memcpy(messages_ + size_t(index) * abi::kMessageBytes, message.data(), n);
  slot->handle = handle;
  slot->status = status;
  slot->message_bytes = uint32_t(n);
  slot->result_offset = result_offset;
  completion_.Publish();
  unrung_ = true;
}

bool ClientSegment::Flush() {
  while (!overflow_.empty()) {
    abi::CompletionEntry* slot = completion_.Reserve();
    if (slot == nullptr) break;
    const Pending& p = overflow_.front();
    Publish(slot, p.handle, p.status, p.message, p.result_offset);
    overflow_.pop_front();
  }
  const bool woke = unrung_ && abi::Ring(&header()->client_doorbell);
  unrung_ = false;
  return woke;
}

}  // namespace syncd
