#include "daemon/base/config.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

namespace syncd {
namespace {

TEST(Config, DefaultsComeFromTheTable) {
  auto c = BuildConfig({}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fusion_threshold, 64ull << 20);
  EXPECT_EQ(c->arena_bytes, 512ull << 20);
  EXPECT_EQ(c->ring_entries, 1024u);
  EXPECT_EQ(c->cores, "auto");
  EXPECT_EQ(c->log_level, "info");
  EXPECT_EQ(c->local_size, 0u);
  EXPECT_FALSE(c->run_dir.empty());
}

TEST(Config, FlagBeatsEnvironmentBeatsDefault) {
  auto c = BuildConfig({{"fusion-threshold", "1M"}},
                       {{"SYNCD_FUSION_THRESHOLD", "2M"}, {"SYNCD_ARENA_SIZE", "64M"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fusion_threshold, 1ull << 20);
  EXPECT_EQ(c->arena_bytes, 64ull << 20);
}

TEST(Config, BadValuesNameTheSetting) {
  auto a = BuildConfig({{"ring-entries", "1000"}}, {});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("ring-entries"), std::string::npos);
  auto b = BuildConfig({}, {{"SYNCD_SPIN_US", "fast"}});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("SYNCD_SPIN_US"), std::string::npos);
  auto d = BuildConfig({{"log-level", "loud"}}, {});
  EXPECT_FALSE(d.ok());
}

TEST(Config, CoordinationModesAreParsedOnceIntoTheirEnum) {
  auto def = BuildConfig({}, {});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->coord, abi::CoordMode::kNegotiate);
  for (uint32_t m = 0; m < std::size(abi::kCoordModeNames); ++m) {
    auto c = BuildConfig({{"coord", abi::kCoordModeNames[m]}}, {});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->coord, abi::CoordMode(m)) << abi::kCoordModeNames[m];
    EXPECT_STREQ(abi::CoordName(c->coord), abi::kCoordModeNames[m]);
  }
  auto bad = BuildConfig({}, {{"SYNCD_COORD", "horovod"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown mode 'horovod'"), std::string::npos) << bad.status().message();
}

TEST(Config, EveryOtherModeIsParsedOnceIntoItsValue) {
  auto def = BuildConfig({}, {});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->cycle_start, CycleStart::kWork);
  EXPECT_EQ(def->ucx_peer_errors, PeerErrors::kAuto);
  EXPECT_TRUE(def->gpus);
  EXPECT_TRUE(def->gpu_ipc_cache);
  auto c = BuildConfig({{"cycle-start", "timer"}, {"ucx-peer-errors", "off"}, {"gpus", "none"}, {"gpu-ipc-cache", "off"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cycle_start, CycleStart::kTimer);
  EXPECT_EQ(c->ucx_peer_errors, PeerErrors::kOff);
  EXPECT_FALSE(c->gpus);
  EXPECT_FALSE(c->gpu_ipc_cache);
  auto bad = BuildConfig({}, {{"SYNCD_UCX_PEER_ERRORS", "sometimes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "from SYNCD_UCX_PEER_ERRORS: ucx-peer-errors: expected auto, on or off, got 'sometimes'");
}

TEST(Config, CompressionIsParsedWithItsMinimumAndTakenUnderTopo) {
  auto def = BuildConfig({}, {});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->compression, SYNCD_COMPRESSION_NONE);
  EXPECT_EQ(def->compression_min_bytes, 64u << 10);
  auto c = BuildConfig({{"compression", "bf16"}, {"compression-min-bytes", "1M"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compression, SYNCD_COMPRESSION_BF16);
  EXPECT_EQ(c->compression_min_bytes, 1u << 20);
  auto bad = BuildConfig({{"compression", "int8"}}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "compression: expected none, fp16, bf16, topk, onebit or powersgd, got 'int8'");
  // Random-k is withdrawn: refused, saying why.
  auto withdrawn = BuildConfig({{"compression", "randomk"}}, {});
  ASSERT_FALSE(withdrawn.ok());
  EXPECT_NE(withdrawn.status().message().find("compression: random-k compression is withdrawn: with error feedback it "
                                              "does not train under momentum"),
            std::string::npos)
      << withdrawn.status().message();
  // TOPO plans carry each tensor's compression, the daemon's default resolved as for a submission.
  auto topo = BuildConfig({{"compression", "fp16"}, {"coord", "topo"}}, {});
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_EQ(topo->compression, SYNCD_COMPRESSION_FP16);
}

TEST(Config, PowerSgdsRankIsParsedWithinItsBounds) {
  auto def = BuildConfig({}, {});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->compression_rank, 4u);
  auto c = BuildConfig({{"compression", "powersgd"}, {"compression-rank", "16"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compression, SYNCD_COMPRESSION_POWERSGD);
  EXPECT_EQ(c->compression_rank, 16u);
  for (const char* bad : {"0", "1025", "two"}) {
    auto b = BuildConfig({{"compression-rank", bad}}, {});
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("compression-rank"), std::string::npos) << b.status().message();
    }
  }
}

TEST(Config, TopKsRatioAndTheResidualBoundAreParsed) {
  auto def = BuildConfig({}, {});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->compression_ppm, 10'000u);  // 1 %
  EXPECT_EQ(def->compression_residual_bytes, 1ull << 30);
  auto c = BuildConfig({{"compression", "topk"}, {"compression-ratio", "0.001"}, {"compression-residual-bytes", "64M"}},
                       {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->compression, SYNCD_COMPRESSION_TOPK);
  EXPECT_EQ(c->compression_ppm, 1'000u);
  EXPECT_EQ(c->compression_residual_bytes, 64ull << 20);
  for (const char* bad : {"0", "1.5", "-0.1", "x"}) {
    auto b = BuildConfig({{"compression-ratio", bad}}, {});
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().message(), std::string("compression-ratio: expected a ratio in (0, 1], got '") + bad + "'");
  }
}

TEST(Config, EveryEntryHasFlagEnvDefaultAndHelp) {
  for (const ConfigEntry& e : ConfigTable()) {
    EXPECT_FALSE(e.name.empty());
    EXPECT_EQ(e.env.rfind("SYNCD_", 0), 0u) << e.env;
    EXPECT_FALSE(e.default_text.empty()) << e.name;
    EXPECT_FALSE(e.help.empty()) << e.name;
    EXPECT_NE(ConfigMarkdownTable().find("`--" + e.name + "`"), std::string::npos);
  }
}

TEST(Config, VacantRanksAreRefusedWhereTheJobCannotGoOnWithoutThem) {
  const std::map<std::string, std::string> job = {{"nodes", "2"}, {"node-rank", "1"}, {"local-size", "2"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(job.begin(), job.end());
    return BuildConfig(extra, {});
  };
  auto ok = with({{"vacant-ranks", "1,3"}, {"on-loss", "restore"}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->vacant_ranks, (std::vector<uint32_t>{1, 3}));
  EXPECT_TRUE(with({{"vacant-ranks", "none"}}).ok());
  for (const auto& [value, on_loss, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"1", "fail", "needs --on-loss continue or restore"},
           {"2-3", "continue", "every rank of node 1 (this one) is vacant: its daemon starts the job before a "
                               "rank attaches, which needs --job-id"},
           {"0-3", "continue", "every rank of the job is vacant"},
           {"7", "restore", "rank 7 is not in the job (4 ranks"},
           {"1-x", "restore", "bad entry '1-x'"}}) {
    auto c = with({{"vacant-ranks", value}, {"on-loss", on_loss}});
    ASSERT_FALSE(c.ok()) << value;
    EXPECT_NE(c.status().message().find(why), std::string::npos) << c.status().message();
  }
}

TEST(Config, ANodeWhollyVacantStartsItsJobFromJobId) {
  std::map<std::string, std::string> flags = {{"nodes", "2"},        {"node-rank", "1"},         {"local-size", "2"},
                                              {"on-loss", "continue"}, {"vacant-ranks", "2,3"}, {"job-id", "0x2a"}};
  auto c = BuildConfig(flags, {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->job_id, 42u);
  EXPECT_TRUE(NodeStartsVacant(*c));
  flags["node-rank"] = "0";  // node 0 keeps its ranks; node 1's vacancy needs nothing of it
  flags.erase("job-id");
  c = BuildConfig(flags, {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(NodeStartsVacant(*c));
  flags["coord"] = "topo";  // node 1 gets the plan the others register (ProcessSet::ExecuteAgreed)
  c = BuildConfig(flags, {});
  EXPECT_TRUE(c.ok()) << c.status().message();
  EXPECT_NE(BuildConfig({{"job-id", "x1"}}, {}).status().message().find("job-id: 'x1' is not a job id"),
            std::string::npos);
  EXPECT_EQ(BuildConfig({}, {{"SYNCD_JOB_ID", "17"}})->job_id, 17u);
}

TEST(ParseBytes, UnitsAndErrors) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64K"), 64u << 10);
  EXPECT_EQ(*ParseBytes("64MiB"), 64u << 20);
  EXPECT_EQ(*ParseBytes("1g"), 1ull << 30);
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("12Q").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999G").ok());
}

}  // namespace
}  // namespace syncd
