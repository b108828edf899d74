#include "proto/shm_abi.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace syncd::abi {
namespace {

TEST(SegmentLayout, RegionsAreOrderedAlignedAndDisjoint) {
  for (uint32_t entries : {2u, 64u, 1024u}) {
    const SegmentLayout l = ComputeLayout(entries, 1 << 20, 1 << 16);
    EXPECT_GE(l.submit_ring_offset, sizeof(SegmentHeader));
    EXPECT_GE(l.completion_ring_offset, l.submit_ring_offset + entries * sizeof(SubmitEntry));
    EXPECT_GE(l.message_offset, l.completion_ring_offset + entries * sizeof(CompletionEntry));
    EXPECT_GE(l.arena_offset, l.message_offset + entries * kMessageBytes);
    EXPECT_EQ(l.arena_offset % 4096, 0u);
    EXPECT_EQ(l.result_offset - l.arena_offset, 1u << 20);
    EXPECT_EQ(l.result_offset % 4096, 0u);
    EXPECT_EQ(l.total_bytes - l.result_offset, 1u << 16);
  }
}

TEST(SegmentHeader, CrossProcessIndicesSitOnTheirOwnCacheLines) {
  EXPECT_EQ(offsetof(RingIndices, tail) - offsetof(RingIndices, head), kCacheLine);
  EXPECT_EQ(offsetof(SegmentHeader, submit) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(SegmentHeader, completion) % kCacheLine, 0u);
  EXPECT_EQ(offsetof(SegmentHeader, client_doorbell) % kCacheLine, 0u);
}

TEST(RingView, FillsToCapacityThenRefuses) {
  RingIndices idx;
  std::vector<uint64_t> slots(8);
  RingView<uint64_t> producer(&idx, slots.data(), 8), consumer(&idx, slots.data(), 8);
  for (uint64_t i = 0; i < 8; ++i) {
    uint64_t* s = producer.Reserve();
    ASSERT_NE(s, nullptr);
    *s = i;
    producer.Publish();
  }
  EXPECT_EQ(producer.Reserve(), nullptr);
  EXPECT_EQ(consumer.Depth(), 8u);
  for (uint64_t i = 0; i < 8; ++i) {
    const uint64_t* s = consumer.Front();
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(*s, i);
    consumer.Pop();
  }
  EXPECT_EQ(consumer.Front(), nullptr);
}

TEST(RingView, DetectsAHeadTooFarAhead) {
  RingIndices idx;
  std::vector<uint64_t> slots(4);
  RingView<uint64_t> consumer(&idx, slots.data(), 4);
  idx.head.value.store(1000);  // a misbehaving producer
  bool corrupt = false;
  EXPECT_EQ(consumer.Front(&corrupt), nullptr);
  EXPECT_TRUE(corrupt);
}

TEST(RingView, WrapsAroundIndexOverflow) {
  RingIndices idx;
  idx.head.value.store(UINT32_MAX - 2);
  idx.tail.value.store(UINT32_MAX - 2);
  std::vector<uint64_t> slots(4);
  RingView<uint64_t> producer(&idx, slots.data(), 4), consumer(&idx, slots.data(), 4);
  for (uint64_t i = 0; i < 20; ++i) {
    *producer.Reserve() = i;
    producer.Publish();
    bool corrupt = false;
    const uint64_t* s = consumer.Front(&corrupt);
    ASSERT_NE(s, nullptr);
    EXPECT_FALSE(corrupt);
    EXPECT_EQ(*s, i);
    consumer.Pop();
  }
}

TEST(RingView, TransfersInOrderBetweenThreads) {
  RingIndices idx;
  std::vector<uint64_t> slots(16);
  constexpr uint64_t kCount = 200'000;
  std::thread producer_thread([&] {
    RingView<uint64_t> producer(&idx, slots.data(), 16);
    for (uint64_t i = 0; i < kCount;) {
      if (uint64_t* s = producer.Reserve()) {
        *s = i++;
        producer.Publish();
      }
    }
  });
  RingView<uint64_t> consumer(&idx, slots.data(), 16);
  for (uint64_t expect = 0; expect < kCount;) {
    if (const uint64_t* s = consumer.Front()) {
      ASSERT_EQ(*s, expect++);
      consumer.Pop();
    }
  }
  producer_thread.join();
}

}  // namespace
}  // namespace syncd::abi
