// Properties of the gated delta rule oracle over generated shapes and gate regimes: the chunked form
// equals the recurrent one on every output and gradient, and folding the span maps of any split of
// a sequence equals the unsplit run.
#include <algorithm>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "reference/span_map.hpp"
#include "tests/reference_testing.hpp"

namespace gdnv {
namespace {

using testing::Gates;
using testing::GdrSpec;

// Both forms are fp64 evaluations of one contracting recurrence (unit-norm k, beta in (0,1), g <= 0):
// per element O(T K) roundings of eps = 1.1e-16 add to ~1e-14 relative at these sizes; docs/DESIGN.md §1.1's
// bound 1e-12 leaves 100x headroom.
constexpr double kFormsTol = 1e-12;

// Relative RMS below kFormsTol. A reference that is exactly zero (dg when every sequence is one token
// long and starts from a zero state) has no scale to be relative to: the other form must give exact
// zeros too. Tensors of one element are compared like any other.
void assert_close(const std::string& name, const Tensor& got, const Tensor& want) {
  RC_ASSERT(got.shape() == want.shape());
  const testing::TensorDiff d = testing::tensor_diff(got, want);
  RC_LOG() << name << ": rel RMS " << d.rel_rms << ", max abs " << d.max_abs << "\n";
  bool zero = true;
  for (std::int64_t i = 0; i < want.numel(); ++i) zero = zero && want.get(i) == 0;
  if (zero) RC_ASSERT(d.max_abs == 0.0);
  else RC_ASSERT(d.rel_rms < kFormsTol);
}

// Sequence lengths biased to the chunk boundaries of C = 64 and to length-1 sequences.
rc::Gen<std::int64_t> gen_length() {
  return rc::gen::oneOf(rc::gen::element<std::int64_t>(1, 63, 64, 65), rc::gen::inRange<std::int64_t>(1, 140));
}

rc::Gen<GdrSpec> gen_spec() {
  return rc::gen::exec([] {
    GdrSpec s;
    const auto lens = *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange(1, 4), gen_length());
    std::vector<std::int64_t> cu{0};
    for (auto n : lens) cu.push_back(cu.back() + n);
    s.T = cu.back();
    if (lens.size() > 1 || *rc::gen::arbitrary<bool>()) s.cu_seqlens = cu;
    s.Hk = *rc::gen::element<std::int64_t>(1, 2);
    s.Hv = s.Hk * *rc::gen::element<std::int64_t>(1, 2, 4);
    s.K = *rc::gen::element<std::int64_t>(1, 7, 16, 60, 100);
    s.V = *rc::gen::element<std::int64_t>(1, 5, 16, 60, 100);
    s.initial_state = *rc::gen::arbitrary<bool>();
    if (*rc::gen::arbitrary<bool>()) s.scale = *rc::gen::element(0.37, 1.0, 2.5);
    // Not with K = 1: x / sqrt(x^2 + 1e-6) is flat there, its gradient r (1 - x_hat^2) dx_hat comes from
    // cancelling O(1) terms, and both forms' ~1e-16 differences grow by 1 / (1 - x_hat^2) ~ x^2 / 1e-6.
    s.l2norm = s.K > 1 && *rc::gen::arbitrary<bool>();
    s.gates = *rc::gen::element(Gates::LogSigmoidTau01, Gates::LogSigmoidTau1, Gates::LogSigmoidTau10, Gates::Zero,
                                Gates::StronglyNegative);
    s.seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
    return s;
  });
}

std::string describe(const GdrSpec& s, int C) {
  return "T=" + std::to_string(s.T) + " Hk=" + std::to_string(s.Hk) + " Hv=" + std::to_string(s.Hv) +
         " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V) + " C=" + std::to_string(C) +
         " gates=" + testing::gates_name(s.gates) + (s.l2norm ? " l2norm" : "") + (s.cu_seqlens ? " varlen" : "") +
         (s.initial_state ? " h0" : "");
}

RC_GTEST_PROP(GdrProperties, ChunkedEqualsRecurrentOnEveryOutputAndGradient, ()) {
  const GdrSpec s = *gen_spec();
  const int C = *rc::gen::element(16, 32, 64);
  RC_LOG() << describe(s, C) << "\n";
  const ref::GdrInputs in = testing::random_gdr(s);
  const Tensor d_o = testing::random_normal({s.B, s.T, s.Hv, s.V}, s.seed, "do");
  const std::int64_t N = s.cu_seqlens ? static_cast<std::int64_t>(s.cu_seqlens->size()) - 1 : s.B;
  std::optional<Tensor> dht;
  if (*rc::gen::arbitrary<bool>()) dht = testing::random_normal({N, s.Hv, s.K, s.V}, s.seed, "dht");

  const ref::GdrOutputs ro = ref::gdr_recurrent_forward(in), co = ref::gdr_chunked_forward(in, C);
  assert_close("o", co.o, ro.o);
  assert_close("final_state", co.final_state, ro.final_state);
  const ref::GdrGrads rg = ref::gdr_recurrent_backward(in, d_o, dht), cg = ref::gdr_chunked_backward(in, d_o, dht, C);
  assert_close("dq", cg.dq, rg.dq);
  assert_close("dk", cg.dk, rg.dk);
  assert_close("dv", cg.dv, rg.dv);
  assert_close("dg", cg.dg, rg.dg);
  assert_close("dbeta", cg.dbeta, rg.dbeta);
  assert_close("dh0", cg.dh0, rg.dh0);
}

RC_GTEST_PROP(GdrProperties, FoldingSpanMapsOfAnySplitEqualsUnsplitRun, ()) {
  GdrSpec s = *gen_spec();
  s.cu_seqlens.reset();  // one sequence, cut at random points into spans
  s.initial_state = true;
  const ref::GdrInputs whole = testing::random_gdr(s);
  auto cuts = *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange(0, 5),
                                                             rc::gen::inRange<std::int64_t>(0, s.T + 1));
  cuts.push_back(0);
  cuts.push_back(s.T);
  std::sort(cuts.begin(), cuts.end());  // repeated cuts make empty spans, which must fold as the identity
  const int C = *rc::gen::element(16, 64);
  RC_LOG() << describe(s, C) << " cuts=" << cuts.size() - 1 << "\n";
  ref::GdrInputs spans = whole;
  spans.cu_seqlens = cuts;
  spans.initial_state.reset();
  const Tensor d_o = testing::random_normal({1, s.T, s.Hv, s.V}, s.seed, "do");
  const Tensor dht = testing::random_normal({1, s.Hv, s.K, s.V}, s.seed, "dht");

  const Tensor maps = ref::gdr_span_maps(spans, C), backward_maps = ref::gdr_backward_span_maps(spans, d_o, C);
  const auto n_spans = static_cast<std::int64_t>(cuts.size()) - 1;
  Tensor S = whole.initial_state->reshaped({s.Hv, s.K, s.V});
  for (std::int64_t n = 0; n < n_spans; ++n) ref::fold_span_map(maps, n, FoldDirection::Forward, S);
  Tensor dS = dht.reshaped({s.Hv, s.K, s.V});
  for (std::int64_t n = n_spans - 1; n >= 0; --n) ref::fold_span_map(backward_maps, n, FoldDirection::Backward, dS);

  // The unsplit run by the other form: the check is independent of the chunked code behind the maps.
  assert_close("folded final_state", S, ref::gdr_recurrent_forward(whole).final_state.reshaped(S.shape()));
  assert_close("folded dh0", dS, ref::gdr_recurrent_backward(whole, d_o, dht).dh0.reshaped(dS.shape()));
}

}  // namespace
}  // namespace gdnv
