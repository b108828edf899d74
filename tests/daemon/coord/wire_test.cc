// coord/wire.h: what one daemon sends another, encoded and decoded; a message of another daemon
// protocol is refused naming both versions.
#include "daemon/coord/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "daemon/base/version.h"

namespace syncd {
namespace {

NameRequest Announced(const std::string& name) {
  NameRequest r;
  r.name = name;
  r.meta.kind = 1;
  r.meta.dtype = SYNCD_FLOAT32;
  r.meta.shape = {4, 2};
  r.meta.compression = SYNCD_COMPRESSION_BF16;  // travels, and is compared with the rest
  r.error = "";
  r.waited_ns = 42;
  return r;
}

// The one integer a name agrees on travels as TensorMeta::arg and lands in the field of its kind.
TEST(Wire, TheAgreedArgumentIsTheKindsOwnField) {
  TensorMeta meta;
  meta.arg = 3;
  meta.shape = {1};
  const std::pair<abi::OpKind, int32_t Request::*> kinds[] = {
      {abi::OpKind::kBroadcast, &Request::root},
      {abi::OpKind::kJoin, &Request::last_joined},
      {abi::OpKind::kRemoveProcessSet, &Request::removed_set},
  };
  for (const auto& [kind, field] : kinds) {
    meta.kind = uint32_t(kind);
    const Request r = RequestOf(meta, "t", 0, 0);
    EXPECT_EQ(r.*field, 3) << int(kind);
    EXPECT_EQ(r.root + r.last_joined + r.removed_set + r.peer + r.quorum, 3) << "only its own field: " << int(kind);
    EXPECT_EQ(AgreedArg(r), 3);
  }
}

// A join made for ranks the job goes on without says so (TensorMeta::absent, from its requests):
// the coordinator lets that node stand in for process set changes. Only a join may say it.
TEST(Wire, AJoinOfLostRanksSaysSoAndNothingElseMay) {
  ReadyTensor join;
  for (uint32_t l = 0; l < 2; ++l) {
    Request r;
    r.kind = abi::OpKind::kJoin;
    r.name = abi::kJoinName;
    r.absent = true;
    join.requests.push_back(r);
  }
  EXPECT_EQ(TensorMeta::Of(join).absent, 1u);
  join.requests[1].absent = false;  // one rank joined itself (hvd.join): it would miss the change
  EXPECT_EQ(TensorMeta::Of(join).absent, 0u);
  join.requests[1].absent = true;

  NameRequest r;
  r.name = abi::kJoinName;
  r.meta = TensorMeta::Of(join);
  StatusOr<std::vector<NameRequest>> got = DecodeRequests(EncodeRequests({r}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)[0].meta.absent, 1u);
  NameRequest other = Announced("a");
  other.meta.absent = 1;  // an allreduce
  EXPECT_FALSE(DecodeRequests(EncodeRequests({other})).ok());
}

TEST(Wire, ControlMessagesRoundTripWithTheirText) {
  ControlMessage m;
  m.kind = ControlMessage::Kind::kAbort;
  m.job = 0x1234;
  m.cycle = 7;
  m.code = SYNCD_ERR_RANK_LOST;
  m.text = std::string(kControlTextBytes + 10, 'x');  // longer than fits: cut
  char bytes[kControlMessageBytes];
  EncodeControl(m, bytes);
  StatusOr<ControlMessage> back = DecodeControl(bytes, sizeof(bytes));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kind, m.kind);
  EXPECT_EQ(back->job, m.job);
  EXPECT_EQ(back->cycle, m.cycle);
  EXPECT_EQ(back->code, m.code);
  EXPECT_EQ(back->text, m.text.substr(0, kControlTextBytes));
}

TEST(Wire, AControlMessageOfAnotherProtocolIsRefusedNamingBothVersions) {
  ControlMessage m;
  m.kind = ControlMessage::Kind::kCycle;
  char bytes[kControlMessageBytes];
  EncodeControl(m, bytes);
  bytes[21] = char(kWireVersion + 1);
  StatusOr<ControlMessage> back = DecodeControl(bytes, sizeof(bytes));
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("control message of daemon protocol " + std::to_string(kWireVersion + 1) +
                                         "; this daemon speaks " + std::to_string(kWireVersion)),
            std::string::npos)
      << back.status().ToString();
}

TEST(Wire, NegotiationListsRoundTripAndRefuseAnotherProtocol) {
  const std::string requests = EncodeRequests({Announced("a"), Announced("b")});
  StatusOr<std::vector<NameRequest>> got = DecodeRequests(requests);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].name, "b");
  EXPECT_EQ((*got)[1].meta, Announced("b").meta);
  EXPECT_EQ(RequestOf((*got)[1].meta, "b", 1, 0).compression, SYNCD_COMPRESSION_BF16);

  NameResponse resp;
  resp.name = "a";
  resp.cache_bit = 3;
  resp.meta = Announced("a").meta;
  const std::string responses = EncodeResponses({resp});
  ASSERT_TRUE(DecodeResponses(responses).ok()) << DecodeResponses(responses).status().ToString();

  for (std::string bytes : {requests, responses}) {
    const uint32_t other = kWireVersion - 1;
    memcpy(bytes.data(), &other, sizeof(other));
    const bool is_requests = bytes.size() == requests.size() && bytes.substr(4) == requests.substr(4);
    const Status st = is_requests ? DecodeRequests(bytes).status() : DecodeResponses(bytes).status();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("of daemon protocol " + std::to_string(other) + "; this daemon speaks " +
                                std::to_string(kWireVersion)),
              std::string::npos)
        << st.ToString();
  }
}

// The fuzzer's seeds (tests/fuzz/make_seeds.py) are what a daemon of this protocol sends: each
// decodes, so the fuzzer starts from messages that get past the version check.
TEST(Wire, TheFuzzSeedsDecode) {
  const std::string dir = std::string(SYNCD_SOURCE_DIR) + "/tests/fuzz/corpus/coord_wire/";
  // make_seeds.py writes all but the last, a crash input kept as a seed (its version, and a field
  // added to TensorMeta, are raised by hand with kWireVersion: this test fails until they are).
  for (const char* seed : {"requests", "responses", "abort", "cycle", "hello", "health", "scatter-scalar-from-the-wire"}) {
    std::ifstream in(dir + seed, std::ios::binary);
    ASSERT_TRUE(in) << dir + seed;
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty()) << seed;
    const std::string body = bytes.substr(1);
    const Status st = bytes[0] == 0   ? DecodeRequests(body).status()
                      : bytes[0] == 1 ? DecodeResponses(body).status()
                                      : DecodeControl(body.data(), body.size()).status();
    EXPECT_TRUE(st.ok()) << seed << ": " << st.ToString();
  }
}

}  // namespace
}  // namespace syncd
