// The gated delta rule oracle (reference/): hand-computed tiny cases, finite differences against every
// analytic gradient, varlen and GVA identities, chunk-boundary sweeps, and its input errors.
#include <functional>

#include <gtest/gtest.h>

#include "reference/l2norm.hpp"
#include "reference/span_map.hpp"
#include "reference_testing.hpp"

namespace gdnv {
namespace {

using ref::GdrInputs;
using testing::close;
using testing::GdrSpec;
using testing::random_gdr;
using testing::random_normal;

// Recurrent vs chunked: both are fp64 evaluations of the same contracting recurrence (unit-norm k,
// beta in (0,1), g <= 0); each output element is a sum of O(T K) terms whose rounding errors of
// eps = 1.1e-16 add to ~1e-14 relative at these sizes. 1e-12 leaves 100x headroom and is the bound of
// docs/DESIGN.md §1.1.
constexpr double kFormsTol = 1e-12;

Tensor from(const std::vector<double>& values, Shape shape) { return Tensor::from(values, std::move(shape)); }

// All gradients of both forms, in one place for loops over names.
struct Grads {
  std::vector<std::pair<std::string, Tensor>> all;
};

Grads named(ref::GdrGrads d) {
  return {{{"dq", std::move(d.dq)},
           {"dk", std::move(d.dk)},
           {"dv", std::move(d.dv)},
           {"dg", std::move(d.dg)},
           {"dbeta", std::move(d.dbeta)},
           {"dh0", std::move(d.dh0)}}};
}

// Runs one form: forward and backward.
struct FormRun {
  ref::GdrOutputs out;
  Grads grads;
};

FormRun run_recurrent(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht) {
  return {ref::gdr_recurrent_forward(in), named(ref::gdr_recurrent_backward(in, d_o, dht))};
}
FormRun run_chunked(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht, int C) {
  return {ref::gdr_chunked_forward(in, C), named(ref::gdr_chunked_backward(in, d_o, dht, C))};
}

void expect_runs_close(const FormRun& got, const FormRun& want, double tol) {
  EXPECT_TRUE(close("o", got.out.o, want.out.o, tol));
  EXPECT_TRUE(close("final_state", got.out.final_state, want.out.final_state, tol));
  for (std::size_t i = 0; i < want.grads.all.size(); ++i)
    EXPECT_TRUE(close(want.grads.all[i].first, got.grads.all[i].second, want.grads.all[i].second, tol));
}

Tensor d_o_for(const GdrInputs& in, std::uint64_t seed) {
  return random_normal({in.v.dim(0), in.v.dim(1), in.v.dim(2), in.v.dim(3)}, seed, "do");
}
Tensor dht_for(const GdrInputs& in, std::uint64_t seed) {
  const std::int64_t N = in.cu_seqlens ? static_cast<std::int64_t>(in.cu_seqlens->size()) - 1 : in.q.dim(0);
  return random_normal({N, in.v.dim(2), in.k.dim(3), in.v.dim(3)}, seed, "dht");
}

// ---- Hand-computed tiny cases (K = V = 1, so scale = 1 and S is a scalar) ----
// With a_t = e^{g_t} (1 - beta_t k_t^2) and b_t = beta_t k_t v_t: S_t = a_t S_{t-1} + b_t, o_t = q_t S_t.
// For L = sum_t do_t o_t + dht S_T, let lambda_t = dL/dS_t = do_t q_t + a_{t+1} lambda_{t+1}
// (lambda_{T+1} = dht, a_{T+1} = 1). Then dq_t = do_t S_t, dv_t = lambda_t beta_t k_t,
// dbeta_t = lambda_t k_t (v_t - e^{g_t} k_t S_{t-1}), dg_t = lambda_t a_t S_{t-1},
// dk_t = lambda_t beta_t (v_t - 2 e^{g_t} k_t S_{t-1}), dh0 = a_1 lambda_1.
struct Tiny {
  std::vector<double> q, k, v, g, beta;
  double s0, dht;
  std::vector<double> d_o;
};

void check_tiny(const Tiny& c, const FormRun& run) {
  const auto T = static_cast<std::int64_t>(c.q.size());
  std::vector<double> S(T + 1, c.s0), a(T), lambda(T + 1, c.dht);
  for (std::int64_t t = 0; t < T; ++t) {
    a[t] = std::exp(c.g[t]) * (1 - c.beta[t] * c.k[t] * c.k[t]);
    S[t + 1] = a[t] * S[t] + c.beta[t] * c.k[t] * c.v[t];
  }
  for (std::int64_t t = T - 1; t >= 0; --t)
    lambda[t] = c.d_o[t] * c.q[t] + (t + 1 < T ? a[t + 1] : 1.0) * lambda[t + 1];
  // Values are O(1) and each is a handful of fp64 operations, each rounding by <= eps |x| ~ 5e-16.
  const double tol = 4e-15;
  EXPECT_NEAR(run.out.final_state.get(0), S[T], tol);
  for (std::int64_t t = 0; t < T; ++t) {
    const double e = std::exp(c.g[t]);
    EXPECT_NEAR(run.out.o.get(t), c.q[t] * S[t + 1], tol) << "o at t=" << t;
    EXPECT_NEAR(run.grads.all[0].second.get(t), c.d_o[t] * S[t + 1], tol) << "dq at t=" << t;
    EXPECT_NEAR(run.grads.all[1].second.get(t), lambda[t] * c.beta[t] * (c.v[t] - 2 * e * c.k[t] * S[t]), tol)
        << "dk at t=" << t;
    EXPECT_NEAR(run.grads.all[2].second.get(t), lambda[t] * c.beta[t] * c.k[t], tol) << "dv at t=" << t;
    EXPECT_NEAR(run.grads.all[3].second.get(t), lambda[t] * a[t] * S[t], tol) << "dg at t=" << t;
    EXPECT_NEAR(run.grads.all[4].second.get(t), lambda[t] * c.k[t] * (c.v[t] - e * c.k[t] * S[t]), tol)
        << "dbeta at t=" << t;
  }
  EXPECT_NEAR(run.grads.all[5].second.get(0), a[0] * lambda[0], tol);
}

void run_tiny_case(const Tiny& c) {
  const auto T = static_cast<std::int64_t>(c.q.size());
  GdrInputs in{from(c.q, {1, T, 1, 1}),
               from(c.k, {1, T, 1, 1}),
               from(c.v, {1, T, 1, 1}),
               from(c.g, {1, T, 1}),
               from(c.beta, {1, T, 1}),
               from({c.s0}, {1, 1, 1, 1}),
               std::nullopt,
               std::nullopt,
               false};
  const Tensor d_o = from(c.d_o, {1, T, 1, 1});
  const Tensor dht = from({c.dht}, {1, 1, 1, 1});
  {
    SCOPED_TRACE("recurrent");
    check_tiny(c, run_recurrent(in, d_o, dht));
  }
  for (int C : {1, 2, 64}) {
    SCOPED_TRACE("chunked C=" + std::to_string(C));
    check_tiny(c, run_chunked(in, d_o, dht, C));
  }
}

TEST(GdrTiny, OneTokenMatchesClosedForm) { run_tiny_case({{1.1}, {0.8}, {1.5}, {-0.2}, {0.6}, 0.5, 0.3, {-0.7}}); }

TEST(GdrTiny, TwoTokensMatchClosedForm) {
  run_tiny_case({{1.1, -0.4}, {0.8, 0.9}, {1.5, -2.0}, {-0.2, -1.3}, {0.6, 0.25}, 0.5, 0.3, {-0.7, 1.2}});
}

// ---- Finite differences ----
// L = <o, do> + <final_state, dht>; central differences with step h in fp64 have truncation error
// ~h^2 |L'''| ~ 1e-10 and rounding error ~eps |L| / h ~ 1e-11 for h = 1e-5 and O(1) inputs, so a
// relative RMS error of 1e-6 on each gradient tensor has >= 1e3 headroom.
constexpr double kFdStep = 1e-5, kFdTol = 1e-6;

using Forward = std::function<ref::GdrOutputs(const GdrInputs&)>;

double loss(const ref::GdrOutputs& out, const Tensor& d_o, const Tensor& dht) {
  double l = 0;
  for (std::int64_t i = 0; i < d_o.numel(); ++i) l += out.o.get(i) * d_o.get(i);
  for (std::int64_t i = 0; i < dht.numel(); ++i) l += out.final_state.get(i) * dht.get(i);
  return l;
}

Tensor fd_gradient(const GdrInputs& base, const std::function<Tensor&(GdrInputs&)>& field, const Forward& fwd,
                   const Tensor& d_o, const Tensor& dht) {
  GdrInputs in = base;
  Tensor& x = field(in);
  Tensor grad(DType::F64, x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.get(i);
    x.set(i, x0 + kFdStep);
    const double up = loss(fwd(in), d_o, dht);
    x.set(i, x0 - kFdStep);
    const double down = loss(fwd(in), d_o, dht);
    x.set(i, x0);
    grad.set(i, (up - down) / (2 * kFdStep));
  }
  return grad;
}

void expect_gradients_match_fd(const GdrInputs& in, const Forward& fwd, const Grads& analytic) {
  const Tensor d_o = d_o_for(in, 7), dht = dht_for(in, 7);
  const std::vector<std::pair<std::string, std::function<Tensor&(GdrInputs&)>>> fields = {
      {"dq", [](GdrInputs& x) -> Tensor& { return x.q; }},
      {"dk", [](GdrInputs& x) -> Tensor& { return x.k; }},
      {"dv", [](GdrInputs& x) -> Tensor& { return x.v; }},
      {"dg", [](GdrInputs& x) -> Tensor& { return x.g; }},
      {"dbeta", [](GdrInputs& x) -> Tensor& { return x.beta; }},
      {"dh0", [](GdrInputs& x) -> Tensor& { return *x.initial_state; }}};
  for (std::size_t i = 0; i < fields.size(); ++i)
    EXPECT_TRUE(
        close(fields[i].first, analytic.all[i].second, fd_gradient(in, fields[i].second, fwd, d_o, dht), kFdTol));
}

// Two sequences, each crossing chunk boundaries for C = 2.
GdrSpec fd_spec(bool l2norm) {
  return {.T = 9,
          .Hk = 1,
          .Hv = 2,
          .K = 3,
          .V = 2,
          .cu_seqlens = std::vector<std::int64_t>{0, 4, 9},
          .scale = 0.8,
          .l2norm = l2norm,
          .seed = 11};
}

class GdrFiniteDifferences : public ::testing::TestWithParam<bool> {};

TEST_P(GdrFiniteDifferences, RecurrentGradientsMatchCentralDifferences) {
  const GdrInputs in = random_gdr(fd_spec(GetParam()));
  const Grads d = named(ref::gdr_recurrent_backward(in, d_o_for(in, 7), dht_for(in, 7)));
  expect_gradients_match_fd(
      in, [](const GdrInputs& x) { return ref::gdr_recurrent_forward(x); }, d);
}

TEST_P(GdrFiniteDifferences, ChunkedGradientsMatchCentralDifferences) {
  const GdrInputs in = random_gdr(fd_spec(GetParam()));
  const Grads d = named(ref::gdr_chunked_backward(in, d_o_for(in, 7), dht_for(in, 7), 2));
  expect_gradients_match_fd(
      in, [](const GdrInputs& x) { return ref::gdr_chunked_forward(x, 2); }, d);
}

INSTANTIATE_TEST_SUITE_P(L2Norm, GdrFiniteDifferences, ::testing::Values(false, true),
                         [](const auto& tp) { return tp.param ? std::string("WithL2Norm") : std::string("Plain"); });

// m_s counts every product of dgamma_s = dg_s - dg_{s+1} (within a chunk, dg_t = sum_{s >= t} dgamma_s)
// with its magnitude, so |dgamma_s| <= m_s by the triangle inequality; and where one product dominates
// the sum, the bound is nearly met: an m inflated 2x, or a dominant product left out, fails
// (docs/DESIGN.md §4, cumsum-decay). Sequences of 9 and 7 tokens in chunks of 4 (cut at each sequence's
// start), an initial state, weak gates.
TEST(GdrChunked, DgammaMagnitudesBoundEveryTokensAdjoint) {
  const int C = 4;
  const GdrInputs in = random_gdr({.T = 16,
                                   .Hk = 1,
                                   .Hv = 2,
                                   .K = 3,
                                   .V = 2,
                                   .cu_seqlens = std::vector<std::int64_t>{0, 9, 16},
                                   .l2norm = true,
                                   .gates = testing::Gates::LogSigmoidTau10,
                                   .seed = 5});
  const Tensor d_o = d_o_for(in, 3);
  const Tensor dg = ref::gdr_chunked_backward(in, d_o, std::nullopt, C).dg;
  const Tensor m = ref::gdr_dgamma_magnitudes(in, d_o, C);
  int checked = 0;
  double tightest = 0;  // max over tokens of |dgamma_s| / m_s
  for (const auto [begin, end] : {std::pair{0, 9}, std::pair{9, 16}})
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t t = begin; t < end; ++t) {
        const bool chunk_end = (t - begin) % C == C - 1 || t == end - 1;
        const double dgamma = dg.get(t * 2 + h) - (chunk_end ? 0.0 : dg.get((t + 1) * 2 + h));
        EXPECT_LE(std::abs(dgamma), m.get(t * 2 + h) * (1 + 1e-12)) << "token " << t << " head " << h;
        tightest = std::max(tightest, std::abs(dgamma) / m.get(t * 2 + h));
        ++checked;
      }
  EXPECT_EQ(checked, 32);
  EXPECT_GT(tightest, 0.5);
}

// ---- Identities ----

TEST(GdrL2Norm, InKernelNormEqualsNormalisingTheInputs) {
  const GdrSpec s{.T = 20, .K = 5, .l2norm = true};
  GdrInputs in = random_gdr(s);
  GdrInputs pre = in;
  pre.use_qk_l2norm = false;
  for (Tensor* x : {&pre.q, &pre.k})
    for (std::int64_t r = 0; r < x->numel() / s.K; ++r) {
      double n2 = 0;
      for (std::int64_t i = 0; i < s.K; ++i) n2 += x->get(r * s.K + i) * x->get(r * s.K + i);
      for (std::int64_t i = 0; i < s.K; ++i) x->set(r * s.K + i, x->get(r * s.K + i) / std::sqrt(n2 + 1e-6));
    }
  // Same arithmetic on both sides up to the order of the norm's sum: a few eps.
  EXPECT_TRUE(close("o", ref::gdr_recurrent_forward(in).o, ref::gdr_recurrent_forward(pre).o, 1e-14));
  EXPECT_TRUE(close("o", ref::gdr_chunked_forward(in, 8).o, ref::gdr_chunked_forward(pre, 8).o, 1e-14));
}

// Slices [t0, t0 + len) of a [B, T, ...] tensor's batch row b, as a [1, len, ...] tensor.
Tensor slice_tokens(const Tensor& x, std::int64_t b, std::int64_t t0, std::int64_t len) {
  Shape shape = x.shape();
  shape[0] = 1;
  shape[1] = len;
  Tensor out(DType::F64, shape);
  const std::int64_t row = x.numel() / (x.dim(0) * x.dim(1));
  std::copy_n(x.data<double>() + (b * x.dim(1) + t0) * row, len * row, out.data<double>());
  return out;
}

Tensor slice_state(const Tensor& x, std::int64_t n) {
  Shape shape = x.shape();
  shape[0] = 1;
  Tensor out(DType::F64, shape);
  const std::int64_t each = x.numel() / x.dim(0);
  std::copy_n(x.data<double>() + n * each, each, out.data<double>());
  return out;
}

class GdrVarlen : public ::testing::TestWithParam<bool> {};

TEST_P(GdrVarlen, PackedEqualsEachSequenceAlone) {
  const bool chunked = GetParam();
  const GdrSpec s{.T = 104, .Hk = 2, .Hv = 2, .K = 6, .V = 5, .cu_seqlens = std::vector<std::int64_t>{0, 1, 71, 104}};
  const GdrInputs in = random_gdr(s);
  const Tensor d_o = d_o_for(in, 3), dht = dht_for(in, 3);
  auto run = [&](const GdrInputs& x, const Tensor& dx, const Tensor& dh) {
    return chunked ? run_chunked(x, dx, dh, 16) : run_recurrent(x, dx, dh);
  };
  const FormRun packed = run(in, d_o, dht);
  for (std::int64_t n = 0; n + 1 < static_cast<std::int64_t>(s.cu_seqlens->size()); ++n) {
    const std::int64_t t0 = (*s.cu_seqlens)[n], len = (*s.cu_seqlens)[n + 1] - t0;
    SCOPED_TRACE("sequence " + std::to_string(n));
    const GdrInputs one{slice_tokens(in.q, 0, t0, len),
                        slice_tokens(in.k, 0, t0, len),
                        slice_tokens(in.v, 0, t0, len),
                        slice_tokens(in.g, 0, t0, len),
                        slice_tokens(in.beta, 0, t0, len),
                        slice_state(*in.initial_state, n),
                        std::nullopt,
                        std::nullopt,
                        false};
    const FormRun alone = run(one, slice_tokens(d_o, 0, t0, len), slice_state(dht, n));
    // Identical arithmetic per sequence: bit-for-bit equal, so the tolerance is eps-level.
    const FormRun packed_n{{slice_tokens(packed.out.o, 0, t0, len), slice_state(packed.out.final_state, n), nullptr},
                           {{{"dq", slice_tokens(packed.grads.all[0].second, 0, t0, len)},
                             {"dk", slice_tokens(packed.grads.all[1].second, 0, t0, len)},
                             {"dv", slice_tokens(packed.grads.all[2].second, 0, t0, len)},
                             {"dg", slice_tokens(packed.grads.all[3].second, 0, t0, len)},
                             {"dbeta", slice_tokens(packed.grads.all[4].second, 0, t0, len)},
                             {"dh0", slice_state(packed.grads.all[5].second, n)}}}};
    expect_runs_close(packed_n, alone, 1e-15);
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, GdrVarlen, ::testing::Values(false, true),
                         [](const auto& tp) { return tp.param ? std::string("Chunked") : std::string("Recurrent"); });

class GdrGva : public ::testing::TestWithParam<bool> {};

TEST_P(GdrGva, SharedKeyHeadsEqualRepeatedKeyHeads) {
  const bool chunked = GetParam();
  const GdrSpec s{.B = 2, .T = 40, .Hk = 2, .Hv = 6, .K = 5, .V = 4, .l2norm = true};
  const GdrInputs in = random_gdr(s);
  GdrInputs rep = in;
  const std::int64_t group = s.Hv / s.Hk;
  for (Tensor* x : {&rep.q, &rep.k}) {
    const Tensor src = *x;
    *x = Tensor(DType::F64, {s.B, s.T, s.Hv, s.K});
    for (std::int64_t bt = 0; bt < s.B * s.T; ++bt)
      for (std::int64_t h = 0; h < s.Hv; ++h)
        for (std::int64_t i = 0; i < s.K; ++i)
          x->set((bt * s.Hv + h) * s.K + i, src.get((bt * s.Hk + h / group) * s.K + i));
  }
  const Tensor d_o = d_o_for(in, 5), dht = dht_for(in, 5);
  const FormRun shared = chunked ? run_chunked(in, d_o, dht, 16) : run_recurrent(in, d_o, dht);
  FormRun repeated = chunked ? run_chunked(rep, d_o, dht, 16) : run_recurrent(rep, d_o, dht);
  for (int which : {0, 1}) {  // dq, dk of the repeated heads summed over each group
    Tensor& d = repeated.grads.all[which].second;
    Tensor summed(DType::F64, {s.B, s.T, s.Hk, s.K});
    for (std::int64_t bt = 0; bt < s.B * s.T; ++bt)
      for (std::int64_t h = 0; h < s.Hv; ++h)
        for (std::int64_t i = 0; i < s.K; ++i) {
          const std::int64_t at = (bt * s.Hk + h / group) * s.K + i;
          summed.set(at, summed.get(at) + d.get((bt * s.Hv + h) * s.K + i));
        }
    d = summed;
  }
  // Same arithmetic except the order of the group sum in dq, dk: a few eps.
  expect_runs_close(shared, repeated, 1e-14);
}

INSTANTIATE_TEST_SUITE_P(Forms, GdrGva, ::testing::Values(false, true),
                         [](const auto& tp) { return tp.param ? std::string("Chunked") : std::string("Recurrent"); });

TEST(GdrForms, BatchedEqualsPacked) {
  const GdrSpec s{.B = 2, .T = 33, .Hk = 1, .Hv = 2};
  const GdrInputs batched = random_gdr(s);
  GdrInputs packed = batched;
  for (Tensor* x : {&packed.q, &packed.k, &packed.v, &packed.g, &packed.beta}) {
    Shape shape = x->shape();
    shape[1] *= shape[0];
    shape[0] = 1;
    *x = x->reshaped(shape);
  }
  packed.cu_seqlens = std::vector<std::int64_t>{0, s.T, 2 * s.T};
  const Tensor d_o = d_o_for(batched, 9), dht = dht_for(batched, 9);
  const FormRun want = run_chunked(batched, d_o, dht, 8);
  const FormRun got = run_chunked(packed, d_o.reshaped({1, 2 * s.T, s.Hv, s.V}), dht, 8);
  EXPECT_TRUE(close("o", got.out.o.reshaped(want.out.o.shape()), want.out.o, 1e-15));
  EXPECT_TRUE(close("dv", got.grads.all[2].second.reshaped(want.out.o.shape()), want.grads.all[2].second, 1e-15));
  EXPECT_TRUE(close("dh0", got.grads.all[5].second, want.grads.all[5].second, 1e-15));
}

// Varlen with a zero-length sequence and partial last chunks, GVA, odd K and V.
const GdrSpec kVarlenGva{
    .T = 90, .Hk = 2, .Hv = 6, .K = 7, .V = 5, .cu_seqlens = std::vector<std::int64_t>{0, 17, 17, 90}, .l2norm = true};

// Each (sequence, key head) piece runs whole on one thread: 1, 2 or 3 threads give the same bits,
// including dq, dk, which sum over the value heads of a GVA group.
TEST(GdrForms, ThreadCountChangesNoBit) {
  const GdrInputs in = random_gdr(kVarlenGva);
  const Tensor d_o = d_o_for(in, 4), dht = dht_for(in, 4);
  for (const bool chunked : {false, true}) {
    auto run = [&](int threads) {
      return chunked ? FormRun{ref::gdr_chunked_forward(in, 16, threads),
                               named(ref::gdr_chunked_backward(in, d_o, dht, 16, threads))}
                     : FormRun{ref::gdr_recurrent_forward(in, threads),
                               named(ref::gdr_recurrent_backward(in, d_o, dht, threads))};
    };
    const FormRun one = run(1);
    for (const int threads : {2, 3}) {
      const FormRun many = run(threads);
      SCOPED_TRACE((chunked ? "chunked, " : "recurrent, ") + std::to_string(threads) + " threads");
      EXPECT_TRUE(many.out.o.bitwise_equal(one.out.o));
      EXPECT_TRUE(many.out.final_state.bitwise_equal(one.out.final_state));
      for (std::size_t i = 0; i < one.grads.all.size(); ++i)
        EXPECT_TRUE(many.grads.all[i].second.bitwise_equal(one.grads.all[i].second)) << one.grads.all[i].first;
    }
  }
}

// The backward given the forward's tape skips its own state pass: every gradient is the same bits as
// without it, on two threads. And it does read the tape: one recorded from other values of the same
// shapes moves every gradient.
TEST(GdrForms, BackwardFromTheForwardsTapeGivesTheSameBits) {
  const GdrInputs in = random_gdr(kVarlenGva);
  GdrSpec other_spec = kVarlenGva;
  other_spec.seed = 2;
  const GdrInputs other = random_gdr(other_spec);
  const Tensor d_o = d_o_for(in, 6), dht = dht_for(in, 6);
  const ref::GdrOutputs taped = ref::gdr_chunked_forward(in, 16, 2, true);
  ASSERT_NE(taped.tape, nullptr);
  EXPECT_EQ(ref::gdr_chunked_forward(in, 16, 2).tape, nullptr);
  const Grads want = named(ref::gdr_chunked_backward(in, d_o, dht, 16, 2));
  const Grads got = named(ref::gdr_chunked_backward(in, d_o, dht, 16, 2, taped.tape.get()));
  const auto other_tape = ref::gdr_chunked_forward(other, 16, 2, true).tape;
  const Grads misled = named(ref::gdr_chunked_backward(in, d_o, dht, 16, 2, other_tape.get()));
  for (std::size_t i = 0; i < want.all.size(); ++i) {
    EXPECT_TRUE(got.all[i].second.bitwise_equal(want.all[i].second)) << want.all[i].first;
    EXPECT_FALSE(misled.all[i].second.bitwise_equal(want.all[i].second)) << want.all[i].first;
  }
}

// Chunk-boundary sweep: T in {C-1, C, C+1, 2C+1} for every supported C, odd K and V.
TEST(GdrForms, ChunkedEqualsRecurrentAcrossChunkBoundaries) {
  for (int C : {16, 32, 64})
    for (std::int64_t T : {C - 1, C, C + 1, 2 * C + 1}) {
      SCOPED_TRACE("C=" + std::to_string(C) + " T=" + std::to_string(T));
      const GdrSpec s{.T = T, .Hk = 1, .Hv = 2, .K = 7, .V = 5, .seed = static_cast<std::uint64_t>(C * 1000 + T)};
      const GdrInputs in = random_gdr(s);
      const Tensor d_o = d_o_for(in, 1), dht = dht_for(in, 1);
      expect_runs_close(run_chunked(in, d_o, dht, C), run_recurrent(in, d_o, dht), kFormsTol);
    }
}

TEST(GdrForms, ZeroLengthSequencePassesItsStateThrough) {
  const GdrSpec s{.T = 12, .cu_seqlens = std::vector<std::int64_t>{0, 5, 5, 12}};
  const GdrInputs in = random_gdr(s);
  const Tensor d_o = d_o_for(in, 2), dht = dht_for(in, 2);
  for (const FormRun& r : {run_recurrent(in, d_o, dht), run_chunked(in, d_o, dht, 4)}) {
    EXPECT_TRUE(close("final_state[1]", slice_state(r.out.final_state, 1), slice_state(*in.initial_state, 1), 1e-300));
    EXPECT_TRUE(close("dh0[1]", slice_state(r.grads.all[5].second, 1), slice_state(dht, 1), 1e-300));
  }
}

// ---- Span maps ----

TEST(GdrSpanMap, FoldOfSplitEqualsUnsplitState) {
  const GdrSpec s{.T = 50, .Hk = 1, .Hv = 2, .K = 4, .V = 3};
  const GdrInputs whole = random_gdr(s);
  const Tensor d_o = d_o_for(whole, 4), dht = dht_for(whole, 4);
  const ref::GdrOutputs want = ref::gdr_recurrent_forward(whole);
  const Tensor want_dh0 = ref::gdr_recurrent_backward(whole, d_o, dht).dh0;
  GdrInputs pieces = whole;  // the same tokens as three packed spans: [0, 7), [7, 31), [31, 50)
  pieces.cu_seqlens = std::vector<std::int64_t>{0, 7, 31, 50};
  pieces.initial_state.reset();
  const Tensor maps = ref::gdr_span_maps(pieces, 16);
  const Tensor backward_maps = ref::gdr_backward_span_maps(pieces, d_o, 16);
  Tensor S = whole.initial_state->reshaped({s.Hv, s.K, s.V});
  for (std::int64_t n = 0; n < 3; ++n) ref::fold_span_map(maps, n, FoldDirection::Forward, S);
  Tensor dS = dht.reshaped({s.Hv, s.K, s.V});
  for (std::int64_t n = 2; n >= 0; --n) ref::fold_span_map(backward_maps, n, FoldDirection::Backward, dS);
  // A few K x K products on top of the forms' agreement.
  EXPECT_TRUE(close("folded final_state", S, want.final_state.reshaped(S.shape()), kFormsTol));
  EXPECT_TRUE(close("folded dh0", dS, want_dh0.reshaped(dS.shape()), kFormsTol));
}

TEST(GdrSpanMap, FoldRejectsStateOfWrongShape) {
  const GdrSpec s{.initial_state = false};
  const Tensor maps = ref::gdr_span_maps(random_gdr(s));
  Tensor S(DType::F64, {1, s.K + 1, s.V});
  try {
    ref::fold_span_map(maps, 0, FoldDirection::Forward, S);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "S is F64 [1, 5, 3], expected F64 [Hv, K, V] = [1, 4, 3]");
  }
}

// ---- Input errors: one clear message naming the tensor and the fix ----

void expect_config_error(const GdrInputs& in, const std::string& message) {
  for (const auto& f : std::vector<std::function<void()>>{[&] { ref::gdr_recurrent_forward(in); },
                                                          [&] { ref::gdr_chunked_forward(in); }}) {
    try {
      f();
      ADD_FAILURE() << "expected ConfigError: " << message;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.what(), message);
    }
  }
}

GdrInputs valid_inputs() { return random_gdr({.T = 6, .Hk = 2, .Hv = 4, .K = 3, .V = 2}); }

TEST(GdrErrors, ValueHeadsNotAMultipleOfKeyHeads) {
  GdrInputs in = valid_inputs();
  in.v = Tensor(DType::F64, {1, 6, 3, 2});
  in.g = in.beta = Tensor(DType::F64, {1, 6, 3});
  in.initial_state.reset();
  expect_config_error(in, "Hv % Hk != 0 (Hv = 3, Hk = 2): the value heads must be a multiple of the key heads (GVA)");
}

TEST(GdrErrors, ShapeMismatchNamesTensorAndExpectedShape) {
  GdrInputs in = valid_inputs();
  in.k = Tensor(DType::F64, {1, 6, 2, 4});
  expect_config_error(in, "k has shape [1, 6, 2, 4], expected [B, T, Hk, K] (the shape of q) = [1, 6, 2, 3]");
  in = valid_inputs();
  in.g = Tensor(DType::F64, {1, 5, 4});
  expect_config_error(in, "g has shape [1, 5, 4], expected [B, T, Hv] = [1, 6, 4]");
  in = valid_inputs();
  in.initial_state = Tensor(DType::F64, {2, 4, 3, 2});
  expect_config_error(in, "initial_state has shape [2, 4, 3, 2], expected [N, Hv, K, V] = [1, 4, 3, 2]");
}

TEST(GdrErrors, NonF64TensorIsRejected) {
  GdrInputs in = valid_inputs();
  in.beta = in.beta.to(DType::F32);
  expect_config_error(in, "beta is F32; the oracle takes F64 tensors (upcast with Tensor::to(DType::F64))");
}

TEST(GdrErrors, NaNInInputIsRejected) {
  GdrInputs in = valid_inputs();
  in.v.set(5, std::nan(""));
  expect_config_error(in, "v holds NaN at flat index 5; the oracle needs finite inputs");
}

TEST(GdrErrors, BadCuSeqlensAreRejected) {
  GdrInputs in = valid_inputs();
  in.initial_state.reset();
  in.cu_seqlens = std::vector<std::int64_t>{1, 6};
  expect_config_error(in, "cu_seqlens must start at 0 (got 1)");
  in.cu_seqlens = std::vector<std::int64_t>{0, 4, 3, 6};
  expect_config_error(in, "cu_seqlens decreases at index 2 (4 -> 3); offsets must be non-decreasing");
  in.cu_seqlens = std::vector<std::int64_t>{0, 4};
  expect_config_error(in, "cu_seqlens ends at 4 but the packed length T is 6; the last offset must equal T");
  in.cu_seqlens = std::vector<std::int64_t>{0};
  expect_config_error(in, "cu_seqlens has 1 entries; it needs N + 1 >= 2 offsets [0, ..., T]");
  const GdrSpec s{.B = 2, .initial_state = false};
  in = random_gdr(s);
  in.cu_seqlens = std::vector<std::int64_t>{0, 8};
  expect_config_error(in, "cu_seqlens needs B == 1 (got B = 2): pack the sequences along T into one batch row");
}

TEST(GdrErrors, BadGradientInputsAreRejected) {
  const GdrInputs in = valid_inputs();
  const Tensor bad_do(DType::F64, {1, 6, 4, 3});
  for (const auto& f :
       std::vector<std::function<void()>>{[&] { ref::gdr_recurrent_backward(in, bad_do, std::nullopt); },
                                          [&] { ref::gdr_chunked_backward(in, bad_do, std::nullopt); }}) {
    try {
      f();
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_STREQ(e.what(), "do has shape [1, 6, 4, 3], expected [B, T, Hv, V] (the shape of o) = [1, 6, 4, 2]");
    }
  }
}

TEST(GdrErrors, TapeOfOtherSequencesOrChunkSizeIsRejected) {
  const GdrInputs in = random_gdr({.T = 12, .Hv = 2, .initial_state = false});
  GdrInputs shorter = in;
  shorter.cu_seqlens = std::vector<std::int64_t>{0, 5, 12};
  const Tensor d_o = d_o_for(in, 3);
  const auto tape = ref::gdr_chunked_forward(in, 4, 1, true).tape;
  for (const auto& f : std::vector<std::function<void()>>{
           [&] { ref::gdr_chunked_backward(in, d_o, std::nullopt, 8, 1, tape.get()); },
           [&] { ref::gdr_chunked_backward(shorter, d_o, std::nullopt, 4, 1, tape.get()); }}) {
    try {
      f();
      ADD_FAILURE() << "expected Error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "gdr_chunked_backward: the tape was recorded for other sequences, heads or chunk size; pass the "
                   "tape of the forward of these inputs, or none");
    }
  }
}

TEST(GdrErrors, NonPositiveChunkSizeIsRejected) {
  try {
    ref::gdr_chunked_forward(valid_inputs(), 0);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "chunk_size is 0; it must be a positive number of tokens (e.g. 64)");
  }
}

}  // namespace
}  // namespace gdnv
