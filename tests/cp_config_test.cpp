// The illegal-combination matrix of docs/DESIGN.md §3.1: each rule fails with a message naming the fix,
// before any collective.
#include <algorithm>
#include <cctype>

#include <gtest/gtest.h>

#include "comm/groups.hpp"
#include "comm/inprocess.hpp"
#include "cp/illegal.hpp"
#include "cp/layer.hpp"
#include "cpu/backend.hpp"
#include "reference/case_params.hpp"
#include "reference/layer_params.hpp"

namespace gdnv::cp {
namespace {

ref::LayerConfig layer(std::int64_t Hk = 4, std::int64_t Hv = 8) {
  return ref::LayerConfig({32, Hk, Hv, 8, 8, 4, 1e-6, false});
}

CpConfig config(CpMode mode, int cp, int tp = 1) {
  CpConfig c;
  c.mode = mode;
  c.cp = cp;
  c.tp = tp;
  return c;
}

std::string static_error(const CpConfig& cp, const ref::LayerConfig& l = layer()) {
  try {
    validate_static(cp, l);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string micro_batch_error(const CpConfig& cp, const MicroBatchShape& mb) {
  try {
    validate_micro_batch(cp, layer(), mb);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// One case per row of the table of cp/illegal.hpp: its example is rejected by its own rule (the layer
// config's own check for Hv % Hk) with the message naming the fix.
class IllegalRules : public ::testing::TestWithParam<std::size_t> {};

TEST_P(IllegalRules, EachIsRejectedByItsOwnRuleNamingTheFix) {
  const IllegalRule& rule = illegal_rules()[GetParam()];
  const Rejection got = check_example(rule);
  EXPECT_HAS(got.message, rule.fragment);
  if (rule.stage == Stage::LayerConfig) EXPECT_FALSE(got.rule.has_value()) << got.message;
  else EXPECT_EQ(got.rule, rule.id) << got.message;
}

INSTANTIATE_TEST_SUITE_P(Table, IllegalRules, ::testing::Range<std::size_t>(0, illegal_rules().size()),
                         [](const auto& p) {
                           std::string name;
                           for (char ch : illegal_rules()[p.param].name)
                             if (std::isalnum(static_cast<unsigned char>(ch))) name += ch;
                           return name;
                         });

// The configuration rules fire when the layer is built, before any collective.
TEST(IllegalRulesTable, ConfigurationRulesPerformNoCollective) {
  for (const IllegalRule& rule : illegal_rules()) {
    if (rule.stage != Stage::Static) continue;
    CpConfig cp = rule.config;
    cp.mode = parse_mode(rule.mode);
    const ref::LayerConfig l = layer(rule.Hk, rule.Hv);
    const ref::LayerParams params = ref::case_params(l, 1);
    comm::run_world(std::max(cp.cp, 1), [&](comm::Communicator& world) {
      auto be = cpu::make_backend(DType::F32);
      const comm::ScopedCounter counter(world.accounting());
      try {
        GdnCpLayer(l, cp, params, *be, world);
        ADD_FAILURE() << rule.name << ": accepted";
      } catch (const IllegalCombination& e) {
        EXPECT_EQ(e.rule(), rule.id) << e.what();
      }
      EXPECT_EQ(counter.delta().calls(), 0u) << rule.name;
    });
  }
}

// Every rule the validation code can throw has a row of the table (so an example, a name and a fix).
TEST(IllegalRulesTable, EveryRuleHasARow) {
  for (int id = 0; id < static_cast<int>(Rule::kCount); ++id)
    EXPECT_TRUE(std::any_of(illegal_rules().begin(), illegal_rules().end(),
                            [&](const IllegalRule& r) { return r.id == static_cast<Rule>(id); }))
        << "rule " << id << " has no row in cp/illegal.cpp";
}

TEST(CpConfig, UnknownModeIncludingAutoNamesTheThreeModes) {
  for (const char* name : {"auto", "ulysses", ""}) {
    try {
      parse_mode(name);
      FAIL() << name;
    } catch (const ConfigError& e) {
      EXPECT_HAS(std::string(e.what()), "use one of 'headwise', 'chunkwise', 'all_gather'");
    }
  }
}

TEST(CpConfig, HeadwiseNeedsHeadsDivisibleByTpTimesCp) {
  const std::string msg = static_error(config(CpMode::Headwise, 8), layer(4, 8));
  EXPECT_HAS(msg, "tp*cp = 1*8 = 8");
  EXPECT_HAS(msg, "use linear_cp_mode='chunkwise' or 'all_gather'");
  EXPECT_EQ(static_error(config(CpMode::Headwise, 2, 2)), "(accepted)");
}

TEST(CpConfig, ChunkwiseAndAllGatherNeedHeadsDivisibleByTp) {
  EXPECT_HAS(static_error(config(CpMode::Chunkwise, 2, 3)), "divisible by tp = 3");
  EXPECT_HAS(static_error(config(CpMode::AllGather, 2, 3)), "divisible by tp = 3");
  EXPECT_EQ(static_error(config(CpMode::AllGather, 8, 1)), "(accepted)");
}

TEST(CpConfig, ChunkwiseRejectsDeterministicWithCpOrDynamicCp) {
  CpConfig c = config(CpMode::Chunkwise, 2);
  c.deterministic = true;
  EXPECT_HAS(static_error(c), "not deterministic");
  c.cp = 1;
  EXPECT_EQ(static_error(c), "(accepted)");
  c.cp = 2;
  c.dynamic_cp = {1};
  EXPECT_HAS(static_error(c), "not deterministic");
}

TEST(CpConfig, InferenceOnlyWithHeadwise) {
  for (CpMode mode : {CpMode::Chunkwise, CpMode::AllGather}) {
    CpConfig c = config(mode, 2);
    c.inference = true;
    EXPECT_HAS(static_error(c), "use linear_cp_mode='headwise' for inference");
  }
  CpConfig h = config(CpMode::Headwise, 2);
  h.inference = true;
  EXPECT_EQ(static_error(h), "(accepted)");
}

TEST(CpConfig, AllGatherRejectsSbhdWithCp) {
  EXPECT_HAS(micro_batch_error(config(CpMode::AllGather, 2), {Format::Sbhd, 1, {8}}), "supports THD input only");
  EXPECT_EQ(micro_batch_error(config(CpMode::AllGather, 1), {Format::Sbhd, 1, {8}}), "(accepted)");
}

TEST(CpConfig, LengthsMustDivideByCpThenTwoCp) {
  const CpConfig c = config(CpMode::Headwise, 2);
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {8, 7, 9}}), "sequence lengths 7,9 are not divisible by cp = 2");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {8, 6}}), "sequence lengths 6 are not divisible by 2*cp = 4");
}

// CP=1 splits nothing: any length, odd ones too, in every mode, THD and SBHD, whether CP=1 is the
// static size or a dynamic micro-batch's in a larger static group.
TEST(CpConfig, Cp1AcceptsAnyLength) {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather}) {
    const std::string_view name = mode_name(mode);
    EXPECT_EQ(micro_batch_error(config(mode, 1), {Format::Thd, 1, {5, 9, 1}}), "(accepted)") << name;
    EXPECT_EQ(micro_batch_error(config(mode, 1), {Format::Sbhd, 2, {7}}), "(accepted)") << name;
    EXPECT_EQ(micro_batch_error(config(mode, 2), {Format::Thd, 1, {5, 9}, true, 1, 1}), "(accepted)") << name;
  }
}

// A dynamic micro-batch is padded for its own CP size only: 4, 12 at CP 2 inside a static 4.
TEST(CpConfig, DynamicMicroBatchIsValidatedAtItsOwnCpSize) {
  const CpConfig c = config(CpMode::Headwise, 4);
  EXPECT_EQ(micro_batch_error(c, {Format::Thd, 1, {4, 12}, true, 2, 2}), "(accepted)");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {4, 12}}), "sequence lengths 4,12 are not divisible by 2*cp = 8");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {4, 6}, true, 2, 2}),
             "sequence lengths 6 are not divisible by 2*cp = 4");
}

TEST(CpConfig, DynamicGroupAndLocalSizeGoTogetherAndAgree) {
  const CpConfig c = config(CpMode::Headwise, 4);
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {16}, true, 0, 2}), "only one of cp_group and local_cp_size");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {16}, false, 2, 0}), "only one of cp_group and local_cp_size");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {16}, true, 4, 2}),
             "local_cp_size = 4 but the cp_group has 2 ranks");
  EXPECT_HAS(micro_batch_error(c, {Format::Thd, 1, {18}, true, 3, 3}), "dynamic CP size 3 does not divide");
  EXPECT_EQ(micro_batch_error(c, {Format::Thd, 1, {16}, true, 2, 2}), "(accepted)");
}

// The layer validates before any collective: construction with an illegal configuration, and a
// micro-batch with illegal lengths, leave the accounting untouched.
TEST(CpConfig, IllegalCombinationsPerformNoCollective) {
  const ref::LayerParams params = ref::case_params(layer(), 1);
  comm::run_world(2, [&](comm::Communicator& world) {
    auto be = cpu::make_backend(DType::F32);
    CpConfig bad = config(CpMode::Chunkwise, 2);
    bad.allgather_cp = true;
    {
      const comm::ScopedCounter counter(world.accounting());
      EXPECT_THROW(GdnCpLayer(layer(), bad, params, *be, world), ConfigError);
      EXPECT_EQ(counter.delta().calls(), 0u);
    }
    const GdnCpLayer ok(layer(), config(CpMode::Headwise, 2), params, *be, world);
    const comm::ScopedCounter counter(world.accounting());
    EXPECT_THROW(ok.check({Format::Thd, {0, 8, 14}}), ConfigError);
    EXPECT_EQ(counter.delta().calls(), 0u);
  });
}

// On a TP x CP grid of 2 x 2 in-process ranks, head counts that do not shard fail at construction,
// before any collective, on every rank: headwise needs tp*cp | Hk, the others tp | Hk.
TEST(CpConfig, IllegalHeadCountsOnTheTpCpGridFailBeforeAnyCollective) {
  const std::pair<CpMode, ref::LayerConfig> bad[] = {
      {CpMode::Headwise, layer(2, 4)}, {CpMode::Chunkwise, layer(3, 6)}, {CpMode::AllGather, layer(1, 2)}};
  for (const auto& entry : bad) {
    const CpMode mode = entry.first;  // named, not bound: clang before 16 cannot capture a binding
    const ref::LayerConfig& l = entry.second;
    const ref::LayerParams params = ref::case_params(l, 1);
    comm::run_world(4, [&](comm::Communicator& world) {
      const comm::TpCpGrid grid = comm::make_tp_cp_grid(world, 2);
      auto be = cpu::make_backend(DType::F32);
      const comm::ScopedCounter counter(world.accounting());
      try {
        GdnCpLayer(l, config(mode, 2, 2), params, *be, *grid.cp, grid.tp.get());
        ADD_FAILURE() << mode_name(mode) << " accepted Hk=" << l.Hk();
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(mode == CpMode::Headwise ? "divisible by tp*cp" : "divisible by tp ="),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(counter.delta().calls(), 0u);
    });
  }
}

// forward/backward are const and keep per-call state in the caller's Context: the layer's fingerprint
// is unchanged by micro-batches of every declared CP size, and it does see a parameter change.
TEST(GdnCpLayer, ForwardAndBackwardNeverWriteLayerState) {
  const ref::LayerParams params = ref::case_params(layer(), 1);
  ref::LayerParams other = params;
  other.at(ref::kDtBias).set(0, 2.0);
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
    comm::run_world(2, [&](comm::Communicator& world) {
      auto be = cpu::make_backend(DType::F32);
      CpConfig cp = config(mode, 2);
      cp.dynamic_cp = {1, 2};
      const GdnCpLayer gdn(layer(), cp, params, *be, world);
      const std::uint64_t before = gdn.fingerprint();
      EXPECT_NE(before, GdnCpLayer(layer(), cp, other, *be, world).fingerprint());
      for (int c : {2, 1}) {
        comm::Communicator* group = c == 2 ? nullptr : &gdn.dynamic_group(c);
        auto mb = gdn.prepare(gdn.check({Format::Thd, {0, 8, 16}}, group, group ? c : 0));
        const Buffer h = be->upload(Tensor(DType::F32, {mb->local_tokens, 1, 32}), DType::F32);
        Context ctx;
        const Buffer out = gdn.forward(mb, h, ctx);
        (void)gdn.backward(ctx, out);
        EXPECT_EQ(gdn.fingerprint(), before) << mode_name(mode) << " cp=" << c;
      }
    });
}

}  // namespace
}  // namespace gdnv::cp
