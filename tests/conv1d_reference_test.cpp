// The causal conv1d oracle (reference/conv1d): a hand-computed case, finite differences against every
// gradient (the final state's included), no bleed across packed sequences, FLA's initial_state slot
// convention, the final state as the next call's initial state, input errors.
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "reference/conv1d.hpp"
#include "reference_testing.hpp"

namespace gdnv {
namespace {

using ref::Activation;
using ref::Conv1dInputs;
using testing::close;
using testing::random_normal;

Conv1dInputs random_conv(std::int64_t B, std::int64_t T, std::int64_t D, std::int64_t W, bool bias, bool h0,
                         std::optional<std::vector<std::int64_t>> cu, Activation act, std::uint64_t seed) {
  const std::int64_t N = cu ? static_cast<std::int64_t>(cu->size()) - 1 : B;
  Conv1dInputs in{random_normal({B, T, D}, seed, "x"),
                  random_normal({D, W}, seed, "w", 0.5),
                  std::nullopt,
                  std::nullopt,
                  std::move(cu),
                  act};
  if (bias) in.bias = random_normal({D}, seed, "bias", 0.3);
  if (h0) in.initial_state = random_normal({N, D, W}, seed, "h0");
  return in;
}

// D = 1, W = 2, T = 2, bias b, initial_state slot 1 = x_{-1}:
//   p_0 = b + w_0 x_{-1} + w_1 x_0,  p_1 = b + w_0 x_0 + w_1 x_1,  y_t = silu(p_t) = p_t s(p_t).
// silu'(p) = s(p) (1 + p (1 - s(p))), e_t = dy_t silu'(p_t):
//   dx_0 = e_0 w_1 + e_1 w_0, dx_1 = e_1 w_1, dw_0 = e_0 x_{-1} + e_1 x_0, dw_1 = e_0 x_0 + e_1 x_1,
//   dbias = e_0 + e_1, dh0 slot 1 = e_0 w_0 (slot 0 = 0).
TEST(Conv1dTiny, TwoTokensMatchClosedForm) {
  const double x0 = 0.7, x1 = -1.2, xm1 = 0.4, w0 = 0.3, w1 = -0.8, b = 0.1, dy0 = 1.5, dy1 = -0.6;
  const Conv1dInputs in{Tensor::from(std::vector<double>{x0, x1}, {1, 2, 1}),
                        Tensor::from(std::vector<double>{w0, w1}, {1, 2}),
                        Tensor::from(std::vector<double>{b}, {1}),
                        Tensor::from(std::vector<double>{0.0, xm1}, {1, 1, 2}),
                        std::nullopt,
                        Activation::Silu};
  auto s = [](double p) { return 1 / (1 + std::exp(-p)); };
  const double p0 = b + w0 * xm1 + w1 * x0, p1 = b + w0 * x0 + w1 * x1;
  const double e0 = dy0 * s(p0) * (1 + p0 * (1 - s(p0))), e1 = dy1 * s(p1) * (1 + p1 * (1 - s(p1)));
  const Tensor y = ref::conv1d_forward(in);
  const ref::Conv1dGrads d = ref::conv1d_backward(in, Tensor::from(std::vector<double>{dy0, dy1}, {1, 2, 1}));
  const double tol = 1e-15;  // O(1) values, a handful of fp64 operations each
  EXPECT_NEAR(y.get(0), p0 * s(p0), tol);
  EXPECT_NEAR(y.get(1), p1 * s(p1), tol);
  EXPECT_NEAR(d.dx.get(0), e0 * w1 + e1 * w0, tol);
  EXPECT_NEAR(d.dx.get(1), e1 * w1, tol);
  EXPECT_NEAR(d.dweight.get(0), e0 * xm1 + e1 * x0, tol);
  EXPECT_NEAR(d.dweight.get(1), e0 * x0 + e1 * x1, tol);
  EXPECT_NEAR(d.dbias->get(0), e0 + e1, tol);
  EXPECT_EQ(d.dh0->get(0), 0.0);
  EXPECT_NEAR(d.dh0->get(1), e0 * w0, tol);
}

// Central differences, step 1e-5: truncation ~h^2 = 1e-10, rounding ~eps / h = 1e-11 relative, so
// 1e-6 relative RMS has >= 1e3 headroom.
constexpr double kFdStep = 1e-5, kFdTol = 1e-6;

// d/d field of sum(y * dy) + sum(final_state * dht).
Tensor fd_gradient(const Conv1dInputs& base, const std::function<Tensor&(Conv1dInputs&)>& field, const Tensor& dy,
                   const Tensor& dht) {
  Conv1dInputs in = base;
  Tensor& x = field(in);
  Tensor grad(DType::F64, x.shape());
  auto loss = [&] {
    const Tensor y = ref::conv1d_forward(in), state = ref::conv1d_final_state(in);
    double l = 0;
    for (std::int64_t i = 0; i < y.numel(); ++i) l += y.get(i) * dy.get(i);
    for (std::int64_t i = 0; i < state.numel(); ++i) l += state.get(i) * dht.get(i);
    return l;
  };
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.get(i);
    x.set(i, x0 + kFdStep);
    const double up = loss();
    x.set(i, x0 - kFdStep);
    const double down = loss();
    x.set(i, x0);
    grad.set(i, (up - down) / (2 * kFdStep));
  }
  return grad;
}

class Conv1dFiniteDifferences : public ::testing::TestWithParam<Activation> {};

// Sequence 0 (2 tokens) is shorter than the window: its final state reads initial_state slots 2 and 3.
TEST_P(Conv1dFiniteDifferences, GradientsMatchCentralDifferences) {
  const Conv1dInputs in = random_conv(1, 11, 3, 4, true, true, std::vector<std::int64_t>{0, 2, 11}, GetParam(), 21);
  const Tensor dy = random_normal(in.x.shape(), 21, "dy"), dht = random_normal({2, 3, 4}, 21, "dht");
  const ref::Conv1dGrads d = ref::conv1d_backward(in, dy, dht);
  EXPECT_TRUE(close("dx", d.dx,
                    fd_gradient(
                        in, [](Conv1dInputs& c) -> Tensor& { return c.x; }, dy, dht),
                    kFdTol));
  EXPECT_TRUE(close("dweight", d.dweight,
                    fd_gradient(
                        in, [](Conv1dInputs& c) -> Tensor& { return c.weight; }, dy, dht),
                    kFdTol));
  EXPECT_TRUE(close("dbias", *d.dbias,
                    fd_gradient(
                        in, [](Conv1dInputs& c) -> Tensor& { return *c.bias; }, dy, dht),
                    kFdTol));
  // Slot 0 of initial_state is read by nothing here (no empty sequence): its gradient is exactly zero.
  const Tensor fd_h0 = fd_gradient(
      in, [](Conv1dInputs& c) -> Tensor& { return *c.initial_state; }, dy, dht);
  EXPECT_TRUE(close("dh0", *d.dh0, fd_h0, kFdTol));
  for (std::int64_t i = 0; i < d.dh0->numel(); i += 4) EXPECT_EQ(d.dh0->get(i), 0.0) << "slot 0 at " << i;
}

INSTANTIATE_TEST_SUITE_P(Activations, Conv1dFiniteDifferences, ::testing::Values(Activation::None, Activation::Silu),
                         [](const auto& tp) { return tp.param == Activation::Silu ? "Silu" : "None"; });

Tensor rows(const Tensor& x, std::int64_t t0, std::int64_t len) {
  Tensor out(DType::F64, {1, len, x.dim(2)});
  std::copy_n(x.data<double>() + t0 * x.dim(2), len * x.dim(2), out.data<double>());
  return out;
}

TEST(Conv1dVarlen, PackedEqualsEachSequenceAlone) {
  const std::vector<std::int64_t> cu{0, 1, 3, 12};  // shorter than the window, then longer
  const Conv1dInputs in = random_conv(1, 12, 5, 4, true, false, cu, Activation::Silu, 31);
  const Tensor dy = random_normal(in.x.shape(), 31, "dy");
  const Tensor y = ref::conv1d_forward(in);
  const ref::Conv1dGrads d = ref::conv1d_backward(in, dy);
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    SCOPED_TRACE("sequence " + std::to_string(n));
    const std::int64_t t0 = cu[n], len = cu[n + 1] - cu[n];
    const Conv1dInputs one{rows(in.x, t0, len), in.weight, in.bias, std::nullopt, std::nullopt, Activation::Silu};
    // Identical arithmetic: bit-for-bit equal results, so any tolerance above zero holds.
    EXPECT_TRUE(close("y", rows(y, t0, len), ref::conv1d_forward(one), 1e-300));
    EXPECT_TRUE(close("dx", rows(d.dx, t0, len), ref::conv1d_backward(one, rows(dy, t0, len)).dx, 1e-300));
  }
}

// initial_state slot j in [1, W-1] is the token at j - W: running with it equals prepending those
// tokens to the sequence and dropping their outputs.
TEST(Conv1dInitialState, SlotsActAsPrependedTokens) {
  const std::int64_t T = 6, D = 3, W = 4;
  const Conv1dInputs in = random_conv(1, T, D, W, true, true, std::nullopt, Activation::Silu, 41);
  Conv1dInputs longer{
      Tensor(DType::F64, {1, T + W - 1, D}), in.weight, in.bias, std::nullopt, std::nullopt, Activation::Silu};
  for (std::int64_t d = 0; d < D; ++d) {
    for (std::int64_t j = 1; j < W; ++j) longer.x.set((j - 1) * D + d, in.initial_state->get(d * W + j));
    for (std::int64_t t = 0; t < T; ++t) longer.x.set((W - 1 + t) * D + d, in.x.get(t * D + d));
  }
  const Tensor dy = random_normal(in.x.shape(), 41, "dy");
  Tensor dy_longer(DType::F64, longer.x.shape());
  std::copy_n(dy.data<double>(), dy.numel(), dy_longer.data<double>() + (W - 1) * D);
  EXPECT_TRUE(close("y", ref::conv1d_forward(in), rows(ref::conv1d_forward(longer), W - 1, T), 1e-15));
  const ref::Conv1dGrads d = ref::conv1d_backward(in, dy), dl = ref::conv1d_backward(longer, dy_longer);
  EXPECT_TRUE(close("dx", d.dx, rows(dl.dx, W - 1, T), 1e-15));
  EXPECT_TRUE(close("dweight", d.dweight, dl.dweight, 1e-14));  // same terms summed in another order
  Tensor dh0_want(DType::F64, in.initial_state->shape());
  for (std::int64_t dd = 0; dd < D; ++dd)
    for (std::int64_t j = 1; j < W; ++j) dh0_want.set(dd * W + j, dl.dx.get((j - 1) * D + dd));
  EXPECT_TRUE(close("dh0", *d.dh0, dh0_want, 1e-15));
}

// T = 2 < W = 3, D = 1: the extended sequence is h0_0 h0_1 h0_2 x_0 x_1 and slot s of the final state is
// its token T + s: h0_2, x_0, x_1. A longer sequence's slots are its last W tokens, slot 0 included.
TEST(Conv1dFinalState, SlotsHoldTheLastWTokensOfTheExtendedSequence) {
  const Conv1dInputs in{Tensor::from(std::vector<double>{0.7, -1.2, 2.5, 0.25, -3.0}, {1, 5, 1}),
                        Tensor::from(std::vector<double>{0.3, -0.8, 0.5}, {1, 3}),
                        std::nullopt,
                        Tensor::from(std::vector<double>{9.0, 8.0, 7.0, 6.0, 5.0, 4.0}, {2, 1, 3}),
                        std::vector<std::int64_t>{0, 2, 5},
                        Activation::Silu};
  const Tensor state = ref::conv1d_final_state(in);
  const std::vector<double> want{7.0, 0.7, -1.2, 2.5, 0.25, -3.0};
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(state.get(i), want[static_cast<std::size_t>(i)]) << i;
  // Its gradient reaches exactly the token each slot holds: slot 0 of sequence 1 is x_2.
  const Tensor dht = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 1, 3});
  const ref::Conv1dGrads with = ref::conv1d_backward(in, Tensor(DType::F64, {1, 5, 1}), dht);
  const std::vector<double> dx{2, 3, 4, 5, 6}, dh0{0, 0, 1, 0, 0, 0};
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(with.dx.get(i), dx[static_cast<std::size_t>(i)]) << i;
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(with.dh0->get(i), dh0[static_cast<std::size_t>(i)]) << i;
}

// Two calls chained through the state equal one call on the concatenation (the state's purpose).
TEST(Conv1dFinalState, ChainedCallsEqualOneCall) {
  const std::int64_t T = 9, D = 3, W = 4, cut = 5;
  const Conv1dInputs whole = random_conv(1, T, D, W, true, true, std::nullopt, Activation::Silu, 51);
  const Conv1dInputs first{rows(whole.x, 0, cut), whole.weight, whole.bias,
                           whole.initial_state,   std::nullopt, Activation::Silu};
  const Conv1dInputs second{rows(whole.x, cut, T - cut),    whole.weight, whole.bias,
                            ref::conv1d_final_state(first), std::nullopt, Activation::Silu};
  const Tensor y = ref::conv1d_forward(whole);
  // Identical arithmetic: bit-for-bit equal results.
  EXPECT_TRUE(close("y first", rows(y, 0, cut), ref::conv1d_forward(first), 1e-300));
  EXPECT_TRUE(close("y second", rows(y, cut, T - cut), ref::conv1d_forward(second), 1e-300));
  EXPECT_TRUE(close("final_state", ref::conv1d_final_state(whole), ref::conv1d_final_state(second), 1e-300));
}

void expect_conv_error(const Conv1dInputs& in, const std::string& message) {
  try {
    ref::conv1d_forward(in);
    ADD_FAILURE() << "expected ConfigError: " << message;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.what(), message);
  }
}

TEST(Conv1dErrors, BadInputsNameTheTensorAndTheFix) {
  Conv1dInputs in = random_conv(1, 5, 3, 4, true, true, std::nullopt, Activation::Silu, 1);
  in.weight = Tensor(DType::F64, {2, 4});
  expect_conv_error(in, "weight has shape [2, 4], expected [D, W] (D of x) = [3, 4]");
  in = random_conv(1, 5, 3, 4, true, true, std::nullopt, Activation::Silu, 1);
  in.initial_state = Tensor(DType::F64, {1, 3, 3});
  expect_conv_error(in, "initial_state has shape [1, 3, 3], expected [N, D, W] = [1, 3, 4]");
  in = random_conv(1, 5, 3, 4, true, false, std::nullopt, Activation::Silu, 1);
  in.x.set(2, std::numeric_limits<double>::infinity());
  expect_conv_error(in, "x holds Inf at flat index 2; the oracle needs finite inputs");
  in = random_conv(1, 5, 3, 4, false, false, std::vector<std::int64_t>{0, 3}, Activation::Silu, 1);
  expect_conv_error(in, "cu_seqlens ends at 3 but the packed length T is 5; the last offset must equal T");
  in = random_conv(1, 5, 3, 4, false, false, std::nullopt, Activation::Silu, 1);
  in.x = in.x.to(DType::F32);
  expect_conv_error(in, "x is F32; the oracle takes F64 tensors (upcast with Tensor::to(DType::F64))");
  in = random_conv(1, 5, 3, 4, false, false, std::nullopt, Activation::Silu, 1);
  try {
    ref::conv1d_backward(in, Tensor(DType::F64, {1, 4, 3}));
    ADD_FAILURE() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "dy has shape [1, 4, 3], expected [B, T, D] (the shape of x) = [1, 5, 3]");
  }
}

}  // namespace
}  // namespace gdnv
