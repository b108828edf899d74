#include "daemon/core/timeline.h"

#include <algorithm>

namespace syncd {

void Timeline::Start(uint32_t node, Sink sink) {
  node_ = node;
  sink_ = std::move(sink);
  seq_ = events_ = dropped_ = cycles_ = groups_ = 0;
  names_.clear();
  chunk_ = std::make_shared<TraceChunk>();
  used_ = 0;
  in_chunk_ = 0;
  on_ = true;
}

void Timeline::Stop() {
  if (!on_) return;
  Rotate(/*last=*/true);
  on_ = false;
  sink_ = nullptr;
  chunk_.reset();
  names_.clear();
}

void Timeline::Flush() {
  if (on_ && used_ > 0) Rotate();
}

uint32_t Timeline::Name(const std::string& name) {
  if (!on_) return 0;
  const auto it = names_.find(name);
  if (it != names_.end()) return it->second;
  const size_t text = std::min<size_t>(name.size(), 1024);
  const size_t padded = (text + 7) / 8 * 8;
  if (used_ + sizeof(TraceEvent) + padded > TraceChunk::kPayload) Rotate();
  const uint32_t id = uint32_t(names_.size() + 1);
  names_.emplace(name, id);
  TraceEvent e;
  e.kind = TraceKind::kName;
  e.name = id;
  e.bytes = text;
  char* at = chunk_->bytes + sizeof(TraceChunk::Header) + used_;
  memcpy(at, &e, sizeof(e));
  memcpy(at + sizeof(e), name.data(), text);
  memset(at + sizeof(e) + text, 0, padded - text);
  used_ += sizeof(e) + padded;
  return id;
}

void Timeline::Rotate(bool last) {
  const uint64_t events = events_ - in_chunk_;  // recorded into this chunk
  in_chunk_ = events_;
  TraceChunk::Header& h = chunk_->header();
  h = TraceChunk::Header{};
  h.used = uint32_t(used_);
  h.node = node_;
  h.last = last ? 1 : 0;
  h.seq = seq_++;
  h.dropped = dropped_;
  if (!sink_(std::move(chunk_))) {
    // Its events are lost, and with them the names it defined: the next chunk defines them again.
    dropped_ += events;
    names_.clear();
  }
  chunk_ = std::make_shared<TraceChunk>();
  used_ = 0;
}

}  // namespace syncd
