// One suite, every Transport implementation: the loopback fake and UCX (over TCP and over shared
// memory), N endpoints in this process driven from one thread.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>
#include <array>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "daemon/transport/counting_transport.h"
#include "daemon/transport/host_collectives.h"
#include "daemon/transport/loopback/loopback_transport.h"
#include "daemon/transport/tag_space.h"
#include "daemon/transport/ucx/ucx_transport.h"

namespace syncd {
namespace {

struct Group {
  std::unique_ptr<LoopbackHub> hub;
  std::vector<std::unique_ptr<Transport>> members;
  std::vector<UcxTransport*> ucx;
  Group() = default;
  Group(Group&&) = default;
  ~Group() {  // close UCX endpoints together, as a job's daemons do
    for (auto* u : ucx) u->StartClose();
    for (int i = 0; i < 100000; ++i) {
      bool all = true;
      for (auto* u : ucx) all &= u->CloseDone();
      if (all) break;
    }
  }
  Transport* operator[](size_t i) { return members[i].get(); }
  void ProgressAll() {
    for (auto& m : members) m->Progress();
  }
};

struct LoopbackFactory {
  static Group Make(uint32_t n) {
    Group g;
    g.hub = std::make_unique<LoopbackHub>(n);
    for (uint32_t r = 0; r < n; ++r) g.members.push_back(std::make_unique<LoopbackTransport>(g.hub.get(), r));
    return g;
  }
};

template <const char* kTls, bool kDetectPeerFailure>
struct UcxFactory {
  static Group Make(uint32_t n) {
    setenv("UCX_TLS", kTls, 1);
    Group g;
    std::vector<std::string> addrs;
    std::vector<UcxTransport*> raw;
    for (uint32_t r = 0; r < n; ++r) {
      auto t = UcxTransport::Create(r, n, UcxOptions{kDetectPeerFailure});
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      addrs.push_back((*t)->address());
      raw.push_back(t->get());
      g.members.push_back(std::move(t.value()));
    }
    for (UcxTransport* t : raw) EXPECT_TRUE(t->Connect(addrs).ok());
    g.ucx = raw;
    unsetenv("UCX_TLS");
    return g;
  }
};
constexpr char kTcp[] = "tcp,self";
constexpr char kShm[] = "shm,self";

template <typename F>
class TransportConformance : public ::testing::Test {};
// Shared memory cannot report lost peers in UCX 1.13 (see UcxOptions).
using Factories = ::testing::Types<LoopbackFactory, UcxFactory<kTcp, true>, UcxFactory<kShm, false>>;
class FactoryNames {
 public:
  template <typename T>
  static std::string GetName(int i) {
    return i == 0 ? "Loopback" : i == 1 ? "UcxTcp" : "UcxShm";
  }
};
TYPED_TEST_SUITE(TransportConformance, Factories, FactoryNames);

// Polls every task until all are done (or 20 s pass).
bool RunAll(Group& g, std::vector<CommTask>& tasks) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    bool all = true;
    for (auto& t : tasks) all &= t.Poll();
    if (all) return true;
    g.ProgressAll();
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

CommState AwaitHandle(Group& g, Transport* t, CommHandle h, Status* err) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    g.ProgressAll();
    CommState s = t->Test(h, err);
    if (s != CommState::kPending || std::chrono::steady_clock::now() > deadline) return s;
  }
}

TYPED_TEST(TransportConformance, MessagesWithOneTagArriveInOrder) {
  Group g = TypeParam::Make(2);
  int64_t a = 11, b = 22, c = 33, x = 0, y = 0, z = 0;
  CommHandle rx = g[1]->Recv(0, 7, &x, 8, {}), ry = g[1]->Recv(0, 7, &y, 8, {}), rz = g[1]->Recv(0, 7, &z, 8, {});
  CommHandle s1 = g[0]->Send(1, 7, &a, 8, {}), s2 = g[0]->Send(1, 7, &b, 8, {}), s3 = g[0]->Send(1, 7, &c, 8, {});
  Status err;
  for (CommHandle h : {rx, ry, rz}) ASSERT_EQ(AwaitHandle(g, g[1], h, &err), CommState::kDone) << err.ToString();
  for (CommHandle h : {s1, s2, s3}) ASSERT_EQ(AwaitHandle(g, g[0], h, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(x, 11);
  EXPECT_EQ(y, 22);
  EXPECT_EQ(z, 33);
}

TYPED_TEST(TransportConformance, TagsAndSourcesMatchIndependently) {
  Group g = TypeParam::Make(3);
  int32_t from0 = 100, from2 = 200, tag9 = 9, got0 = 0, got2 = 0, got9 = 0;
  CommHandle r9 = g[1]->Recv(0, 9, &got9, 4, {}), r2 = g[1]->Recv(2, 5, &got2, 4, {}), r0 = g[1]->Recv(0, 5, &got0, 4, {});
  g[2]->Send(1, 5, &from2, 4, {});
  g[0]->Send(1, 5, &from0, 4, {});
  g[0]->Send(1, 9, &tag9, 4, {});
  Status err;
  for (CommHandle h : {r0, r2, r9}) ASSERT_EQ(AwaitHandle(g, g[1], h, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(got0, 100);
  EXPECT_EQ(got2, 200);
  EXPECT_EQ(got9, 9);
}

TYPED_TEST(TransportConformance, LargeMessageIsIntact) {
  Group g = TypeParam::Make(2);
  std::vector<uint32_t> out(2 << 20), in(2 << 20, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint32_t(i * 2654435761u);
  CommHandle r = g[1]->Recv(0, 1, in.data(), in.size() * 4, {});
  CommHandle s = g[0]->Send(1, 1, out.data(), out.size() * 4, {});
  Status err;
  ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
  ASSERT_EQ(AwaitHandle(g, g[0], s, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(in, out);
}

TYPED_TEST(TransportConformance, ReceiveOfTheWrongSizeFails) {
  Group g = TypeParam::Make(2);
  int64_t big = 5;
  int32_t small = 0;
  std::vector<char> roomy(64);
  CommHandle r = g[1]->Recv(0, 3, TypeParam::Make == LoopbackFactory::Make ? static_cast<void*>(&small)
                                                                            : static_cast<void*>(roomy.data()),
                            TypeParam::Make == LoopbackFactory::Make ? 4 : 64, {});
  g[0]->Send(1, 3, &big, 8, {});
  Status err;
  EXPECT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kFailed);
  EXPECT_NE(err.message().find("8 bytes"), std::string::npos) << err.ToString();
}

// A collective of zero bytes (an empty tensor) sends and receives empty messages, buffers null.
TYPED_TEST(TransportConformance, EmptyMessagesWithNullBuffersArrive) {
  Group g = TypeParam::Make(2);
  CommHandle r = g[1]->Recv(0, 4, nullptr, 0, {});
  CommHandle s = g[0]->Send(1, 4, nullptr, 0, {});
  Status err;
  ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
  ASSERT_EQ(AwaitHandle(g, g[0], s, &err), CommState::kDone) << err.ToString();
}

// Daemons serve one job after another: what a job cut off by an abort left on the wire never
// reaches the next job's receives, even with the same tag.
TYPED_TEST(TransportConformance, MessagesOfAnotherEpochNeverMatch) {
  Group g = TypeParam::Make(2);
  g[0]->SetEpoch(1);
  g[1]->SetEpoch(1);
  int64_t stale = 111, fresh = 222, got = 0;
  Status err;
  CommHandle s1 = g[0]->Send(1, 5, &stale, 8, {});  // nobody receives it in epoch 1
  ASSERT_EQ(AwaitHandle(g, g[0], s1, &err), CommState::kDone) << err.ToString();
  for (int i = 0; i < 1000; ++i) g.ProgressAll();  // let it arrive, unexpected
  g[1]->SetEpoch(2);  // the next job starts here first
  CommHandle r = g[1]->Recv(0, 5, &got, 8, {});
  for (int i = 0; i < 1000; ++i) g.ProgressAll();
  EXPECT_EQ(g[1]->Test(r, &err), CommState::kPending) << "a message of epoch 1 matched a receive of epoch 2";
  g[0]->SetEpoch(2);
  CommHandle s2 = g[0]->Send(1, 5, &fresh, 8, {});
  ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
  ASSERT_EQ(AwaitHandle(g, g[0], s2, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(got, 222);
  // Back to epoch 1 (16 jobs later, say): the stale message was discarded, not kept.
  g[0]->SetEpoch(1);
  g[1]->SetEpoch(1);
  got = 0;
  CommHandle r1 = g[1]->Recv(0, 5, &got, 8, {});
  for (int i = 0; i < 1000; ++i) g.ProgressAll();
  EXPECT_EQ(g[1]->Test(r1, &err), CommState::kPending) << "the stale message survived the epoch change: " << got;
  g[1]->Cancel(r1);
}

// A job starts clean: what arrived for nobody is dropped, what a posted receive took is kept.
TYPED_TEST(TransportConformance, DiscardArrivedDropsUnmatchedMessagesOnly) {
  Group g = TypeParam::Make(2);
  int64_t stale = 1, wanted = 2, later = 3, got_wanted = 0, got = 0;
  Status err;
  CommHandle r = g[1]->Recv(0, 8, &got_wanted, 8, {});
  for (CommHandle h : {g[0]->Send(1, 6, &stale, 8, {}), g[0]->Send(1, 8, &wanted, 8, {})})
    ASSERT_EQ(AwaitHandle(g, g[0], h, &err), CommState::kDone) << err.ToString();
  for (int i = 0; i < 1000; ++i) g.ProgressAll();
  g[1]->DiscardArrived();
  ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(got_wanted, 2);
  CommHandle r2 = g[1]->Recv(0, 6, &got, 8, {});
  for (int i = 0; i < 1000; ++i) g.ProgressAll();
  EXPECT_EQ(g[1]->Test(r2, &err), CommState::kPending) << "a discarded message was received: " << got;
  g[0]->Send(1, 6, &later, 8, {});
  ASSERT_EQ(AwaitHandle(g, g[1], r2, &err), CommState::kDone) << err.ToString();
  EXPECT_EQ(got, 3);
}

// A message that has already arrived completes inside UCX's receive call. The transport kept
// the request UCX had just freed, as if still posted, and cancelled it again when closing
// (corrupting UCX's request pool); and the destructor believed a transfer was still in flight.
TYPED_TEST(TransportConformance, AReceiveOfAMessageAlreadyInLeavesNothingInFlight) {
  Group g = TypeParam::Make(2);
  int64_t out = 42, in = 0;
  Status err;
  ASSERT_EQ(AwaitHandle(g, g[0], g[0]->Send(1, 9, &out, 8, {}), &err), CommState::kDone) << err.ToString();
  for (int i = 0; i < 1000; ++i) g.ProgressAll();  // the message is in, unexpected
  const CommHandle r = g[1]->Recv(0, 9, &in, 8, {});
  const size_t held = g.ucx.empty() ? 0 : g.ucx[1]->requests_in_flight();
  if (g[1]->Test(r, &err) == CommState::kPending) {
    ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
  } else {
    EXPECT_EQ(held, 0u) << "a receive that completed at once still holds its (freed) UCX request";
  }
  EXPECT_EQ(in, 42);
  for (UcxTransport* u : g.ucx) EXPECT_EQ(u->requests_in_flight(), 0u) << "node " << u->rank();
}

// A buffer whose owner records its release and then scribbles over it, as a reuse would: what
// the network writes or reads after that shows up in the checks below.
struct WatchedBuffer {
  std::vector<char> storage;
  bool released = false;
  explicit WatchedBuffer(size_t bytes, char fill) : storage(bytes, fill) {}
  BufferOwner Owner() {
    return std::shared_ptr<char>(storage.data(), [this](char*) {
      released = true;
      memset(storage.data(), 0x5a, storage.size());
    });
  }
  bool AllAre(char c) const {
    for (char x : storage)
      if (x != c) return false;
    return true;
  }
};

// Issue 17: a job aborted while a large message was on its way freed the receive's buffer at
// Cancel, and UCX (which cannot withdraw a receive it has matched) wrote the rest of the message
// into it later (AddressSanitizer: heap-use-after-free in process_vm_readv). The transport must
// hold the buffer's owner until the network lets go, however far the transfer had got.
TYPED_TEST(TransportConformance, ACancelledReceiveHoldsItsBufferUntilTheNetworkLetsGo) {
  const size_t bytes = 4 << 20;  // rendezvous in UCX
  for (int progress_before_cancel : {0, 1, 3, 10, 50}) {
    SCOPED_TRACE("progress calls before Cancel: " + std::to_string(progress_before_cancel));
    Group g = TypeParam::Make(2);
    WatchedBuffer in(bytes, 0);
    std::vector<char> out(bytes, 0x11);
    CommHandle r = g[1]->Recv(0, 2, in.storage.data(), bytes, in.Owner());
    CommHandle s = g[0]->Send(1, 2, out.data(), bytes, {});
    for (int i = 0; i < progress_before_cancel; ++i) g.ProgressAll();
    g[1]->Cancel(r);
    // Until the owner is let go; then, if the receive was withdrawn before it matched, the
    // message is dropped so that the send can finish too.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!in.released && std::chrono::steady_clock::now() < deadline) g.ProgressAll();
    EXPECT_TRUE(in.released) << "a cancelled receive kept its buffer for 5 s";
    Status err;
    CommState sent = CommState::kPending;
    for (int i = 0; i < 100000 && sent == CommState::kPending; ++i) {
      g[1]->DiscardArrived();
      g.ProgressAll();
      sent = g[0]->Test(s, &err);
    }
    EXPECT_EQ(sent, CommState::kDone) << err.ToString();
    for (int i = 0; i < 100; ++i) g.ProgressAll();
    EXPECT_TRUE(in.AllAre(0x5a)) << "the network wrote into a buffer after its owner let go";
  }
}

// The same for a send: until the peer has taken the data, the buffer is the transport's.
TYPED_TEST(TransportConformance, ACancelledSendHoldsItsBufferUntilThePeerTookIt) {
  const size_t bytes = 4 << 20;
  Group g = TypeParam::Make(2);
  WatchedBuffer out(bytes, 0x11);
  std::vector<char> in(bytes, 0);
  CommHandle s = g[0]->Send(1, 3, out.storage.data(), bytes, out.Owner());
  for (int i = 0; i < 3; ++i) g.ProgressAll();
  g[0]->Cancel(s);
  CommHandle r = g[1]->Recv(0, 3, in.data(), bytes, {});
  Status err;
  const CommState got = AwaitHandle(g, g[1], r, &err);
  if (got == CommState::kDone) {
    EXPECT_EQ(in[0], 0x11) << "the peer read the buffer after its owner let go";
    EXPECT_EQ(in[bytes - 1], 0x11) << "the peer read the buffer after its owner let go";
  }
  for (int i = 0; i < 100 && !out.released; ++i) g.ProgressAll();
  EXPECT_TRUE(out.released) << "the transfer is over, the transport still holds the buffer";
}

// Collectives that may overlap anywhere in the job need distinct tags (a node that finished one
// may already send for the next while a slower node still receives for the first).
uint64_t NextTag() {
  static uint64_t tag = 1000;
  return ++tag;
}

template <typename T>
void CheckAllreduce(Group& g, uint32_t n, size_t count, syncd_dtype dt,
                    CommTask (*algo)(Transport*, uint64_t, void*, BufferOwner, size_t, syncd_dtype, syncd_reduce_op)) {
  std::vector<std::vector<T>> data(n, std::vector<T>(count));
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) data[r][i] = T((i * 13 + r * 7) % 17);
  std::vector<CommTask> tasks;
  const uint64_t tag = NextTag();
  for (uint32_t r = 0; r < n; ++r) tasks.push_back(algo(g[r], tag, data[r].data(), {}, count, dt, SYNCD_SUM));
  ASSERT_TRUE(RunAll(g, tasks)) << "timed out: n=" << n << " count=" << count;
  for (auto& t : tasks) ASSERT_TRUE(t.status().ok()) << t.status().ToString();
  for (uint32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      T want = 0;
      for (uint32_t q = 0; q < n; ++q) want += T((i * 13 + q * 7) % 17);
      ASSERT_EQ(data[r][i], want) << "rank " << r << " element " << i << " n=" << n;
    }
}

CommTask SlicedAllreduce(Transport* t, uint64_t tag, void* d, BufferOwner o, size_t c, syncd_dtype dt,
                         syncd_reduce_op op) {
  return Allreduce(t, tag, d, std::move(o), c, dt, op, AllreduceOptions{0, 3, HostAllreduce::kRing});
}

// What --host-allreduce picks, through Allreduce (the dispatch the daemon uses).
template <HostAllreduce A>
CommTask Forced(Transport* t, uint64_t tag, void* d, BufferOwner o, size_t c, syncd_dtype dt, syncd_reduce_op op) {
  return Allreduce(t, tag, d, std::move(o), c, dt, op, AllreduceOptions{0, 2, A});
}

TYPED_TEST(TransportConformance, AllreduceAlgorithmsAreExactForAnyNodeCount) {
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u}) {
    Group g = TypeParam::Make(n);
    // Fewer elements than nodes (halving then moves empty halves), odd counts, a large one.
    for (size_t count : {size_t(1), size_t(3), size_t(7), size_t(10007)}) {
      CheckAllreduce<int32_t>(g, n, count, SYNCD_INT32, RecursiveDoublingAllreduce);
      CheckAllreduce<int32_t>(g, n, count, SYNCD_INT32, RingAllreduce);
      CheckAllreduce<int32_t>(g, n, count, SYNCD_INT32, RecursiveHalvingAllreduce);
      CheckAllreduce<int32_t>(g, n, count, SYNCD_INT32, TreeAllreduce);
      CheckAllreduce<float>(g, n, count, SYNCD_FLOAT32, SlicedAllreduce);
      CheckAllreduce<float>(g, n, count, SYNCD_FLOAT32, Forced<HostAllreduce::kRing>);
      CheckAllreduce<float>(g, n, count, SYNCD_FLOAT32, Forced<HostAllreduce::kRecursiveHalving>);
      CheckAllreduce<float>(g, n, count, SYNCD_FLOAT32, Forced<HostAllreduce::kTree>);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(HostAllreduce, AutoPicksByBytesAndNodeCount) {
  const AllreduceOptions automatic;
  EXPECT_EQ(ChooseAllreduce(4, 8, automatic), HostAllreduce::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduce(8, 64 << 10, automatic), HostAllreduce::kRecursiveDoubling);
  EXPECT_EQ(ChooseAllreduce(kTreeCombineFrom, 8, automatic), HostAllreduce::kTree);
  EXPECT_EQ(ChooseAllreduce(4, (64 << 10) + 4, automatic), HostAllreduce::kRecursiveHalving);
  EXPECT_EQ(ChooseAllreduce(32, 64 << 20, automatic), HostAllreduce::kRecursiveHalving);
  EXPECT_EQ(ChooseAllreduce(6, 64 << 20, automatic), HostAllreduce::kRing) << "halving would fold 2 nodes in whole";
  for (HostAllreduce a : {HostAllreduce::kRecursiveDoubling, HostAllreduce::kRecursiveHalving, HostAllreduce::kRing,
                          HostAllreduce::kTree})
    for (size_t bytes : {size_t(8), size_t(64) << 20})
      EXPECT_EQ(ChooseAllreduce(6, bytes, AllreduceOptions{64 * 1024, 4, a}), a) << HostAllreduceName(a);
}

// A coordination cycle's combine: word 0 ORs each node's bit, word 1 ANDs a mask every node but
// the last clears a bit of. Every node ends with the same words by either algorithm.
void OrThenAnd(char* acc, const char* other, size_t bytes) {
  uint64_t a[2], b[2];
  memcpy(a, acc, bytes);
  memcpy(b, other, bytes);
  a[0] |= b[0];
  a[1] &= b[1];
  memcpy(acc, a, bytes);
}

TYPED_TEST(TransportConformance, RecursiveDoublingAndTreeCombineAgreeForAnyNodeCount) {
  using Algo = CommTask (*)(Transport*, uint64_t, void*, BufferOwner, size_t, Combiner);
  for (uint32_t n : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u}) {
    Group g = TypeParam::Make(n);
    for (Algo algo : {Algo(RecursiveDoublingCombine), Algo(TreeCombine), Algo(SmallCombine)}) {
      std::vector<std::array<uint64_t, 2>> words(n);
      for (uint32_t r = 0; r < n; ++r) words[r] = {uint64_t(1) << r, r + 1 < n ? ~(uint64_t(1) << r) : ~uint64_t(0)};
      std::vector<CommTask> tasks;
      const uint64_t tag = NextTag();
      for (uint32_t r = 0; r < n; ++r) tasks.push_back(algo(g[r], tag, words[r].data(), {}, 16, OrThenAnd));
      ASSERT_TRUE(RunAll(g, tasks)) << "timed out: n=" << n;
      const uint64_t all = (uint64_t(1) << n) - 1;
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(tasks[r].status().ok()) << tasks[r].status().ToString();
        EXPECT_EQ(words[r][0], all) << "node " << r << " of " << n;
        EXPECT_EQ(words[r][1], ~(all >> 1)) << "node " << r << " of " << n;
      }
    }
  }
}

// From kTreeCombineFrom nodes a cycle's combine goes through the tree: each node sends about two
// messages, not log2 N.
TEST(LoopbackTransport, SmallCombineOnManyNodesSendsAboutTwoMessagesPerNode) {
  const uint32_t n = 2 * kTreeCombineFrom;
  Group g = LoopbackFactory::Make(n);
  std::vector<std::unique_ptr<CountingTransport>> counted;
  for (uint32_t r = 0; r < n; ++r) counted.push_back(std::make_unique<CountingTransport>(g[r]));
  std::vector<std::array<uint64_t, 2>> words(n);
  for (uint32_t r = 0; r < n; ++r) words[r] = {uint64_t(1) << r, ~uint64_t(0)};
  std::vector<CommTask> tasks;
  const uint64_t tag = NextTag();
  for (uint32_t r = 0; r < n; ++r) tasks.push_back(SmallCombine(counted[r].get(), tag, words[r].data(), {}, 16, OrThenAnd));
  ASSERT_TRUE(RunAll(g, tasks));
  uint64_t sent = 0, most = 0;
  for (uint32_t r = 0; r < n; ++r) {
    EXPECT_EQ(words[r][0], (uint64_t(1) << n) - 1) << "node " << r;
    sent += counted[r]->sent();
    most = std::max<uint64_t>(most, counted[r]->sent());
  }
  EXPECT_EQ(sent, 2u * (n - 1)) << "a tree sends each node's part up once and the result down once";
  EXPECT_EQ(most, 5u) << "the root sends to its log2 N children, no node more";
}

TYPED_TEST(TransportConformance, AllreduceGivesBitIdenticalFloatsOnEveryNode) {
  const uint32_t n = 6;  // not a power of two: halving and doubling fold two nodes in
  Group g = TypeParam::Make(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t count : {size_t(100), size_t(300000)}) {
    std::vector<std::vector<float>> data(n, std::vector<float>(count));
    for (auto& v : data) for (auto& x : v) x = u(rng);
    for (HostAllreduce a : {HostAllreduce::kAuto, HostAllreduce::kRecursiveDoubling, HostAllreduce::kRecursiveHalving,
                            HostAllreduce::kRing, HostAllreduce::kTree}) {
      std::vector<std::vector<float>> mine = data;
      std::vector<CommTask> tasks;
      const uint64_t tag = NextTag();
      for (uint32_t r = 0; r < n; ++r)
        tasks.push_back(Allreduce(g[r], tag, mine[r].data(), {}, count, SYNCD_FLOAT32, SYNCD_SUM,
                                  AllreduceOptions{64 * 1024, 4, a}));
      ASSERT_TRUE(RunAll(g, tasks));
      for (uint32_t r = 1; r < n; ++r)
        ASSERT_EQ(memcmp(mine[r].data(), mine[0].data(), count * 4), 0) << "rank " << r << " " << HostAllreduceName(a);
    }
  }
}

TYPED_TEST(TransportConformance, BroadcastFromEveryRootAndBarrier) {
  for (uint32_t n : {2u, 3u, 5u}) {
    Group g = TypeParam::Make(n);
    for (uint32_t root = 0; root < n; ++root) {
      std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(1000));
      for (uint32_t r = 0; r < n; ++r) std::fill(data[r].begin(), data[r].end(), uint8_t(r + 1));
      std::vector<CommTask> tasks;
      const uint64_t tag = NextTag();
      for (uint32_t r = 0; r < n; ++r) tasks.push_back(Broadcast(g[r], tag, data[r].data(), {}, 1000, root));
      ASSERT_TRUE(RunAll(g, tasks));
      for (uint32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(tasks[r].status().ok()) << tasks[r].status().ToString();
        EXPECT_EQ(data[r], std::vector<uint8_t>(1000, uint8_t(root + 1))) << "rank " << r << " root " << root;
      }
    }
    std::vector<CommTask> barrier;
    const uint64_t tag = NextTag();
    for (uint32_t r = 0; r < n; ++r) barrier.push_back(Barrier(g[r], tag));
    ASSERT_TRUE(RunAll(g, barrier));
  }
}

TEST(LoopbackTransport, LostPeerFailsPendingCollectiveWithItsName) {
  Group g = LoopbackFactory::Make(3);
  std::vector<int32_t> d(100, 1);
  CommTask t0 = Allreduce(g[0], 1, d.data(), {}, d.size(), SYNCD_INT32, SYNCD_SUM);
  g.hub->Kill(2);
  for (int i = 0; i < 100 && !t0.Poll(); ++i) g.ProgressAll();
  ASSERT_TRUE(t0.done());
  EXPECT_EQ(t0.status().code(), SYNCD_ERR_RANK_LOST);
  EXPECT_NE(t0.status().message().find("node 2"), std::string::npos) << t0.status().ToString();
}

// A task that, once resumed, waits on sends that completed as they were posted (the loopback
// transport's always do) must get through them in the same Poll: no event will ever come for them,
// and a blocking negotiation cycle would sleep until its timeout (1 ms) before looking again.
TEST(LoopbackTransport, OnePollRunsATaskThroughWaitsThatAreAlreadySatisfied) {
  Group g = LoopbackFactory::Make(2);
  auto task = [](Transport* t) -> CommTask {
    uint32_t in = 0, out = 7;
    Status st = co_await Wait(t, t->Recv(1, 5, &in, sizeof(in), {}));
    if (!st.ok()) co_return st;
    for (int i = 0; i < 3; ++i) {
      st = co_await Wait(t, t->Send(1, 6, &out, sizeof(out), {}));
      if (!st.ok()) co_return st;
    }
    co_return Status::Ok();
  };
  CommTask t0 = task(g[0]);
  EXPECT_FALSE(t0.Poll());  // nothing from node 1 yet
  uint32_t v = 3;
  CommHandle s = g[1]->Send(0, 5, &v, sizeof(v), {});
  g.ProgressAll();
  EXPECT_TRUE(t0.Poll()) << "the receive and all three sends done in one Poll";
  EXPECT_TRUE(t0.status().ok()) << t0.status().ToString();
  Status err;
  EXPECT_EQ(g[1]->Test(s, &err), CommState::kDone);
}

// Daemons on one host that watch each other through pidfds use shared memory, unless the job goes
// on after losing a daemon (--on-loss continue|restore): a daemon killed while it wrote into a
// peer's shared-memory FIFO leaves that FIFO blocked for good (the survivors of a 3-node job hung,
// 1 run in about 150), so such peers talk over TCP, with UCX's error handling besides the pidfd.
// The same between a restarted daemon and the node that took it back (AvoidSharedMemoryWith),
// whatever the job's policy: its predecessor may have left that node's FIFO blocked.
TEST(UcxTransport, SameHostPeersUseSharedMemoryOnlyWhereALostPeerCannotBlockIt) {
  for (const int how : {0, 1, 2}) {
    const bool shared_memory = how == 0;
    SCOPED_TRACE(how == 0 ? "shared memory allowed" : how == 1 ? "shared memory ruled out" : "a restarted peer");
    UcxOptions options;
    options.same_host_shared_memory = how != 1;
    Group g;
    std::vector<std::string> addrs;
    for (uint32_t r = 0; r < 2; ++r) {
      auto t = UcxTransport::Create(r, 2, options);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      if (how == 2) (*t)->AvoidSharedMemoryWith(1 - r);
      addrs.push_back((*t)->address());
      g.ucx.push_back(t->get());
      g.members.push_back(std::move(t.value()));
    }
    const std::vector<int32_t> pids(2, int32_t(getpid()));  // each "daemon" of this host is this process
    for (UcxTransport* t : g.ucx) ASSERT_TRUE(t->Connect(addrs, pids).ok());
    int64_t out = 42, in = 0;
    CommHandle r = g[1]->Recv(0, 3, &in, 8, {}), s = g[0]->Send(1, 3, &out, 8, {});
    Status err;
    ASSERT_EQ(AwaitHandle(g, g[1], r, &err), CommState::kDone) << err.ToString();
    ASSERT_EQ(AwaitHandle(g, g[0], s, &err), CommState::kDone) << err.ToString();
    EXPECT_EQ(in, 42);
    const std::string info = g.ucx[0]->endpoint_info(1);
    const bool shm = info.find("posix") != std::string::npos || info.find("sysv") != std::string::npos;
    EXPECT_EQ(shm, shared_memory) << info;
    EXPECT_STREQ(g.ucx[0]->failure_detection(1), shared_memory ? "pidfd" : "pidfd+ucx");
    if (!shared_memory) {
      EXPECT_NE(info.find("tcp"), std::string::npos) << info;
    }
  }
}

// A daemon that comes back (restarted under its job): its peers saw it lost, and reconnect to the
// new process. Messages flow both ways again; a message the old process left behind unreceived
// never reaches a receive meant for the new one, but what the new one sent on the slot it starts
// with (before its peers heard it was back) does.
TEST(UcxTransport, APeerThatComesBackIsReachedAgainAndItsOldMessagesAreDropped) {
  setenv("UCX_TLS", "tcp,self", 1);
  auto make = [](uint32_t rank) {
    auto t = UcxTransport::Create(rank, 3, UcxOptions{});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(t.value());
  };
  std::vector<std::unique_ptr<UcxTransport>> t;
  for (uint32_t r = 0; r < 3; ++r) t.push_back(make(r));
  std::vector<std::string> addrs;
  for (auto& x : t) addrs.push_back(x->address());
  for (auto& x : t) ASSERT_TRUE(x->Connect(addrs).ok());
  auto progress = [&] {
    for (auto& x : t)
      if (x) x->Progress();
  };
  auto await = [&](UcxTransport* x, CommHandle h) {
    Status err;
    CommState s = CommState::kPending;
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         s == CommState::kPending && std::chrono::steady_clock::now() < end;) {
      progress();
      s = x->Test(h, &err);
    }
    return std::make_pair(s, err);
  };
  constexpr uint64_t kOldTag = 5, kNewSlot = 7, kHello = (kNewSlot << kSetSlotShift) | 9;
  // Node 1's old process leaves a message node 0 never receives, then dies.
  int64_t left = 111;
  ASSERT_EQ(await(t[1].get(), t[1]->Send(0, kOldTag, &left, 8, {})).first, CommState::kDone);
  for (int i = 0; i < 100; ++i) progress();
  t[1]->OnPeerError(0, "test");  // (no graceful goodbye: the process is gone)
  t[1]->OnPeerError(2, "test");
  t[1].reset();
  // Its peers notice (a send to it fails).
  for (uint32_t p : {0u, 2u}) {
    int64_t x = 1;
    for (int i = 0; i < 50 && !t[p]->PeerLost(1); ++i) await(t[p].get(), t[p]->Send(1, 1, &x, 8, {}));
    ASSERT_TRUE(t[p]->PeerLost(1)) << "node " << p;
  }
  // The new process connects and says hello on its slot before node 0 knows it is back.
  t[1] = make(1);
  addrs[1] = t[1]->address();
  ASSERT_TRUE(t[1]->Connect(addrs).ok());
  int64_t hello = 222, fresh = 333;
  CommHandle hello_sent = t[1]->Send(0, kHello, &hello, 8, {});
  for (int i = 0; i < 200; ++i) progress();
  for (uint32_t p : {0u, 2u}) {
    const Status st = t[p]->Reconnect(1, addrs[1], 0, uint32_t(kNewSlot));
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_FALSE(t[p]->PeerLost(1));
    EXPECT_FALSE(t[p]->PeerFailure().has_value());
  }
  int64_t got_hello = 0, got = 0;
  auto [hs, herr] = await(t[0].get(), t[0]->Recv(1, kHello, &got_hello, 8, {}));
  ASSERT_EQ(hs, CommState::kDone) << herr.ToString();
  EXPECT_EQ(got_hello, 222);
  EXPECT_EQ(await(t[1].get(), hello_sent).first, CommState::kDone);
  // The old process's leftover is gone: a receive on its tag gets what the new process sends.
  CommHandle r = t[0]->Recv(1, kOldTag, &got, 8, {});
  for (int i = 0; i < 200; ++i) progress();
  Status err;
  EXPECT_EQ(t[0]->Test(r, &err), CommState::kPending) << "the old process's message arrived: " << got;
  ASSERT_EQ(await(t[1].get(), t[1]->Send(0, kOldTag, &fresh, 8, {})).first, CommState::kDone);
  ASSERT_EQ(await(t[0].get(), r).first, CommState::kDone);
  EXPECT_EQ(got, 333);
  // Both ways, with the other survivor too.
  for (uint32_t p : {0u, 2u}) {
    int64_t out = 400 + p, in = 0, back = 0, echo = 500 + p;
    CommHandle rin = t[1]->Recv(p, 11, &in, 8, {});
    ASSERT_EQ(await(t[p].get(), t[p]->Send(1, 11, &out, 8, {})).first, CommState::kDone);
    ASSERT_EQ(await(t[1].get(), rin).first, CommState::kDone);
    EXPECT_EQ(in, int64_t(400 + p));
    CommHandle rback = t[p]->Recv(1, 12, &back, 8, {});
    ASSERT_EQ(await(t[1].get(), t[1]->Send(p, 12, &echo, 8, {})).first, CommState::kDone);
    ASSERT_EQ(await(t[p].get(), rback).first, CommState::kDone);
    EXPECT_EQ(back, int64_t(500 + p));
  }
  EXPECT_EQ(t[0]->Reconnect(1, addrs[1], 0, 0).code(), SYNCD_ERR_INVALID) << "a live peer is not reconnected";
  for (auto& x : t) x->StartClose();
  for (int i = 0; i < 100000; ++i) {
    bool all = true;
    for (auto& x : t) all &= x->CloseDone();
    if (all) break;
  }
  unsetenv("UCX_TLS");
}

}  // namespace
}  // namespace syncd
