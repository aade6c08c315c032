// The named stages (reference/layer.hpp) recorded by every mode and reassembled by the harness, and
// the first-divergence report (harness/verdict.hpp): a clean build passes every stage, and each planted
// fault (docs/DESIGN.md §10) is named at the stage where it acts.
#include <gtest/gtest.h>

#include "cpu/backend.hpp"
#include "faults/registry.hpp"
#include "gpu/kernel_backend.hpp"
#include "harness/verdict.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

const BackendFactory kCpu = [](DType d) { return cpu::make_backend(d); };
const BackendFactory kEmu = [](DType d) { return gpu::make_emulated_backend(d); };

// The gate's CP-matrix spec with its stages recorded.
RunSpec spec_of(CpMode mode, int W, DType dtype, int tp = 1, Format format = Format::Thd) {
  RunSpec s = gate_matrix_spec(mode, W, tp, dtype, format);
  s.stages = true;
  return s;
}

// Every stage of the run's first micro-batch judged against the oracle's.
std::vector<TensorVerdict> verdicts_of(const RunSpec& spec, const BackendFactory& factory = kCpu) {
  const Case k = make_case(spec);
  const auto runs = run_in_process(spec, k, factory);
  const Answer oracle = oracle_answer(k, stage_request(spec, runs.at(0).cp_size));
  return judge_answer(oracle, runs.at(0).answer, oracle_gates(k, oracle, spec.dtype));
}

Divergence divergence_under(Fault fault, const RunSpec& spec, const BackendFactory& factory = kCpu) {
  const ScopedFault planted(fault);
  const auto d = find_first_divergence(spec, factory);
  if (!d) ADD_FAILURE() << fault_name(fault) << ": every tensor passed";
  return d.value_or(Divergence{});
}

TEST(Stages, EveryStageIsRecordedAndPassesInEveryModeOfACleanBuild) {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
    for (int W : {1, 2, 4}) {
      const RunSpec spec = spec_of(mode, W, DType::F64);
      const auto verdicts = verdicts_of(spec);
      // 10 forward and 10 backward stages, out, grad_hidden, 7 parameter gradients (no conv bias).
      const std::size_t want = 2 * 10 + 2 + 7 + (mode == CpMode::Chunkwise && W > 1 ? 2 : 0);
      EXPECT_EQ(verdicts.size(), want) << mode_name(mode) << " W=" << W;
      for (const auto& v : verdicts)
        EXPECT_TRUE(v.pass) << mode_name(mode) << " W=" << W << " " << v.name << " rel_rms " << v.m.rel_rms << " gate "
                            << v.gate;
    }
}

// stage::q is after the core's L2 norm; the gradient the core gives is w.r.t. the conv's q section, so it
// is named for that tensor (stage_grad::conv_q: the q columns of stage_grad::conv), never stage_grad::q.
TEST(Stages, TheQAndKGradientsAreNamedForTheConvSectionsTheyAreTakenWrt) {
  const RunSpec spec = spec_of(CpMode::Headwise, 2, DType::F64);
  const Case k = make_case(spec);
  const Answer oracle = oracle_answer(k, stage_request(spec, 2));
  EXPECT_FALSE(oracle.stages.count("stage_grad::q") || oracle.stages.count("stage_grad::k"));
  const Tensor& conv = oracle.stages.at("stage_grad::conv");  // [N, conv_dim]: q, k, v sections
  const std::int64_t N = conv.dim(0), qk = k.config.Hk() * k.config.dk();
  for (const auto& [name, first] : {std::pair{"stage_grad::conv_q", std::int64_t{0}}, {"stage_grad::conv_k", qk}}) {
    const Tensor& g = oracle.stages.at(name);
    ASSERT_EQ(g.numel(), N * qk) << name;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < qk; ++j)
        ASSERT_EQ(g.get(n * qk + j), conv.get(n * conv.dim(1) + first + j)) << name << " [" << n << ", " << j << "]";
  }
  for (const auto& v : verdicts_of(spec)) EXPECT_NE(v.name, "stage_grad::q");
}

TEST(Stages, TensorParallelStagesAreGatheredToFullHeads) {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
    for (const auto& v : verdicts_of(spec_of(mode, 2, DType::F64, 2)))
      EXPECT_TRUE(v.pass) << mode_name(mode) << " " << v.name << " rel_rms " << v.m.rel_rms;
}

TEST(Stages, SbhdStagesAreInTheNaturalOrderOfOut) {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise})
    for (const auto& v : verdicts_of(spec_of(mode, 2, DType::F64, 1, Format::Sbhd)))
      EXPECT_TRUE(v.pass) << mode_name(mode) << " " << v.name << " rel_rms " << v.m.rel_rms;
}

TEST(FirstDivergence, GateSoftplusMissingDtBiasActsAtG) {
  EXPECT_EQ(divergence_under(Fault::GateSoftplusMissingDtBias, spec_of(CpMode::Headwise, 2, DType::F64)).name,
            "stage::g");
}

TEST(FirstDivergence, L2normEpsDroppedActsAtQ) {
  EXPECT_EQ(divergence_under(Fault::L2normEpsDropped, spec_of(CpMode::Headwise, 2, DType::F64)).name, "stage::q");
}

TEST(FirstDivergence, ConvHaloWrongRankActsAtConvOnARankWhoseSpanStartsInsideASequence) {
  // W = 2, lengths 16, 8: rank 1's span [12, 24) starts inside the first sequence.
  // Rows 12..14 are zigzag rank 0's (the first sequence's last 4-token chunk): the line names both ranks.
  const Divergence d = divergence_under(Fault::ConvHaloWrongRank, spec_of(CpMode::Chunkwise, 2, DType::F64));
  EXPECT_EQ(d.name, "stage::conv");
  EXPECT_EQ(d.rank, 1);
  EXPECT_FALSE(d.backward);
  EXPECT_EQ(d.layout, "contiguous");
  EXPECT_EQ(d.other_ranks, std::vector<int>{0});
  EXPECT_TRUE(divergence_line(d).starts_with(
      "first divergence: stage::conv (forward, rank 1 of 2, rows 12..14 contiguous; zigzag rank 0): "))
      << divergence_line(d);
}

TEST(FirstDivergence, TheLineNamesTheLayoutARankHeldItsRowsInAndNoneForAHeadShard) {
  // Chunkwise returns out to zigzag: the rank holding the wrong rows is a zigzag rank.
  const Divergence out = divergence_under(Fault::RouteReturnUninverted, spec_of(CpMode::Chunkwise, 2, DType::F64));
  EXPECT_EQ(out.layout, "zigzag") << divergence_line(out);
  // Headwise's mixer stages are every token of a rank's heads: neither layout.
  const Divergence g = divergence_under(Fault::GateSoftplusMissingDtBias, spec_of(CpMode::Headwise, 2, DType::F64));
  EXPECT_EQ(g.layout, "") << divergence_line(g);
  EXPECT_TRUE(g.other_ranks.empty());
}

TEST(FirstDivergence, ConvHaloOneRankActsAtConvOnTheRankWhoseHaloReachesTwoRanksBack) {
  // One 8-token sequence at W = 4: spans of 2 tokens, so rank 2's halo of 3 tokens starts on rank 0.
  RunSpec spec = spec_of(CpMode::Chunkwise, 4, DType::F64);
  spec.lengths = {8};
  const Divergence d = divergence_under(Fault::ConvHaloOneRank, spec);
  EXPECT_EQ(d.name, "stage::conv");
  EXPECT_EQ(d.rank, 2);
}

TEST(FirstDivergence, ChunkwiseBf16StateChainActsAtTheBoundaryState) {
  const Divergence d = divergence_under(Fault::ChunkwiseBf16StateChain, spec_of(CpMode::Chunkwise, 4, DType::F32));
  EXPECT_TRUE(d.name == "stage::boundary_state" || d.name == "stage::core") << d.name;
}

TEST(FirstDivergence, AllgatherNoReduceScatterActsAtGradHiddenWithEveryStagePassing) {
  const RunSpec spec = spec_of(CpMode::AllGather, 2, DType::F64);
  EXPECT_EQ(divergence_under(Fault::AllGatherNoReduceScatter, spec).name, "grad_hidden");
  const ScopedFault planted(Fault::AllGatherNoReduceScatter);
  for (const auto& v : verdicts_of(spec))
    if (v.name.starts_with("stage")) {
      EXPECT_TRUE(v.pass) << v.name;
    }
}

TEST(FirstDivergence, HeadwiseHeadPermShiftActsAtConv) {
  EXPECT_EQ(divergence_under(Fault::HeadwiseHeadPermShift, spec_of(CpMode::Headwise, 2, DType::F64)).name,
            "stage::conv");
}

TEST(FirstDivergence, MissingGradReductionOverCpActsAtAParameterGradientOnEveryRank) {
  const Divergence d = divergence_under(Fault::MissingGradReductionOverCp, spec_of(CpMode::Headwise, 2, DType::F64));
  EXPECT_TRUE(d.name.starts_with("grad::")) << d.name;
  EXPECT_EQ(d.rank, -1);
}

TEST(FirstDivergence, RouteOffByOneActsAtXNorm) {
  EXPECT_EQ(divergence_under(Fault::RouteOffByOne, spec_of(CpMode::Chunkwise, 2, DType::F64)).name, "stage::x_norm");
}

TEST(FirstDivergence, ZigzagSwapHalvesActsAtConvUnderHeadwise) {
  EXPECT_EQ(divergence_under(Fault::ZigzagSwapHalves, spec_of(CpMode::Headwise, 2, DType::F64)).name, "stage::conv");
}

TEST(FirstDivergence, SoftplusOverflowsActsAtGOnTheExtremeInputs) {
  RunSpec spec = spec_of(CpMode::Headwise, 2, DType::F32);
  spec.gates = GateRegime::Extreme;
  EXPECT_EQ(divergence_under(Fault::SoftplusOverflows, spec).name, "stage::g");
}

TEST(FirstDivergence, GpuConvBleedsAcrossSequencesActsAtConv) {
  EXPECT_EQ(divergence_under(Fault::GpuConvBleedsAcrossSequences, spec_of(CpMode::Headwise, 2, DType::F32), kEmu).name,
            "stage::conv");
}

// The second micro-batch at CP 2 reuses the first one's plan: its rows are placed by the stale plan
// from the first stage on.
TEST(FirstDivergence, DynamicCpReusesPlanActsFromXNormOnTheSecondPacking) {
  RunSpec spec = spec_of(CpMode::Chunkwise, 4, DType::F64);
  spec.cp.dynamic_cp = spec.micro_batches = {2, 2};
  spec.micro_batch_lengths = {{8, 40, 16}, {32, 32}};
  EXPECT_EQ(divergence_under(Fault::DynamicCpReusesPlan, spec).name, "stage::x_norm");
}

// The wrong group fails its first collective: the run does not complete, so there is no stage to name.
TEST(FirstDivergence, DynamicCpUsesStaticGroupStopsAtItsFirstCollectiveBeforeAnyStage) {
  RunSpec spec = spec_of(CpMode::Headwise, 4, DType::F64);
  spec.cp.dynamic_cp = spec.micro_batches = {4, 2};
  const ScopedFault planted(Fault::DynamicCpUsesStaticGroup);
  EXPECT_THROW((void)find_first_divergence(spec, kCpu), Error);
  EXPECT_EQ(first_divergence_line(spec, kCpu), "");
}

// The remaining planted faults move no tensor of a layer run past its gate by design, so they have no
// first diverging stage: rmsnorm_fast_rsqrt, gate_bf16_before_exp, grad_allreduce_bf16 and
// reduce_rounds_per_hop stay inside every absolute gate, reduce_own_rank_first changes bits only between
// ranks, halo_gathers_whole_span only bytes; the gate's precision and communicator steps catch them
// (docs/DESIGN.md §10).

// A sequence straddling all three ranks in spans of several chunks: the wrong backward span map only
// changes the folded state gradient, so the first tensor to leave its gate is that gradient.
TEST(FirstDivergence, BackwardSpanMapUntransposedActsAtTheBoundaryStateGradient) {
  RunSpec spec = spec_of(CpMode::Chunkwise, 3, DType::F64);
  spec.lengths = {480, 48, 12};
  EXPECT_EQ(divergence_under(Fault::BackwardSpanMapUntransposed, spec).name, "stage_grad::boundary_state");
}

// Spans of 2 tokens: the halo reaches two ranks back, and the gradient of the farther halo rows is lost
// on its way to the conv input, which is in_proj's output.
TEST(FirstDivergence, HaloGradPreviousRankOnlyActsAtTheInProjGradient) {
  RunSpec spec = spec_of(CpMode::Chunkwise, 4, DType::F64);
  spec.lengths = {8};
  EXPECT_EQ(divergence_under(Fault::HaloGradPreviousRankOnly, spec).name, "stage_grad::in_proj");
}

TEST(FirstDivergence, RouteReturnUninvertedActsWhereRowsReturnToZigzag) {
  EXPECT_EQ(divergence_under(Fault::RouteReturnUninverted, spec_of(CpMode::Chunkwise, 2, DType::F64)).name, "out");
}

TEST(FirstDivergence, AllgatherGradNaturalOrderActsAtGradHidden) {
  EXPECT_EQ(divergence_under(Fault::AllGatherGradNaturalOrder, spec_of(CpMode::AllGather, 2, DType::F64)).name,
            "grad_hidden");
}

TEST(FirstDivergence, DecayCumsumFp32ActsAtTheCoreOnTheExtremeInputs) {
  RunSpec spec = spec_of(CpMode::Headwise, 2, DType::BF16);
  spec.gates = GateRegime::Extreme;
  EXPECT_EQ(divergence_under(Fault::DecayCumsumFp32, spec).name, "stage::core");
}

TEST(FirstDivergence, TheLineNamesStageDirectionRankRowsAndGate) {
  Divergence d = divergence_at("stage::conv", 1, 2);
  d.row_begin = 12;
  d.row_end = 14;
  d.metric = "rel_rms";
  d.value = 0.5;
  d.gate = 1e-10;
  EXPECT_EQ(divergence_line(d),
            "first divergence: stage::conv (forward, rank 1 of 2, rows 12..14): rel_rms 5.000e-01 > gate 1.000e-10");
  d.layout = "zigzag";
  d.other_ranks = {0, 1};
  EXPECT_EQ(divergence_line(d),
            "first divergence: stage::conv (forward, rank 1 of 2, rows 12..14 zigzag; contiguous "
            "ranks 0, 1): rel_rms 5.000e-01 > gate 1.000e-10");
}

}  // namespace
}  // namespace gdnv::cp
