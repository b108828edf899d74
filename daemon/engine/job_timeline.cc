#include "daemon/engine/job_timeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "daemon/base/version.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {

using Kind = ControlMessage::Kind;

// How long node 0 waits, once it stopped, for the other nodes' last chunks.
constexpr uint64_t kLastChunkWaitNs = 2'000'000'000;

}  // namespace

JobTimeline::~JobTimeline() { EndJob(); }

void JobTimeline::BeginJob(Links links) {
  EndJob();
  links_ = std::move(links);
  const uint32_t n = nodes();
  held_.assign(n, {});
  clocks_.assign(n, {});
  in_.assign(n, nullptr);
  recvs_.assign(n, 0);
  last_in_.assign(n, false);
}

void JobTimeline::EndJob() {
  if (recorder_.on()) StopHere();
  recorder_.Stop();
  if (writer_) {
    writer_->Finish();
    closing_.push_back(std::move(writer_));
  }
  for (CommHandle& h : recvs_)
    if (h != 0 && links_.transport) {
      links_.transport->Cancel(h);
      h = 0;
    }
  for (Outgoing& o : out_) links_.transport->Cancel(o.handle);
  out_.clear();
  unsent_.clear();
  closing_deadline_ns_ = 0;
  forward_.reset();
  closing_.clear();  // each writes what it holds, then closes its file
  links_ = Links{};
}

Status JobTimeline::Start(const std::string& path, double seconds, uint64_t cycles) {
  if (path.empty()) return InvalidArgument("timeline: no file given");
  if (seconds < 0 || !std::isfinite(seconds)) return InvalidArgument("timeline: --seconds must be 0 or more");
  if (recorder_.on()) {
    if (path != path_)
      return Status(SYNCD_ERR_INVALID, "a timeline is already being written to '" + path_ + "': stop it first");
    return Status::Ok();  // every rank may ask (hvd.start_timeline): the first one starts it
  }
  if (node() == 0) return StartHere(path, seconds, cycles);
  // Node 0 writes the file and tells every node, this one included; until every node has started
  // the job (a rank may ask right after hvd.init()), the request waits here (Poll sends it).
  forward_ = ControlMessage{Kind::kTimelineStart, links_.job, cycles, path, int32_t(std::min(seconds * 1e3, 2e9))};
  Forward();
  return Status::Ok();
}

Status JobTimeline::Stop() {
  if (node() == 0) {
    if (recorder_.on()) StopHere();
    return Status::Ok();
  }
  forward_ = ControlMessage{Kind::kTimelineStop, links_.job, 0, ""};
  Forward();
  return Status::Ok();
}

void JobTimeline::Forward() {
  if (forward_ && links_.tell && links_.tell(0, *forward_)) forward_.reset();
}

Status JobTimeline::StartHere(const std::string& path, double seconds, uint64_t cycles) {
  const uint64_t now = abi::MonotonicNs();
  if (node() == 0) {
    if (writer_ || !closing_.empty()) {
      for (auto& w : closing_) w.reset();  // the previous file first: it is complete once this returns
      closing_.clear();
      if (writer_) writer_.reset();
    }
    StatusOr<std::unique_ptr<TimelineWriter>> w = TimelineWriter::Open(path, max_bytes_, now, owner_);
    if (!w.ok()) return w.status();
    writer_ = std::move(*w);
    stop_at_ns_ = seconds > 0 ? now + uint64_t(seconds * 1e9) : 0;
    stop_at_cycles_ = cycles;
    for (auto& h : held_) h.clear();
    std::fill(last_in_.begin(), last_in_.end(), false);
    for (auto& c : clocks_) c = ClockEstimate{};
    clocks_.resize(nodes());
    if (nodes() > 1 && links_.tell) {
      told_ = links_.tell(-1, ControlMessage{Kind::kTimelineStart, links_.job, cycles, path, 0});
      for (uint32_t p = 1; p < nodes(); ++p)
        if (recvs_[p] == 0) PostReceive(p);
      last_ping_ns_ = 0;
      Ping(now);
    }
    spdlog::info("timeline: writing {} for the whole job", path);
  }
  path_ = path;
  start_ns_ = now;
  last_flush_ns_ = now;
  recorder_.Start(node(), [this](std::shared_ptr<TraceChunk> c) { return Sink(std::move(c)); });
  TraceEvent e;
  e.t0 = e.t1 = now;
  e.kind = TraceKind::kMark;
  e.name = recorder_.Name("timeline started on node " + std::to_string(node()));
  recorder_.Record(e);
  return Status::Ok();
}

void JobTimeline::StopHere() {
  if (!recorder_.on()) return;
  recorder_.Stop();  // its last chunk goes to the sink
  if (node() == 0) {
    if (nodes() > 1 && links_.tell) links_.tell(-1, ControlMessage{Kind::kTimelineStop, links_.job, 0, ""});
    closing_deadline_ns_ = abi::MonotonicNs() + kLastChunkWaitNs;
    last_in_[0] = true;
  }
}

bool JobTimeline::Sink(std::shared_ptr<TraceChunk> chunk) {
  if (node() == 0) {
    if (!writer_) return false;
    if (chunk->header().last) last_in_[0] = true;
    return writer_->Push(std::move(chunk));
  }
  if (out_.size() >= kChunksInFlight) {
    if (unsent_.size() >= kChunksInFlight) return false;
    unsent_.push_back(std::move(chunk));
    return true;
  }
  Outgoing& o = out_.emplace_back();
  o.chunk = std::move(chunk);
  o.handle = links_.transport->Send(0, kTimelineTag, o.chunk->bytes, TraceChunk::kBytes, o.chunk);
  return true;
}

void JobTimeline::PostReceive(uint32_t peer) {
  in_[peer] = std::make_shared<TraceChunk>();
  recvs_[peer] = links_.transport->Recv(peer, kTimelineTag, in_[peer]->bytes, TraceChunk::kBytes, in_[peer]);
}

bool JobTimeline::PollTransfers() {
  if (!links_.transport) return false;
  bool did = false;
  for (auto it = out_.begin(); it != out_.end();) {
    Status err;
    if (links_.transport->Test(it->handle, &err) == CommState::kPending) {
      ++it;
      continue;
    }
    it = out_.erase(it);
    did = true;
  }
  while (!unsent_.empty() && out_.size() < kChunksInFlight) {
    Outgoing& o = out_.emplace_back();
    o.chunk = std::move(unsent_.front());
    unsent_.pop_front();
    o.handle = links_.transport->Send(0, kTimelineTag, o.chunk->bytes, TraceChunk::kBytes, o.chunk);
  }
  if (node() != 0) return did;
  for (uint32_t p = 1; p < recvs_.size(); ++p) {
    if (recvs_[p] == 0) continue;
    Status err;
    const CommState s = links_.transport->Test(recvs_[p], &err);
    if (s == CommState::kPending) continue;
    recvs_[p] = 0;
    did = true;
    if (s == CommState::kFailed) continue;  // the node is lost: the job ends, its events with it
    std::shared_ptr<TraceChunk> c = std::move(in_[p]);
    if (c->header().node == p && c->header().magic == TraceChunk::Header{}.magic &&
        c->header().version == kWireVersion) {
      if (c->header().last) last_in_[p] = true;
      held_[p].push_back(std::move(c));
    }
    PostReceive(p);
  }
  for (uint32_t p = 1; p < held_.size() && writer_; ++p)
    while (!held_[p].empty() && (clocks_[p].samples > 0 || closing_deadline_ns_ != 0)) {
      writer_->Push(std::move(held_[p].front()));
      held_[p].pop_front();
    }
  return did;
}

void JobTimeline::Ping(uint64_t now_ns) {
  if (node() != 0 || nodes() < 2 || !links_.tell) return;
  const uint32_t burst = clocks_.size() > 1 && clocks_[1].samples >= kPingWindow ? 1 : 0;
  if (now_ns - last_ping_ns_ < (burst ? kPingPeriodNs : kPingPeriodNs / 50)) return;
  last_ping_ns_ = now_ns;
  links_.tell(-1, ControlMessage{Kind::kClockPing, links_.job, abi::MonotonicNs(), ""});
}

void JobTimeline::Receive(uint32_t from, const ControlMessage& m) {
  switch (m.kind) {
    case Kind::kTimelineStart:
      if (node() == 0) {
        const Status st = Start(m.text, double(m.code) / 1e3, m.cycle);
        if (!st.ok()) spdlog::warn("timeline start asked by node {}: {}", from, st.message());
      } else if (from == 0 && !recorder_.on()) {
        (void)StartHere(m.text, 0, 0);
      }
      break;
    case Kind::kTimelineStop:
      if (node() == 0) (void)Stop();
      else if (from == 0) StopHere();
      break;
    case Kind::kClockPing:
      links_.tell(int32_t(from), ControlMessage{Kind::kClockPong, links_.job, m.cycle, std::to_string(abi::MonotonicNs())});
      break;
    case Kind::kClockPong: {
      if (node() != 0 || from >= clocks_.size()) break;
      const uint64_t t2 = abi::MonotonicNs(), t0 = m.cycle;
      const int64_t t1 = std::strtoll(m.text.c_str(), nullptr, 10);
      if (t2 < t0 || t1 <= 0) break;
      ClockEstimate& c = clocks_[from];
      c.window.emplace_back(t1 - int64_t(t0 / 2 + t2 / 2), (t2 - t0) / 2);
      if (c.window.size() > kPingWindow) c.window.pop_front();
      const auto best = std::min_element(c.window.begin(), c.window.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
      ++c.samples;
      if (best->second != c.error_ns || best->first != c.offset_ns) {
        c.offset_ns = best->first;
        c.error_ns = best->second;
        if (writer_) writer_->SetClock(from, c.offset_ns, c.error_ns);
      }
      break;
    }
    default:
      break;
  }
}

bool JobTimeline::Poll(uint64_t now_ns) {
  bool did = PollTransfers();
  if (forward_) Forward();
  for (size_t i = 0; i < closing_.size();)
    if (closing_[i]->done()) closing_.erase(closing_.begin() + long(i));
    else ++i;
  if (recorder_.on()) {
    if (now_ns - last_flush_ns_ > kFlushPeriodNs) {
      recorder_.Flush();
      last_flush_ns_ = now_ns;
      did = true;
    }
    // The other nodes had not all started the job when it began: tell them now.
    if (node() == 0 && !told_ && links_.tell)
      told_ = links_.tell(-1, ControlMessage{Kind::kTimelineStart, links_.job, 0, path_, 0});
    // --cycles: coordination cycles that ran tensors (one node: groups executed).
    const uint64_t cycles = nodes() > 1 ? recorder_.cycles() : recorder_.groups();
    if (node() == 0 && ((stop_at_ns_ && now_ns >= stop_at_ns_) || (stop_at_cycles_ && cycles >= stop_at_cycles_))) {
      spdlog::info("timeline: {} reached, stopping", stop_at_ns_ && now_ns >= stop_at_ns_ ? "--seconds" : "--cycles");
      StopHere();
      did = true;
    }
    Ping(now_ns);
  }
  if (node() == 0 && writer_ && closing_deadline_ns_ != 0) {
    const bool all = std::all_of(last_in_.begin(), last_in_.end(), [](bool b) { return b; });
    bool held = false;
    for (const auto& h : held_) held = held || !h.empty();
    if ((all && !held) || now_ns >= closing_deadline_ns_) {
      for (auto& h : held_) h.clear();
      spdlog::info("timeline: {} written ({} events)", path_, writer_->stats().events);
      writer_->Finish();
      closing_.push_back(std::move(writer_));
      closing_deadline_ns_ = 0;
      did = true;
    }
  }
  return did;
}

TimelineState JobTimeline::State() const {
  TimelineState s;
  s.on = recorder_.on() || writer_ != nullptr;
  s.path = path_;
  s.events = recorder_.events();
  s.dropped = recorder_.dropped();
  const TimelineWriter* w = writer_ ? writer_.get() : (closing_.empty() ? nullptr : closing_.back().get());
  if (w) {
    const TimelineWriter::Stats ws = w->stats();
    s.written = ws.events;
    s.bytes = ws.bytes;
    s.cut = ws.cut_by_cap;
  }
  for (const ClockEstimate& c : clocks_)
    s.clocks.emplace_back(double(c.offset_ns) / 1e3, c.error_ns == UINT64_MAX ? -1.0 : double(c.error_ns) / 1e3);
  return s;
}

}  // namespace syncd
