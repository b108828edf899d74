#include "daemon/shm/client_segment.h"

#include <cstring>

#include "proto/doorbell.h"

namespace syncd {

StatusOr<ClientSegment> ClientSegment::Create(uint32_t client_id, uint32_t ring_entries, uint64_t arena_bytes,
                                              uint64_t result_bytes) {
  const abi::SegmentLayout layout = abi::ComputeLayout(ring_entries, arena_bytes, result_bytes);
  ClientSegment s;
  SYNCD_ASSIGN_OR_RETURN(SharedMapping mapping,
                         SharedMapping::Create("syncd-client-" + std::to_string(client_id), layout.total_bytes));
  s.mapping_ = std::make_shared<SharedMapping>(std::move(mapping));
  char* base = s.mapping_->data();
  auto* h = new (base) abi::SegmentHeader();
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

void ClientSegment::Flush() {
  while (!overflow_.empty()) {
    abi::CompletionEntry* slot = completion_.Reserve();
    if (slot == nullptr) break;
    const Pending& p = overflow_.front();
    Publish(slot, p.handle, p.status, p.message, p.result_offset);
    overflow_.pop_front();
  }
  if (unrung_) abi::Ring(&header()->client_doorbell);
  unrung_ = false;
}

}  // namespace syncd
