// The training engine (train/): data determinism, CP padding (the odd tail included), the dynamic-CP rule
// and placement, loss normalisation, recompute bit-identity, fp64 modes equal to cp1, and each planted
// training fault caught by the verdict.
#include <cstring>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "faults/registry.hpp"
#include "train/dynamic_cp.hpp"
#include "train/oracle.hpp"
#include "train/padding.hpp"
#include "train/verdict.hpp"

namespace gdnv::train {
namespace {

// A small run: 1 layer, hidden 16, Hk = Hv = 4, dk = dv = 4, V = 16, 3 steps, W = 4.
TrainSpec small_spec(const std::string& mode, DType dtype, std::vector<int> dynamic = {}) {
  TrainSpec s;
  s.model.layers = 1;
  s.model.layer = {16, 4, 4, 4, 4, 4, 1e-6, false};
  s.model.vocab = s.data.vocab = 16;
  s.data.docs_per_batch = 10;
  s.data.max_length = s.data.micro_batch_tokens = 64;
  s.adam.lr = 3e-3;
  s.mode = parse_train_mode(mode);
  s.cp = 4;
  s.dynamic = std::move(dynamic);
  s.dtype = dtype;
  s.steps = 3;
  return s;
}

Comparison fp64_comparison(const std::string& mode, std::vector<int> dynamic) {
  TrainSpec base = small_spec("cp1", DType::F64);
  return compare({base, {parse_train_mode(mode)}, std::move(dynamic)}, oracle_trajectory(base));
}

bool bitwise_equal(const Trajectory& a, const Trajectory& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (std::size_t t = 0; t < a.steps.size(); ++t) {
    const StepRecord &x = a.steps[t], &y = b.steps[t];
    for (auto [p, q] : {std::pair{x.loss, y.loss}, {x.grad_norm, y.grad_norm}, {x.update_norm, y.update_norm}})
      if (std::memcmp(&p, &q, sizeof p) != 0) return false;
    if (x.effective_tokens != y.effective_tokens) return false;
  }
  return true;
}

TEST(TrainData, GlobalBatchIsAPureFunctionOfSeedAndStep) {
  DataSpec d;
  const GlobalBatch a = global_batch(d, 3), b = global_batch(d, 3);
  ASSERT_EQ(a.micro_batches.size(), b.micro_batches.size());
  for (std::size_t m = 0; m < a.micro_batches.size(); ++m) EXPECT_EQ(a.micro_batches[m].docs, b.micro_batches[m].docs);
  d.seed = 1;
  EXPECT_NE(global_batch(d, 3).micro_batches[0].docs, a.micro_batches[0].docs);
  EXPECT_NE(global_batch(DataSpec{}, 4).micro_batches[0].docs, a.micro_batches[0].docs);
}

TEST(TrainData, MicroBatchesHoldEveryDocumentWithinTheBudget) {
  const DataSpec d;
  const GlobalBatch b = global_batch(d, 0);
  std::int64_t docs = 0;
  EXPECT_GE(b.micro_batches.size(), 2u);
  for (const MicroBatchData& mb : b.micro_batches) {
    EXPECT_LE(mb.tokens(), d.micro_batch_tokens);
    for (const Document& doc : mb.docs) {
      EXPECT_GE(static_cast<std::int64_t>(doc.size()), d.min_length);
      EXPECT_LE(static_cast<std::int64_t>(doc.size()), d.max_length);
      for (auto t : doc) EXPECT_TRUE(t >= 0 && t < d.vocab);
      ++docs;
    }
  }
  EXPECT_EQ(docs, d.docs_per_batch);
}

TEST(TrainData, BadSpecsNameTheFix) {
  DataSpec d;
  d.max_length = 200;
  try {
    validate(d);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a document must fit one micro-batch"), std::string::npos) << e.what();
  }
}

TEST(TrainPadding, EverySequencePadsToAMultipleOfTwoCp) {
  for (int c : {2, 4})
    for (std::int64_t L = 1; L <= 100; ++L) {
      const std::int64_t pad = pad_for(L, c);
      EXPECT_EQ((L + pad) % (2 * c), 0) << L << " at cp " << c;
      EXPECT_TRUE(pad >= 0 && pad < 2 * c) << L << " at cp " << c;
    }
  for (std::int64_t L = 1; L <= 9; ++L) EXPECT_EQ(pad_for(L, 1), 0);
}

// A tail that needs an odd pad: padding `pad` tokens per rank (pad * c in all) cannot produce it.
TEST(TrainPadding, AnOddTailPadIsPaddedExactly) {
  EXPECT_EQ(pad_for(13, 2), 3);
  EXPECT_EQ(pad_for(5, 4), 3);
  const Packed p = pack({{Document(13, 1), Document{2, 3}}}, 2);
  EXPECT_EQ(p.cu_seqlens, (std::vector<std::int64_t>{0, 16, 20}));
  EXPECT_EQ(p.pads, 5);
}

TEST(TrainPadding, PadsAndLastTokensAreNeverCounted) {
  const MicroBatchData mb{{Document{5, 6, 7}, Document{8, 9}}};
  const Packed p = pack(mb, 2);
  EXPECT_EQ(p.tokens, (std::vector<std::int64_t>{5, 6, 7, kPadToken, 8, 9, kPadToken, kPadToken}));
  EXPECT_EQ(p.targets, (std::vector<std::int64_t>{6, 7, kNoTarget, kNoTarget, 9, kNoTarget, kNoTarget, kNoTarget}));
  EXPECT_EQ(counted_tokens(p), mb.effective_tokens());
  EXPECT_EQ(counted_tokens(pack(mb, 2, true)), 8);  // the planted fault's count: every position
}

TEST(TrainDynamicCp, SmallestSizeWhosePerRankShareFitsTheBudget) {
  const std::vector<int> allowed{4, 1, 2};
  auto of = [](std::int64_t tokens) { return MicroBatchData{{Document(static_cast<std::size_t>(tokens), 1)}}; };
  EXPECT_EQ(choose_cp(of(32), allowed, 32), 1);
  EXPECT_EQ(choose_cp(of(33), allowed, 32), 2);   // 36 padded: 18 per rank
  EXPECT_EQ(choose_cp(of(61), allowed, 32), 2);   // 64 padded: 32 per rank
  EXPECT_EQ(choose_cp(of(65), allowed, 32), 4);   // 68 at cp 2: 34 per rank
  EXPECT_EQ(choose_cp(of(200), allowed, 32), 4);  // nothing fits: the largest
}

TEST(TrainDynamicCp, MicroBatchesOfASizeGoRoundRobinOverItsSubGroups) {
  const std::vector<Placement> p = place({1, 2, 4, 2, 1, 1, 2}, 4);
  const std::vector<int> groups{0, 0, 0, 1, 1, 2, 0};
  for (std::size_t m = 0; m < p.size(); ++m) EXPECT_EQ(p[m].group, groups[m]) << m;
  EXPECT_TRUE(p[3].holds(2) && p[3].holds(3) && !p[3].holds(1));
}

TEST(TrainDynamicCp, TheGateConfigurationUsesEverySize) {
  TrainSpec s = small_spec("headwise", DType::BF16, {1, 2, 4});
  s.data = DataSpec{};
  s.model.vocab = s.data.vocab;
  std::map<int, int> used;
  for (int step = 0; step < 8; ++step)
    for (int c : micro_batch_cps(s, global_batch(s.data, step))) ++used[c];
  EXPECT_GT(used[1], 0);
  EXPECT_GT(used[2], 0);
  EXPECT_GT(used[4], 0);
}

// The loss divides by the global batch's count on every rank: a static CP run's first loss (before any
// update) is cp1's and the oracle's, however unevenly the ranks' shards hold counted tokens.
TEST(TrainLoss, NormalisedByTheGlobalCountOfEffectiveTokens) {
  TrainSpec s = small_spec("chunkwise", DType::F64);
  s.steps = 1;
  const Trajectory run = train_in_process(s), oracle = oracle_trajectory(s);
  EXPECT_NEAR(run.steps[0].loss, oracle.steps[0].loss, 1e-12 * oracle.steps[0].loss);
  EXPECT_EQ(run.steps[0].effective_tokens, global_batch(s.data, 0).effective_tokens());
}

TEST(TrainRecompute, FullRecomputeChangesNoBitOfTheTrajectory) {
  for (const char* mode : {"headwise", "chunkwise"}) {
    TrainSpec s = small_spec(mode, DType::BF16, {1, 2, 4});
    s.recompute = Recompute::None;
    const Trajectory none = train_in_process(s);
    s.recompute = Recompute::Full;
    EXPECT_TRUE(bitwise_equal(none, train_in_process(s))) << mode;
  }
}

TEST(TrainRecompute, AllGatherWithGradientsNeedsFullRecompute) {
  TrainSpec s = small_spec("all_gather", DType::BF16);
  s.recompute = Recompute::None;
  try {
    (void)train_in_process(s);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--recompute none with all_gather among the --mode list (the default list "
                                         "has it): micro-batch 1 of step 0 runs all_gather at cp=4"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("pass --recompute full"), std::string::npos) << e.what();
  }
}

// Only a micro-batch that enters the all_gather path (CP > 1) needs it: under dynamic CP with a budget every
// micro-batch fits at CP = 1, none does.
TEST(TrainRecompute, AllGatherAtCpOneNeedsNoRecompute) {
  TrainSpec s = small_spec("all_gather", DType::BF16, {1, 2, 4});
  s.recompute = Recompute::None;
  s.rank_budget = s.data.micro_batch_tokens;
  EXPECT_EQ(train_in_process(s).steps.size(), 3u);
}

TEST(TrainVerdict, Fp64ModesEqualCp1AtEveryStep) {
  for (const char* mode : {"headwise", "chunkwise", "all_gather"}) {
    const Comparison c = fp64_comparison(mode, {1, 2, 4});
    ASSERT_EQ(c.verdicts.size(), 2u);
    for (const ModeVerdict& v : c.verdicts) {
      EXPECT_TRUE(v.pass) << v.mode << "@" << v.cp << ": " << v.why;
      EXPECT_LE(v.max_gap, kFp64Relative * c.cp1.steps[0].loss) << v.mode << "@" << v.cp;
    }
  }
}

TEST(TrainVerdict, AReorderedCp1IsTheNoiseBandAndPassesItsOwnBand) {
  TrainSpec base = small_spec("cp1", DType::BF16);
  const Comparison c = compare({base, {TrainMode::Chunkwise}, {}}, oracle_trajectory(base));
  EXPECT_GT(c.band.max, 0.0);
  EXPECT_TRUE(c.pass) << c.verdicts.at(0).why;
}

// A trajectory whose per-step losses are `losses`, with 500 effective tokens a step.
Trajectory losses_of(const std::string& mode, const std::vector<double>& losses, std::int64_t tokens = 500) {
  Trajectory t{mode, "4", {}, 0};
  for (std::size_t i = 0; i < losses.size(); ++i) t.steps.push_back({static_cast<int>(i), losses[i], 1, 1, tokens, {}});
  return t;
}

// The bf16 rules on hand-made curves: the band is cp1-reordered's largest gap (1e-3 here, above the floor
// 2^-9 * 3 / sqrt(500) = 2.6e-4), a run may reach 6 x that from cp1, and 4 x cp1's oracle deviation
// (1.5e-3 here).
TEST(TrainVerdict, Bf16RunsAreJudgedByTheBandTheOracleAndTheTokens) {
  const Trajectory cp1 = losses_of("cp1", {3.0, 2.9, 2.8});
  const Trajectory reordered = losses_of("cp1-reordered", {3.0, 2.901, 2.8005});
  const Trajectory oracle = losses_of("oracle", {3.0, 2.9015, 2.8});  // cp1 off it by 1.5e-3
  const Comparison c = judge(DType::BF16, cp1, reordered, oracle,
                             {losses_of("inside", {3.0, 2.9055, 2.795}), losses_of("past band", {3.0, 2.9065, 2.8}),
                              losses_of("past oracle", {3.0, 2.895, 2.8}), losses_of("tokens", {3.0, 2.9, 2.8}, 501)});
  EXPECT_NEAR(c.band.max, 1e-3, 1e-12);
  EXPECT_NEAR(c.band.limit, 6e-3, 1e-12);
  ASSERT_EQ(c.verdicts.size(), 4u);
  EXPECT_TRUE(c.verdicts[0].pass) << c.verdicts[0].why;
  EXPECT_NE(c.verdicts[1].why.find("max per-step |dloss| vs cp1 6.500e-03 > 6.000e+00 x noise band"), std::string::npos)
      << c.verdicts[1].why;
  EXPECT_NE(c.verdicts[2].why.find("max per-step |loss - oracle| 6.500e-03 > 4.000e+00 x cp1's 1.500e-03"),
            std::string::npos)
      << c.verdicts[2].why;
  EXPECT_NE(c.verdicts[3].why.find("effective tokens differ from cp1's at step 0: 501"), std::string::npos)
      << c.verdicts[3].why;
  EXPECT_FALSE(c.pass);
  EXPECT_TRUE(c.why.empty()) << c.why;
  // cp1 and the oracle train on one data stream: different counts fail the comparison itself.
  const Comparison off = judge(DType::BF16, cp1, reordered, losses_of("oracle", {3.0, 2.9, 2.8}, 499), {});
  EXPECT_FALSE(off.pass);
  EXPECT_EQ(off.why, "cp1's effective tokens differ from the oracle's at step 0: 500 effective tokens, oracle 499");
}

// Each planted training fault fails an fp64 comparison under dynamic CP (every fault shows there).
class TrainFault : public ::testing::TestWithParam<Fault> {};

TEST_P(TrainFault, FailsTheFp64ComparisonUnderDynamicCp) {
  const ScopedFault fault(GetParam());
  const Comparison c = fp64_comparison("headwise", {1, 2, 4});
  EXPECT_FALSE(c.pass);
  EXPECT_FALSE(c.verdicts.at(1).pass) << "dynamic run passed under " << fault_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Faults, TrainFault,
                         ::testing::Values(Fault::LossNormalizedPerRank, Fault::PaddingCountedInLoss,
                                           Fault::DynamicCpGradsOverStaticWorld, Fault::DynamicCpGradsNotCombined),
                         [](const auto& p) { return std::string(fault_name(p.param)); });

// The faults that act on every CP run fail a static one too.
TEST(TrainFaultStatic, LossAndPaddingFaultsFailStaticCp) {
  for (Fault f : {Fault::LossNormalizedPerRank, Fault::PaddingCountedInLoss}) {
    const ScopedFault fault(f);
    EXPECT_FALSE(fp64_comparison("chunkwise", {}).pass) << fault_name(f);
  }
}

}  // namespace
}  // namespace gdnv::train
