// The extreme input regime (harness/harness.hpp GateRegime::Extreme): the generated case reaches every range
// it promises, and the fp64 oracle stays exact there.
#include <algorithm>
#include <cmath>
#include <tuple>

#include <gtest/gtest.h>

#include "core/metrics.hpp"
#include "cpu/backend.hpp"
#include "faults/registry.hpp"
#include "harness/world.hpp"
#include "reference/layer.hpp"
#include "tests/harness_testing.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

// The gate's geometry (harness/harness.hpp gate_matrix_spec): GVA 2, 4 key heads, hidden 24.
RunSpec extreme_spec(DType dtype, std::vector<std::int64_t> lengths) {
  RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.cp.cp = 1;
  s.dtype = dtype;
  s.lengths = std::move(lengths);
  s.gates = GateRegime::Extreme;
  return s;
}

// Two length-1 sequences (one a zero row, one a spike), one whose spike sits mid-chunk with 39 tokens
// of the same 64-token chunk after it, one short.
const std::vector<std::int64_t> kLengths = {1, 1, 80, 6};

double max_abs_row(const Tensor& t, std::int64_t row, std::int64_t width) {
  double m = 0;
  for (std::int64_t j = 0; j < width; ++j) m = std::max(m, std::abs(t.get(row * width + j)));
  return m;
}

// What the oracle's forward sees of a generated case: the ranges of a + dt_bias, A, the beta logits,
// the q/k rows entering the L2 norm and the hidden rows entering the RMSNorm.
struct Reached {
  double x_min = 0, x_max = 0, A_max = 0, b_min = 0, b_max = 0;
  int zero_qk_rows = 0, tiny_qk_rows = 0, zero_hidden_rows = 0, large_hidden_rows = 0, length_1_sequences = 0;
};

Reached reached(const Case& k) {
  const ref::LayerForward fwd = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens);
  const std::int64_t Hv = k.config.Hv(), dk = k.config.dk(), hidden = k.config.hidden();
  const Tensor &A_log = k.params.at(ref::kALog), &dt_bias = k.params.at(ref::kDtBias);
  Reached r;
  for (std::int64_t i = 0; i < fwd.mixer.a.numel(); ++i) {
    const double x = fwd.mixer.a.get(i) + dt_bias.get(i % Hv), b = fwd.mixer.b.get(i);
    r.x_min = std::min(r.x_min, x), r.x_max = std::max(r.x_max, x);
    r.b_min = std::min(r.b_min, b), r.b_max = std::max(r.b_max, b);
  }
  for (std::int64_t h = 0; h < Hv; ++h) r.A_max = std::max(r.A_max, std::exp(A_log.get(h)));
  for (const Tensor* t : {&fwd.mixer.core_in.q, &fwd.mixer.core_in.k})
    for (std::int64_t row = 0; row < t->numel() / dk; ++row) {
      const double m = max_abs_row(*t, row, dk);
      r.zero_qk_rows += m == 0;
      r.tiny_qk_rows += m > 0 && m < 1e-28;
    }
  for (std::int64_t row = 0; row < k.hidden.numel() / hidden; ++row) {
    const double m = max_abs_row(k.hidden, row, hidden);
    r.zero_hidden_rows += m == 0;
    r.large_hidden_rows += m >= 1e4;
  }
  const std::vector<std::int64_t>& cu = *k.cu_seqlens;
  for (std::size_t i = 1; i < cu.size(); ++i) r.length_1_sequences += cu[i] - cu[i - 1] == 1;
  return r;
}

// Each range of the regime, in every storage dtype (rounding W and ln_w moves a + dt_bias by <= 0.4% in bf16), on
// the CP=1 lengths (two sequences of length 1) and the gate's CP=2 lengths (divisible by 2*cp).
TEST(ExtremeRegime, GeneratedCaseReachesEveryRange) {
  for (const DType dtype : {DType::F64, DType::F32, DType::BF16})
    for (const auto& lengths : {kLengths, std::vector<std::int64_t>{8, 4}}) {
      const Reached r = reached(make_case(extreme_spec(dtype, lengths)));
      const std::string at = std::string(dtype_name(dtype)) + " lengths of " + std::to_string(lengths.size());
      EXPECT_GE(r.x_max, 990) << at;
      EXPECT_LE(r.x_min, -990) << at;
      EXPECT_GE(r.A_max, 990) << at;
      EXPECT_GE(r.b_max, 49) << at;
      EXPECT_LE(r.b_min, -49) << at;
      EXPECT_GT(r.zero_qk_rows, 0) << at;
      EXPECT_GT(r.tiny_qk_rows, 0) << at;
      EXPECT_GT(r.zero_hidden_rows, 0) << at;
      EXPECT_GT(r.large_hidden_rows, 0) << at;
      EXPECT_EQ(r.length_1_sequences, lengths == kLengths ? 2 : 0) << at;
    }
}

TEST(ChunkedOracle, EqualsTheRecurrentOracleOnExtremeInputs) {
  const Case k = make_case(extreme_spec(DType::F64, kLengths));
  const auto run = [&](ref::CoreForm form) {
    const ref::LayerForward fwd = ref::layer_forward(k.config, k.params, k.hidden, k.cu_seqlens, {form, 64});
    ref::LayerGrads g = ref::layer_backward(k.config, k.params, fwd, k.grad_output);
    g.params["out"] = fwd.out;
    g.params["grad_hidden"] = g.grad_hidden;
    return g.params;
  };
  const auto chunked = run(ref::CoreForm::Chunked), recurrent = run(ref::CoreForm::Recurrent);
  for (const auto& [name, want] : recurrent) {
    const Metrics m = compare(want, chunked.at(name));
    EXPECT_TRUE(m.rel_rms < 1e-12 && m.nan_cand == 0 && m.inf_cand == 0) << name << ": rel RMS " << m.rel_rms;
  }
}

// gdn-verify run's judgement on the CPU backend: every tensor within its oracle gate, none NaN or Inf,
// in every mode at CP=2 and at CP=1 with the one-token sequences (a naive log(1 + e^x) softplus fails
// here: e^1000 = inf, g = -inf, and dA_log = sum dg g turns 0 * inf into NaN).
class ExtremeOnCpu : public ::testing::TestWithParam<std::tuple<CpMode, int, DType>> {};

TEST_P(ExtremeOnCpu, EveryTensorMatchesTheOracleWithoutNanOrInf) {
  const auto [mode, cp_size, dtype] = GetParam();
  RunSpec spec = extreme_spec(dtype, cp_size == 1 ? kLengths : std::vector<std::int64_t>{8, 4});
  spec.cp.mode = mode, spec.cp.cp = cp_size;
  testing::expect_matches_oracle_without_nan_or_inf(spec, cpu::make_backend);
}

// The planted log(1 + e^x) softplus: e^1000 = inf in fp32, g = -inf, and dA_log = sum dg g is NaN.
TEST(ExtremeOnCpuUnderFault, NaiveSoftplusMakesDaLogNan) {
  RunSpec spec = extreme_spec(DType::F32, {8, 4});
  const Case k = make_case(spec);
  const ScopedFault fault(Fault::SoftplusOverflows);
  const auto runs = run_in_process(spec, k, cpu::make_backend);
  EXPECT_GT(compare(oracle_answer(k).grads.at(ref::kALog), runs.at(0).answer.grads.at(ref::kALog)).nan_cand, 0);
}

INSTANTIATE_TEST_SUITE_P(AllModes, ExtremeOnCpu,
                         ::testing::Combine(::testing::Values(CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather),
                                            ::testing::Values(1, 2),
                                            ::testing::Values(DType::F64, DType::F32, DType::BF16)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_cp" +
                                  std::to_string(std::get<1>(p.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(p.param)));
                         });

}  // namespace
}  // namespace gdnv::cp
