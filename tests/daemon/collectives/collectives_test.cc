#include "daemon/collectives/collective.h"

#include <gtest/gtest.h>

#include <set>

#include "daemon/collectives/agreement.h"

namespace syncd {
namespace {

Request Tensor(abi::OpKind kind, uint32_t rank, std::vector<float>* data) {
  Request r;
  r.kind = kind;
  r.rank = r.local_rank = r.set_rank = rank;
  r.name = "t";
  r.dtype = SYNCD_FLOAT32;
  r.shape = {int64_t(data->size())};
  r.bytes = data->size() * sizeof(float);
  r.data = reinterpret_cast<char*>(data->data());
  return r;
}

TEST(Collectives, EveryKindIsRegisteredOnceUnderItsOwnName) {
  std::set<std::string> names;
  for (abi::OpKind k : {abi::OpKind::kAllreduce, abi::OpKind::kBroadcast, abi::OpKind::kBarrier, abi::OpKind::kAllgather,
                        abi::OpKind::kAlltoall, abi::OpKind::kReducescatter, abi::OpKind::kReduce,
                        abi::OpKind::kGather, abi::OpKind::kScatter}) {
    const Collective* c = FindCollective(k);
    ASSERT_NE(c, nullptr) << int(k);
    EXPECT_EQ(c->kind(), k);
    EXPECT_TRUE(names.insert(c->name()).second) << c->name();
  }
  // Not collectives: the engine handles them.
  EXPECT_EQ(FindCollective(abi::OpKind::kRegisterGraph), nullptr);
  EXPECT_EQ(FindCollective(abi::OpKind::kFail), nullptr);
  EXPECT_STREQ(OpKindName(abi::OpKind::kRegisterGraph), "graph registration");
  EXPECT_STREQ(OpKindName(abi::OpKind(99)), "unknown");
}

TEST(Collectives, AllreducesFuseByDtypeOpScaleAndMemoryOtherKindsRunAlone) {
  const Collective& ar = *FindCollective(abi::OpKind::kAllreduce);
  std::vector<float> d(4);
  Request a = Tensor(abi::OpKind::kAllreduce, 0, &d), b = a;
  EXPECT_EQ(ar.FusionKeyOf(a), ar.FusionKeyOf(b));
  b.postscale = 0.5;
  EXPECT_NE(ar.FusionKeyOf(a), ar.FusionKeyOf(b));
  b = a;
  b.gpu = true;
  EXPECT_NE(ar.FusionKeyOf(a), ar.FusionKeyOf(b));
  EXPECT_FALSE(FindCollective(abi::OpKind::kBroadcast)->FusionKeyOf(Tensor(abi::OpKind::kBroadcast, 0, &d)));
  EXPECT_FALSE(FindCollective(abi::OpKind::kBarrier)->has_tensor());
}

TEST(Collectives, ParseChecksTheKindsOwnFields) {
  abi::SubmitEntry e{};
  Request r;
  e.root = 4;
  Status st = FindCollective(abi::OpKind::kBroadcast)->Parse(e, 4, "tensor 'w' from rank 1", &r);
  EXPECT_EQ(st.code(), SYNCD_ERR_INVALID);
  EXPECT_EQ(st.message(), "tensor 'w' from rank 1: broadcast root 4 is not a rank (size 4)");
  e.root = 3;
  EXPECT_TRUE(FindCollective(abi::OpKind::kBroadcast)->Parse(e, 4, "w", &r).ok());
  EXPECT_EQ(r.root, 3);
  // A partial allreduce's quorum travels in the entry's root field, and is the request's quorum.
  Request p;
  e.op = SYNCD_SUM;
  e.partial_mode = SYNCD_PARTIAL_SOLO;
  e.root = 2;
  ASSERT_TRUE(FindCollective(abi::OpKind::kPartialAllreduce)->Parse(e, 4, "w", &p).ok());
  EXPECT_EQ(p.quorum, 2);
  EXPECT_EQ(p.root, 0);
  e.op = SYNCD_REDUCE_OP_COUNT;
  EXPECT_EQ(FindCollective(abi::OpKind::kAllreduce)->Parse(e, 4, "w", &r).code(), SYNCD_ERR_PROTOCOL);
}

TEST(Collectives, BoolAllreduceCannotAverageOrScale) {
  const Collective& ar = *FindCollective(abi::OpKind::kAllreduce);
  abi::SubmitEntry e{};
  e.op = SYNCD_AVERAGE;
  e.prescale = e.postscale = 1.0;
  Request r;
  r.dtype = SYNCD_BOOL;  // set by the common checks before the kind's
  Status st = ar.Parse(e, 4, "tensor 'mask' from rank 0", &r);
  EXPECT_EQ(st.code(), SYNCD_ERR_INVALID);
  EXPECT_EQ(st.message(), "tensor 'mask' from rank 0: allreduce of bool tensors cannot average; use Sum (logical or) or "
                          "Min (logical and)");
  e.op = SYNCD_SUM;
  e.postscale = 2.0;
  EXPECT_EQ(ar.Parse(e, 4, "m", &r).code(), SYNCD_ERR_INVALID);
  e.postscale = 1.0;
  EXPECT_TRUE(ar.Parse(e, 4, "m", &r).ok());
  r.dtype = SYNCD_INT16;
  e.op = SYNCD_AVERAGE;
  EXPECT_TRUE(ar.Parse(e, 4, "m", &r).ok());
}

TEST(Collectives, AgreementAppliesTheKindsRules) {
  std::vector<float> d0(2), d1(2);
  std::vector<Request> rs = {Tensor(abi::OpKind::kBroadcast, 0, &d0), Tensor(abi::OpKind::kBroadcast, 1, &d1)};
  rs[1].root = 1;
  Status st = CheckAgreement(rs);
  EXPECT_EQ(st.code(), SYNCD_ERR_MISMATCH);
  EXPECT_EQ(st.message(), "tensor 't': mismatched root across ranks: root 0 on rank 0; root 1 on rank 1");
  rs[1].root = 0;
  rs[1].op = SYNCD_MAX;  // a broadcast has no reduce op: not compared
  EXPECT_TRUE(CheckAgreement(rs).ok());
  rs[0].kind = rs[1].kind = abi::OpKind::kAllreduce;
  EXPECT_NE(CheckAgreement(rs).message().find("mismatched reduce op"), std::string::npos);
}

// An allreduce's compression: parsed (GPU tensors refused), resolved against the daemon's default,
// agreed by every rank and part of what fuses.
TEST(Collectives, AllreduceCompressionIsParsedResolvedAgreedAndFused) {
  const Collective& ar = *FindCollective(abi::OpKind::kAllreduce);
  abi::SubmitEntry e{};
  e.op = SYNCD_SUM;
  e.prescale = e.postscale = 1.0;
  e.compression = SYNCD_COMPRESSION_FP16;
  std::vector<float> d(64);
  Request r = Tensor(abi::OpKind::kAllreduce, 0, &d);
  ASSERT_TRUE(ar.Parse(e, 4, "w", &r).ok());
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_FP16);
  e.flags = abi::kSubmitGpu;
  Status st = ar.Parse(e, 4, "tensor 'g' from rank 0", &r);
  EXPECT_EQ(st.code(), SYNCD_ERR_INVALID);
  EXPECT_EQ(st.message(), "tensor 'g' from rank 0: fp16 compression of GPU tensors is not supported yet (NCCL moves "
                          "them as they are)");
  e.flags = 0;
  e.compression = SYNCD_COMPRESSION_COUNT;
  EXPECT_EQ(ar.Parse(e, 4, "w", &r).code(), SYNCD_ERR_PROTOCOL);

  // DEFAULT takes the daemon's setting from its minimum size on; other dtypes and GPU tensors never compress.
  r.compression = SYNCD_COMPRESSION_DEFAULT;
  ResolveCompression(SYNCD_COMPRESSION_BF16, 256, 10'000, 4, false, &r);
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_BF16);
  r.compression = SYNCD_COMPRESSION_DEFAULT;
  ResolveCompression(SYNCD_COMPRESSION_BF16, 257, 10'000, 4, false, &r);
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_NONE);
  r.compression = SYNCD_COMPRESSION_FP16;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 10'000, 4, true, &r);
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_NONE);
  r.compression = SYNCD_COMPRESSION_FP16;
  r.dtype = SYNCD_INT32;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 10'000, 4, false, &r);
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_NONE);
  // Top-k and random-k carry a ratio: the rank's, else the daemon's; the other methods none.
  r.dtype = SYNCD_FLOAT32;
  r.compression = SYNCD_COMPRESSION_TOPK;
  r.compression_ppm = 0;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 10'000, 4, false, &r);
  EXPECT_EQ(r.compression_ppm, 10'000u);
  r.compression_ppm = 500;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 10'000, 4, false, &r);
  EXPECT_EQ(r.compression_ppm, 500u);
  r.compression = SYNCD_COMPRESSION_DEFAULT;
  r.compression_ppm = 0;
  ResolveCompression(SYNCD_COMPRESSION_TOPK, 0, 2'000, 4, false, &r);
  EXPECT_EQ(r.compression, SYNCD_COMPRESSION_TOPK);
  EXPECT_EQ(r.compression_ppm, 2'000u);
  r.compression = SYNCD_COMPRESSION_ONEBIT;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 2'000, 4, false, &r);
  EXPECT_EQ(r.compression_ppm, 0u);
  // PowerSGD carries its rank in the same field: the rank's, else the daemon's --compression-rank.
  r.compression = SYNCD_COMPRESSION_POWERSGD;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 2'000, 8, false, &r);
  EXPECT_EQ(r.compression_ppm, 8u);
  EXPECT_EQ(CompressionText(r.compression, r.compression_ppm), "powersgd (rank 8)");
  r.compression_ppm = 2;
  ResolveCompression(SYNCD_COMPRESSION_NONE, 0, 2'000, 8, false, &r);
  EXPECT_EQ(r.compression_ppm, 2u);

  std::vector<float> d0(2), d1(2);
  std::vector<Request> rs = {Tensor(abi::OpKind::kAllreduce, 0, &d0), Tensor(abi::OpKind::kAllreduce, 1, &d1)};
  rs[0].compression = SYNCD_COMPRESSION_FP16;
  rs[1].compression = SYNCD_COMPRESSION_NONE;
  st = CheckAgreement(rs);
  EXPECT_EQ(st.code(), SYNCD_ERR_MISMATCH);
  EXPECT_NE(st.message().find("mismatched compression across ranks: fp16 on rank 0; none on rank 1"),
            std::string::npos)
      << st.message();
  EXPECT_NE(ar.FusionKeyOf(rs[0]), ar.FusionKeyOf(rs[1]));
  rs[1].compression = SYNCD_COMPRESSION_FP16;
  EXPECT_TRUE(CheckAgreement(rs).ok());
  EXPECT_EQ(ar.FusionKeyOf(rs[0]), ar.FusionKeyOf(rs[1]));
  // A joined or lost rank's stand-in asks for what the others ask for.
  StatusOr<Request> stand_in = JoinedRequest(rs[0], 2, 2, 0, true);
  ASSERT_TRUE(stand_in.ok()) << stand_in.status().ToString();
  EXPECT_EQ(stand_in->compression, SYNCD_COMPRESSION_FP16);
}

// A TOPO plan's registration: a lost rank (a vacant slot too) stands in beside a rank of its node
// that registers it, with the same plan; not from the agreed name alone (no plan to run), and a
// rank that joined (hvd.join) does not.
TEST(Collectives, ALostRanksStandInRegistersThePlanOfItsNodesRanksOrNoneWhereNoRankHasOne) {
  Request like;
  like.kind = abi::OpKind::kRegisterGraph;
  like.name = abi::kTopoPlanName;
  like.plan = std::make_shared<TopoPlan>();
  like.shape = {42};
  StatusOr<Request> stand_in = JoinedRequest(like, 1, 1, 1, /*lost=*/true);
  ASSERT_TRUE(stand_in.ok()) << stand_in.status().ToString();
  EXPECT_EQ(stand_in->plan, like.plan);
  EXPECT_EQ(stand_in->client_id, kNoClient);
  EXPECT_EQ(stand_in->rank, 1u);
  EXPECT_FALSE(JoinedRequest(like, 1, 1, 1, /*lost=*/false).ok());
  // As the coordinator knows it (the name and the hash), and as a node whose every rank is lost
  // or vacant stands in: no plan, the hash kept; the node gets the plan when the registration runs.
  like.plan = nullptr;
  stand_in = JoinedRequest(like, 1, 1, 1, /*lost=*/true);
  ASSERT_TRUE(stand_in.ok()) << stand_in.status().ToString();
  EXPECT_EQ(stand_in->plan, nullptr);
  EXPECT_EQ(stand_in->shape, like.shape);
  EXPECT_FALSE(JoinedRequest(like, 1, 1, 1, /*lost=*/false).ok());  // a rank in hvd.join registers nothing
}

// A rank's request as another node announced it (the coordinator's input, off the wire) may
// have no dimension: every rooted and row-splitting kind refuses it by name, without reading a
// first dimension that is not there (found by fuzz_coord_wire).
TEST(Collectives, AgreementRefusesScalarsFromTheWireWithoutReadingADimension) {
  for (abi::OpKind kind : {abi::OpKind::kScatter, abi::OpKind::kGather, abi::OpKind::kAllgather,
                           abi::OpKind::kReducescatter, abi::OpKind::kReduce, abi::OpKind::kBroadcast}) {
    std::vector<float> d0(2), d1(2);
    std::vector<Request> rs = {Tensor(kind, 0, &d0), Tensor(kind, 1, &d1)};
    for (Request& r : rs) r.shape.clear();
    (void)CheckAgreement(rs);  // ASan/UBSan: no read past an empty shape
  }
  std::vector<float> d0(2), d1(2);
  std::vector<Request> rs = {Tensor(abi::OpKind::kScatter, 0, &d0), Tensor(abi::OpKind::kScatter, 1, &d1)};
  rs[1].shape.clear();
  rs[0].shape.clear();
  const Status st = CheckAgreement(rs);
  EXPECT_EQ(st.code(), SYNCD_ERR_MISMATCH);
  EXPECT_NE(st.message().find("rank 0 passed a scalar"), std::string::npos) << st.message();
}

TEST(Collectives, RunLocalComputesTheResultInEveryRanksTensor) {
  HostExecutor host(2);
  std::vector<float> a = {1, 2}, b = {3, 4};
  ReadyTensor t{{Tensor(abi::OpKind::kAllreduce, 0, &a), Tensor(abi::OpKind::kAllreduce, 1, &b)}};
  FindCollective(abi::OpKind::kAllreduce)->RunLocal({&t}, host);
  EXPECT_EQ(a, (std::vector<float>{4, 6}));
  EXPECT_EQ(b, (std::vector<float>{4, 6}));
  a = {1, 2};
  b = {3, 4};
  ReadyTensor bc{{Tensor(abi::OpKind::kBroadcast, 0, &a), Tensor(abi::OpKind::kBroadcast, 1, &b)}};
  for (Request& r : bc.requests) r.root = 1;
  FindCollective(abi::OpKind::kBroadcast)->RunLocal({&bc}, host);
  EXPECT_EQ(a, (std::vector<float>{3, 4}));
}

TEST(Collectives, AKindWithoutAGpuPathSaysSo) {
  StatusOr<uint64_t> t = FindCollective(abi::OpKind::kBarrier)->EnqueueGpu({}, OnGpus{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "barrier has no GPU path");
}

TEST(Collectives, AllgatherPlacesEveryRanksRowsInTheResultArea) {
  const Collective& ag = *FindCollective(abi::OpKind::kAllgather);
  EXPECT_TRUE(ag.shapes_vary());
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  ReadyTensor t{{Tensor(abi::OpKind::kAllgather, 0, &a), Tensor(abi::OpKind::kAllgather, 1, &b)}};
  t.requests[0].shape = {2, 2};
  t.requests[1].shape = {1, 2};
  Collective::Placement p;
  ASSERT_TRUE(ag.ResultPlace(t, 1, &p));
  EXPECT_EQ(p.bytes, 6 * sizeof(float));
  EXPECT_EQ(p.rows, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ag.ResultBytes(t, 0), 6 * sizeof(float));
  std::vector<float> out0(6), out1(6);
  t.requests[0].result = reinterpret_cast<char*>(out0.data());
  t.requests[1].result = reinterpret_cast<char*>(out1.data());
  HostExecutor host(2);
  ag.RunLocal({&t}, host);
  EXPECT_EQ(out0, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out1, out0);
  t.requests[1].shape = {1, 3};
  EXPECT_NE(CheckAgreement(t.requests).message().find("mismatched shape after the first dimension"), std::string::npos);
  abi::SubmitEntry e{};
  Request scalar;
  EXPECT_EQ(ag.Parse(e, 2, "s", &scalar).code(), SYNCD_ERR_INVALID);
}

TEST(Collectives, AlltoallSplitsDefaultToEqualPartsAndMustAddUp) {
  const Collective& a2a = *FindCollective(abi::OpKind::kAlltoall);
  abi::SubmitEntry e{};
  Request r;
  r.shape = {6, 2};
  ASSERT_TRUE(a2a.Parse(e, 3, "x", &r).ok());
  EXPECT_EQ(r.splits, (std::vector<int64_t>{2, 2, 2}));
  r.splits.clear();
  EXPECT_EQ(a2a.Parse(e, 4, "x", &r).code(), SYNCD_ERR_INVALID);  // 6 rows among 4 ranks
  r.splits = {1, 2, 2};
  EXPECT_NE(a2a.Parse(e, 3, "x", &r).message().find("add up to 5 rows, the tensor has 6"), std::string::npos);
  r.splits = {1, INT64_MAX, INT64_MAX};  // from shared memory: a sum that would overflow is refused
  EXPECT_NE(a2a.Parse(e, 3, "x", &r).message().find("add up to more than the tensor's 6 rows"), std::string::npos);
  r.splits = {1, 5};
  EXPECT_NE(a2a.Parse(e, 3, "x", &r).message().find("2 splits for 3 ranks"), std::string::npos);
  // Two ranks: rank 0 sends 1 row to itself and 2 to rank 1, rank 1 sends 0 and 1.
  std::vector<float> d0 = {1, 2, 3}, d1 = {4};
  ReadyTensor t{{Tensor(abi::OpKind::kAlltoall, 0, &d0), Tensor(abi::OpKind::kAlltoall, 1, &d1)}};
  t.requests[0].splits = {1, 2};
  t.requests[1].splits = {0, 1};
  Collective::Placement p;
  ASSERT_TRUE(a2a.ResultPlace(t, 0, &p));
  EXPECT_EQ(p.rows, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(p.bytes, 1 * sizeof(float));
  ASSERT_TRUE(a2a.ResultPlace(t, 1, &p));  // the same storage again
  EXPECT_EQ(p.rows, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(p.bytes, 3 * sizeof(float));
  EXPECT_EQ(a2a.ResultBytes(t, 1), 3 * sizeof(float));
  std::vector<float> out0(1), out1(3);
  t.requests[0].result = reinterpret_cast<char*>(out0.data());
  t.requests[1].result = reinterpret_cast<char*>(out1.data());
  HostExecutor host(2);
  a2a.RunLocal({&t}, host);
  EXPECT_EQ(out0, (std::vector<float>{1}));
  EXPECT_EQ(out1, (std::vector<float>{2, 3, 4}));
}

TEST(Collectives, ReducescatterGivesTheFirstRanksOneRowMoreWhenRowsDoNotDivide) {
  const Collective& rs = *FindCollective(abi::OpKind::kReducescatter);
  // 5 rows among 3 ranks: 2, 2, 1.
  std::vector<float> a(5), b(5), c(5);
  for (int i = 0; i < 5; ++i) a[size_t(i)] = float(i), b[size_t(i)] = float(10 * i), c[size_t(i)] = float(100 * i);
  ReadyTensor t{{Tensor(abi::OpKind::kReducescatter, 0, &a), Tensor(abi::OpKind::kReducescatter, 1, &b),
                 Tensor(abi::OpKind::kReducescatter, 2, &c)}};
  HostExecutor host(3);
  rs.RunLocal({&t}, host);
  EXPECT_EQ(a[0], 0.0f);
  EXPECT_EQ(a[1], 111.0f);
  EXPECT_EQ(b[0], 222.0f);
  EXPECT_EQ(b[1], 333.0f);
  EXPECT_EQ(c[0], 444.0f);
  abi::SubmitEntry e{};
  e.op = SYNCD_MAX;
  Request r;
  r.shape = {4};
  EXPECT_NE(rs.Parse(e, 2, "x", &r).message().find("supports the ops Sum and Average, not max"), std::string::npos);
}

}  // namespace
}  // namespace syncd
