// The cost models of cost/cost.hpp against what the implementation really does: for a sweep of
// geometries (CP sizes 1, 2, 3, 4, 8; TP 1 and 2; THD with several sequences, spans shorter than the
// conv width, SBHD, dynamic CP), every world rank's modeled collectives (calls and bytes per kind,
// forward and backward) equal, exactly, the accounting measured on the in-process world; the modeled
// FLOPs and saved activation bytes equal the counting backend's measurement up to summation rounding.
#include <gtest/gtest.h>

#include <sstream>

#include "cost/roofline.hpp"
#include "cpu/backend.hpp"
#include "harness/world.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

struct Scenario {
  std::string name;
  RunSpec spec;
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

RunSpec base(CpMode mode, int cp, int tp, std::int64_t conv = 4) {
  RunSpec s;
  // Headwise needs Hk divisible by tp*cp; Hv = 2 Hk exercises GVA.
  const std::int64_t Hk = tp * cp;
  s.layer = {16, Hk, 2 * Hk, 4, 4, conv, 1e-6, false};
  s.cp.mode = mode;
  s.cp.cp = cp;
  s.cp.tp = tp;
  s.format = Format::Thd;
  return s;
}

const char* short_name(CpMode mode) {
  return mode == CpMode::Headwise ? "headwise" : mode == CpMode::Chunkwise ? "chunkwise" : "all_gather";
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> out;
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather}) {
    const std::string m = short_name(mode);
    for (int tp : {1, 2})
      for (int cp : {1, 2, 3, 4, 8}) {
        const std::string at = "_tp" + std::to_string(tp) + "_cp" + std::to_string(cp);
        // Several sequences, one spanning several chunkwise spans, one zero-length placeholder.
        RunSpec thd = base(mode, cp, tp);
        thd.lengths = {2 * cp * 5, 0, 2 * cp, 2 * cp * 3};
        out.push_back({m + at + "_thd", thd});
        // One short sequence: spans (2 tokens at cp=8) shorter than the conv halo (3 tokens).
        RunSpec shortest = base(mode, cp, tp);
        shortest.lengths = {2 * cp};
        out.push_back({m + at + "_short", shortest});
      }
    // Sequences cut exactly at span boundaries: no halo, no state exchange.
    RunSpec cut = base(mode, 4, 1);
    cut.lengths = {16, 16, 32};
    out.push_back({m + "_cp4_boundaries", cut});
    // Conv widths 1 (no halo at all) and 8 (halo over several ranks), with conv bias; bf16 and fp64.
    RunSpec w1 = base(mode, 4, 1, 1);
    w1.lengths = {24, 40};
    w1.dtype = DType::BF16;
    out.push_back({m + "_conv1_bf16", w1});
    RunSpec w8 = base(mode, 4, 2, 8);
    w8.layer.conv_bias = true;
    w8.lengths = {8, 24};
    w8.dtype = DType::F64;
    out.push_back({m + "_conv8_bias_fp64", w8});
    // Dynamic CP: one micro-batch per size.
    RunSpec dyn = base(mode, 4, 2);
    dyn.cp.dynamic_cp = dyn.micro_batches = {1, 2, 4};
    dyn.lengths = {16, 40};
    out.push_back({m + "_dynamic", dyn});
    // Dynamic CP with each micro-batch on its own packing, padded for its own size only (5, 9 at CP 1;
    // 4, 12 at CP 2: neither a CP 4 packing).
    RunSpec own = dyn;
    own.micro_batch_lengths = {{5, 9}, {4, 12}, {8, 24, 16}};
    out.push_back({m + "_dynamic_own_packings", own});
    // SBHD (all_gather takes SBHD only at CP=1; chunkwise only with batch 1).
    RunSpec sbhd = base(mode, mode == CpMode::AllGather ? 1 : 4, 2);
    sbhd.format = Format::Sbhd;
    sbhd.seq_len = 24;
    sbhd.batch = mode == CpMode::Chunkwise ? 1 : 2;
    out.push_back({m + "_sbhd", sbhd});
  }
  return out;
}

class CostModel : public ::testing::TestWithParam<Scenario> {};

TEST_P(CostModel, MatchesMeasuredAccountingOnEveryRank) {
  const RunSpec& spec = GetParam().spec;
  const auto geometries = planned_micro_batches(spec);
  const auto runs = run_in_process(spec, make_cases(spec), cpu::make_backend);
  ASSERT_EQ(runs.size(), geometries.size());
  for (std::size_t m = 0; m < runs.size(); ++m) {
    const int c = runs[m].cp_size;
    ASSERT_EQ(geometries[m].cp_size, c);
    ASSERT_EQ(runs[m].ranks.size(), static_cast<std::size_t>(spec.cp.tp * spec.cp.cp));
    for (std::size_t w = 0; w < runs[m].ranks.size(); ++w) {
      SCOPED_TRACE("micro-batch " + std::to_string(m) + " (cp=" + std::to_string(c) + "), world rank " +
                   std::to_string(w));
      const RankOutput& got = runs[m].ranks[w];
      const cost::RankCost want = cost::layer_cost(geometries[m], place_of(spec, static_cast<int>(w), c));
      // Not a trivial pass: a layer computes, keeps activations, and talks whenever CP or TP > 1.
      ASSERT_GT(got.forward_flops, 0);
      ASSERT_GT(got.backward_flops, 0);
      ASSERT_GT(got.saved_bytes, 0);
      if (c > 1 || spec.cp.tp > 1) {
        ASSERT_GT(got.forward.calls() + got.backward.calls(), 0u);
      }
      EXPECT_EQ(want.forward.comm, got.forward) << "model:\n" << want.forward.comm << "measured:\n" << got.forward;
      EXPECT_EQ(want.backward.comm, got.backward) << "model:\n" << want.backward.comm << "measured:\n" << got.backward;
      // Within 1% is what a planner needs; the model prices the very ops the counting backend sees, so
      // anything beyond summation rounding means an op the model misses or invents.
      EXPECT_NEAR(want.forward.flops(), got.forward_flops, 1e-9 * got.forward_flops);
      EXPECT_NEAR(want.backward.flops(), got.backward_flops, 1e-9 * got.backward_flops);
      EXPECT_NEAR(static_cast<double>(want.saved_bytes), static_cast<double>(got.saved_bytes),
                  1e-9 * static_cast<double>(got.saved_bytes));
      EXPECT_EQ(want.forward.comm.host_syncs + want.backward.comm.host_syncs, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, CostModel, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& p) { return p.param.name; });

// all_gather pays cp times a CP rank's compute: its FLOPs per rank equal the whole layer's at CP=1,
// while headwise divides them by cp.
TEST(CostModel, AllGatherComputesTheWholeLayerOnEveryRank) {
  RunSpec one = base(CpMode::AllGather, 1, 1), four = base(CpMode::AllGather, 4, 1);
  one.lengths = four.lengths = {64, 128};
  one.layer = four.layer;
  const cost::RankCost whole = cost::layer_cost(planned_micro_batches(one)[0], {0, 0});
  const cost::RankCost gathered = cost::layer_cost(planned_micro_batches(four)[0], {2, 0});
  EXPECT_EQ(gathered.forward.flops(), whole.forward.flops());
  EXPECT_GT(gathered.saved_bytes, whole.saved_bytes);  // plus the gathered hidden states
  four.cp.mode = CpMode::Headwise;
  const cost::RankCost split = cost::layer_cost(planned_micro_batches(four)[0], {2, 0});
  EXPECT_NEAR(split.forward.flops() * 4, whole.forward.flops(), 1e-9 * whole.forward.flops());
}

// The benches' roofline numerator (cost::layer_flops) against the count written out by hand from the layer
// of docs/DESIGN.md §1.3, 2 flops per multiply-add: hidden 8, Hk 2, Hv 4, dk 4, dv 6, W 4, sequences of
// 70 and 10 tokens (T = 80; 64-token chunks: 64, 6, 10).
//   in_proj: P = 2 Hk dk + 2 Hv dv + 2 Hv = 16 + 48 + 8 = 72 outputs; out_proj: Hv dv = 24 inputs.
//     Each GEMM once forward, twice backward (dX, dW): 3 x 2 x T hidden (72 + 24) = 6 x 80 x 8 x 96 = 368640.
//   conv: 2 Hk dk + Hv dv = 40 channels, W taps, forward + dx + dw: 3 x 2 x 80 x 40 x 4 = 76800.
//   core, per value head and chunk of c tokens forward (DESIGN §1.1's chunked form): K K^T and Q K^T
//     (c^2 dk each, triangles), the solve for [U | W] (c^2 (dv + dk)), the intra-chunk output (c^2 dv):
//     c^2 (3 dk + 2 dv) = 24 c^2; v_new = U - W S, (e^gamma Q) S and the state update: 3 x 2 c dk dv =
//     144 c. Chunks: 24 (64^2 + 6^2 + 10^2) + 144 x 80 = 24 x 4232 + 11520 = 113088 per head, x Hv 4 =
//     452352; the backward recomputes the states (one forward) and runs two gradient passes (two
//     forwards): x 4 = 1809408.
//   Norms and gates are memory-bound: 0.  Total 368640 + 76800 + 1809408 = 2254848.
TEST(CostModel, LayerFlopsAreTheProjectionsConvAndChunkedCore) {
  const ref::LayerConfig config({.hidden_size = 8,
                                 .linear_num_key_heads = 2,
                                 .linear_num_value_heads = 4,
                                 .linear_key_head_dim = 4,
                                 .linear_value_head_dim = 6,
                                 .linear_conv_kernel_dim = 4});
  EXPECT_EQ(cost::layer_flops(config, {70, 10}), 2254848.0);
}

// The roofline: an op costs the larger of its FLOP time and its HBM time; a call pays its steps'
// latency and its larger direction over the link its group spans (TP inside a node here, CP 2 x 8
// ranks across two nodes).
TEST(Roofline, PricesOpsByTheirBoundAndCallsByTheirLink) {
  const cost::HardwareProfile hw;
  cost::PhaseCost phase;
  phase.ops = {{hw.bf16_tflops * 1e12, 1.0}, {1.0, hw.hbm_gbps * 1e9 * 2}};
  phase.calls = {{comm::Collective::AllReduce, cost::Group::Tp, 2, 900'000'000, 900'000'000},
                 {comm::Collective::AllGather, cost::Group::Cp, 8, 100'000'000, 700'000'000}};
  const cost::PhaseTime t = cost::phase_time(phase, hw, DType::BF16, 2, 8);
  EXPECT_NEAR(t.compute_s, 1.0 + 2.0, 1e-12);
  const double tp_call = 2 * hw.intra_node_latency_us * 1e-6 + 9e8 / (hw.intra_node_gbps * 1e9);
  const double cp_call = 7 * hw.inter_node_latency_us * 1e-6 + 7e8 / (hw.inter_node_gbps * 1e9);
  EXPECT_NEAR(t.comm_s, tp_call + cp_call, 1e-12);
  // fp32 runs without tensor cores: the same op takes bf16/fp32 times longer.
  EXPECT_NEAR(cost::phase_time(phase, hw, DType::F32, 2, 8).compute_s, hw.bf16_tflops / hw.fp32_tflops + 2.0, 1e-9);
}

}  // namespace
}  // namespace gdnv::cp
