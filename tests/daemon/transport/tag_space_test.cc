// transport/tag_space.h: the uses of the job's 48 tag bits never meet.
#include "daemon/transport/tag_space.h"

#include <gtest/gtest.h>

namespace syncd {
namespace {

uint64_t Slot(uint64_t tag) { return tag >> kSetSlotShift; }
uint64_t Cycle(uint64_t transport_tag) { return (transport_tag >> (kCycleShift + kSliceBits)) & 1023; }

TEST(TagSpace, CollectivesStayBelowTheSlotBitsWhateverTheirSequence) {
  for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{511}, uint64_t{512}, uint64_t{1} << 40, ~uint64_t{0}}) {
    const uint64_t highest_slice = 255;
    for (uint64_t tag : {NegotiationCycleTag(seq) + 4, GroupTag(NegotiationCycleTag(seq), seq) | 0xfff,
                         GroupTag(TopoCycleTag(seq), seq) | 0xfff, PartialRoundTag(seq, 1)}) {
      EXPECT_EQ(Slot(SliceTag(tag, highest_slice)), 0u) << std::hex << tag;
      EXPECT_EQ(SliceTag(tag, highest_slice) & ~kTagMask, 0u);
    }
  }
}

TEST(TagSpace, NegotiationTopoAndPartialRoundsUseTheirOwnCycleNumbers) {
  for (uint64_t seq = 0; seq < 5000; seq += 7) {
    EXPECT_LT(Cycle(SliceTag(NegotiationCycleTag(seq))), kTopoTagCycleBit);
    const uint64_t topo = Cycle(SliceTag(TopoCycleTag(seq)));
    EXPECT_GE(topo, kTopoTagCycleBit);
    EXPECT_LT(topo, kPartialCycle);
    EXPECT_EQ(Cycle(SliceTag(PartialRoundTag(seq, 0))), kPartialCycle);
  }
  // Neighbouring cycles never share a base; group tags never reuse the agreement's group 0.
  EXPECT_NE(NegotiationCycleTag(511), NegotiationCycleTag(512));
  EXPECT_NE(TopoCycleTag(510), TopoCycleTag(511));
  for (uint64_t g : {uint64_t{0}, uint64_t{4094}, uint64_t{4095}, uint64_t{1} << 33})
    EXPECT_NE((GroupTag(0, g) >> kGroupShift) & 0xfff, 0u) << g;
  // Partial rounds: header and data of one round differ, and rounds differ from their neighbours.
  EXPECT_NE(PartialRoundTag(7, 0), PartialRoundTag(7, 1));
  EXPECT_NE(PartialRoundTag(7, 1), PartialRoundTag(8, 0));
}

TEST(TagSpace, TheJobsOwnTagsAreDistinctAndInSlot63AbovePointToPointData) {
  const uint64_t control[] = {kControlTag, kJoinHelloTag, kJoinReadyTag, kTimelineTag, kP2pHeaderTag, kHealthTag};
  for (size_t i = 0; i < std::size(control); ++i) {
    EXPECT_EQ(Slot(control[i]), 63u);
    EXPECT_GT(control[i], P2pDataTag(kP2pDataSeqMask));
    for (size_t j = 0; j < i; ++j) EXPECT_NE(control[i], control[j]);
  }
  EXPECT_EQ(Slot(P2pDataTag(0)), 63u);
  EXPECT_EQ(P2pDataTag(kP2pDataSeqMask + 1), P2pDataTag(0));  // the sequence wraps inside its range
  // A process set's control tags: its slot, then ones; never the job's.
  for (uint64_t slot = 1; slot <= 62; ++slot) {
    const uint64_t set_control = (kControlTag & ~kSetSlotMask) | (slot << kSetSlotShift);
    EXPECT_EQ(Slot(set_control), slot);
  }
}

}  // namespace
}  // namespace syncd
