// The extreme input regime (cp/harness.hpp GateRegime::Extreme): the generated case reaches every range
// it promises, and the fp64 oracle stays exact there.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "core/metrics.hpp"
#include "cp/harness.hpp"
#include "reference/layer.hpp"

namespace gdnv::cp {
namespace {

// The gate's geometry (cli/gate_steps_cp.cpp matrix_spec): GVA 2, 4 key heads, hidden 24.
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

}  // namespace
}  // namespace gdnv::cp
