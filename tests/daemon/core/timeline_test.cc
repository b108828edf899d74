#include "daemon/core/timeline.h"

#include <gtest/gtest.h>

#include <map>

namespace syncd {
namespace {

// What a sink received: each chunk's events, with the names they define.
struct Received {
  std::vector<std::shared_ptr<TraceChunk>> chunks;
  bool refuse_next = false;

  Timeline::Sink Sink() {
    return [this](std::shared_ptr<TraceChunk> c) {
      if (refuse_next) {
        refuse_next = false;
        return false;
      }
      chunks.push_back(std::move(c));
      return true;
    };
  }
  // Events and name definitions of every chunk, in order.
  void Read(std::vector<TraceEvent>* events, std::map<uint32_t, std::string>* names) const {
    for (const auto& c : chunks) {
      const char* p = c->bytes + sizeof(TraceChunk::Header);
      const char* end = p + c->header().used;
      while (p < end) {
        TraceEvent e;
        memcpy(&e, p, sizeof(e));
        p += sizeof(e);
        if (e.kind == TraceKind::kName) {
          (*names)[e.name] = std::string(p, e.bytes);
          p += (e.bytes + 7) / 8 * 8;
        } else {
          events->push_back(e);
        }
      }
    }
  }
};

TEST(TimelineTest, OffRecordsNothingAndNamesNothing) {
  Timeline t;
  EXPECT_FALSE(t.on());
  EXPECT_EQ(t.Name("grad"), 0u);
  t.Record(TraceEvent{});
  EXPECT_EQ(t.events(), 0u);
}

TEST(TimelineTest, EventsGoOutInFullChunksNumberedInOrderWithNamesDefinedOnce) {
  Received got;
  Timeline t;
  t.Start(3, got.Sink());
  const uint32_t a = t.Name("grad.a"), b = t.Name("grad.b");
  EXPECT_NE(a, b);
  EXPECT_EQ(t.Name("grad.a"), a);
  constexpr uint32_t kEvents = 5000;  // several chunks
  for (uint32_t i = 0; i < kEvents; ++i) {
    TraceEvent e;
    e.kind = TraceKind::kSubmit;
    e.t0 = e.t1 = i;
    e.name = i % 2 ? a : b;
    e.rank = int32_t(i % 4);
    t.Record(e);
  }
  t.Stop();
  ASSERT_GT(got.chunks.size(), 3u);
  for (size_t i = 0; i < got.chunks.size(); ++i) {
    EXPECT_EQ(got.chunks[i]->header().seq, i);
    EXPECT_EQ(got.chunks[i]->header().node, 3u);
    EXPECT_EQ(got.chunks[i]->header().last, i + 1 == got.chunks.size() ? 1u : 0u);
  }
  std::vector<TraceEvent> events;
  std::map<uint32_t, std::string> names;
  got.Read(&events, &names);
  ASSERT_EQ(events.size(), kEvents);
  for (uint32_t i = 0; i < kEvents; ++i) EXPECT_EQ(events[i].t0, i);
  EXPECT_EQ(names.size(), 2u);
  EXPECT_EQ(names[a], "grad.a");
  EXPECT_EQ(names[b], "grad.b");
  EXPECT_EQ(t.dropped(), 0u);
}

TEST(TimelineTest, AChunkTheSinkRefusesIsCountedAsDroppedAndItsNamesAreDefinedAgain) {
  Received got;
  Timeline t;
  t.Start(0, got.Sink());
  TraceEvent e;
  e.kind = TraceKind::kSubmit;
  e.name = t.Name("grad");
  for (int i = 0; i < 10; ++i) t.Record(e);
  got.refuse_next = true;
  t.Flush();  // refused: 10 events and the definition of "grad" are lost
  EXPECT_EQ(t.dropped(), 10u);
  e.name = t.Name("grad");
  t.Record(e);
  t.Stop();
  std::vector<TraceEvent> events;
  std::map<uint32_t, std::string> names;
  got.Read(&events, &names);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(names.at(events[0].name), "grad") << "the event's name is defined in what reached the sink";
  EXPECT_EQ(got.chunks.back()->header().dropped, 10u);
}

TEST(TimelineTest, CyclesAndGroupsOfTheGlobalSetAreCounted) {
  Received got;
  Timeline t;
  t.Start(0, got.Sink());
  TraceEvent e;
  e.kind = TraceKind::kCycle;
  t.Record(e);
  t.Record(e);
  e.set = 2;  // another set's cycle
  t.Record(e);
  e.kind = TraceKind::kGroup;
  e.set = 0;
  t.Record(e);
  EXPECT_EQ(t.cycles(), 2u);
  EXPECT_EQ(t.groups(), 1u);
}

}  // namespace
}  // namespace syncd
