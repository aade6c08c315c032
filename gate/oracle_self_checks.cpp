// Gate step "oracle self-checks": the fp64 oracle judged by itself: its two independent core forms agree,
// its hand-written backward is the derivative its forward finite-differences to, its grouped and freeing
// runs give the whole layer's bits, and the kernel conv's states continue a run exactly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "core/eigen.hpp"
#include "core/gemm.hpp"
#include "core/rng.hpp"
#include "gate/steps.hpp"
#include "reference/case_params.hpp"
#include "reference/conv1d.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/layer.hpp"
#include "reference/layer_params.hpp"

namespace gdnv::gate {
namespace {

// Elementwise f over a tensor, in fp64.
template <class F>
Tensor mapped(const Tensor& t, F f) {
  Tensor out(DType::F64, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i) out.set(i, f(t.get(i)));
  return out;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) s += a.get(i) * b.get(i);
  return s;
}

// x + e d, elementwise.
Tensor stepped(const Tensor& x, const Tensor& d, double e) {
  Tensor out = x;
  for (std::int64_t i = 0; i < x.numel(); ++i) out.set(i, x.get(i) + e * d.get(i));
  return out;
}

struct KernelShape {
  std::vector<std::int64_t> cu;
  std::int64_t Hk, Hv, K, V;
};

// Seeded kernel inputs: q, k, v ~ N(0, 1), g = -softplus(N(0, 1)) (log decay <= 0), beta = sigmoid,
// an initial state per sequence, L2 norm in the kernel.
ref::GdrInputs kernel_inputs(const KernelShape& s, std::uint64_t seed) {
  const std::int64_t T = s.cu.back(), N = static_cast<std::int64_t>(s.cu.size()) - 1;
  ref::GdrInputs in;
  in.q = ref::seeded_normal(seed, "q", {1, T, s.Hk, s.K});
  in.k = ref::seeded_normal(seed, "k", {1, T, s.Hk, s.K});
  in.v = ref::seeded_normal(seed, "v", {1, T, s.Hv, s.V});
  in.g = mapped(ref::seeded_normal(seed, "g", {1, T, s.Hv}), [](double x) { return -std::log1p(std::exp(x)); });
  in.beta = mapped(ref::seeded_normal(seed, "beta", {1, T, s.Hv}), [](double x) { return 1 / (1 + std::exp(-x)); });
  in.initial_state = ref::seeded_normal(seed, "h0", {N, s.Hv, s.K, s.V}, 0.5);
  in.cu_seqlens = s.cu;
  in.use_qk_l2norm = true;
  return in;
}

// The chunked (WY/UT) and recurrent forms share no code beyond I/O; they must agree. fp64 roundoff
// 1.1e-16 over chains of <= 200 tokens and 64-row chunk solves (condition ~1e2) stays near 1e-13;
// 1e-10 leaves margin and still sees any algebra slip (those are O(1)).
void forms_agree(StepResult& r, const KernelShape& s, int chunk, std::uint64_t seed) {
  const ref::GdrInputs in = kernel_inputs(s, seed);
  const Tensor d_o = ref::seeded_normal(seed, "do", in.v.shape());
  const Tensor dht = ref::seeded_normal(seed, "dht", in.initial_state->shape());
  const ref::GdrOutputs fr = ref::gdr_recurrent_forward(in), fc = ref::gdr_chunked_forward(in, chunk);
  const ref::GdrGrads gr = ref::gdr_recurrent_backward(in, d_o, dht),
                      gc = ref::gdr_chunked_backward(in, d_o, dht, chunk);
  const std::string tag = "T=" + std::to_string(s.cu.back()) + " C=" + std::to_string(chunk) + " ";
  if (!r.only.empty() && !r.only.starts_with(tag)) return;
  check_rel_rms(r, tag + "o", fr.o, fc.o, 1e-10);
  check_rel_rms(r, tag + "final_state", fr.final_state, fc.final_state, 1e-10);
  for (const auto& [name, a, b] : {std::tuple{"dq", &gr.dq, &gc.dq},
                                   {"dk", &gr.dk, &gc.dk},
                                   {"dv", &gr.dv, &gc.dv},
                                   {"dg", &gr.dg, &gc.dg},
                                   {"dbeta", &gr.dbeta, &gc.dbeta},
                                   {"dh0", &gr.dh0, &gc.dh0}})
    check_rel_rms(r, tag + name, *a, *b, 1e-10);
}

// Central differences of L along a seeded direction d equal <grad, d>. Step e: truncation e^2 |L'''| / 6,
// rounding 1e-16 |L| / e. The kernel (O(1) inputs, |L'''| ~ 1): e = 1e-5, both ~1e-10. The layer: along
// an N(0, 1) direction on in_proj.weight (entries ~0.02, so the step is 50x larger relative to them)
// |L'''| reaches 1.8e5 on the case parameters (fd - <grad, d> = 3.1e-6 at e = 1e-5, 3.1e-4 at 1e-4:
// e^2), so e = 2e-6: truncation 1.2e-7, rounding ~2e-9 (|L| ~ 40). Then 1e-6 (relative to
// max(1, |<grad, d>|)) catches a wrong derivative (an O(1) error) with over an order of margin.
constexpr double kKernelStep = 1e-5, kLayerStep = 2e-6;
void directional(StepResult& r, const std::string& what, const std::function<double(double)>& L, double analytic,
                 double e) {
  const double fd = (L(e) - L(-e)) / (2 * e);
  char buf[128];
  std::snprintf(buf, sizeof buf, "finite difference %.9e, backward %.9e", fd, analytic);
  r.check(std::abs(fd - analytic) <= 1e-6 * std::max(1.0, std::abs(analytic)), what, buf);
}

void kernel_finite_differences(StepResult& r) {
  const KernelShape s{{0, 10, 24}, 1, 2, 5, 4};
  const ref::GdrInputs in = kernel_inputs(s, 3);
  const Tensor d_o = ref::seeded_normal(3, "do", in.v.shape()),
               dht = ref::seeded_normal(3, "dht", in.initial_state->shape());
  const ref::GdrGrads g = ref::gdr_recurrent_backward(in, d_o, dht);
  const auto loss = [&](const ref::GdrInputs& x) {
    const ref::GdrOutputs o = ref::gdr_recurrent_forward(x);
    return dot(d_o, o.o) + dot(dht, o.final_state);
  };
  using Member = Tensor ref::GdrInputs::*;
  for (const auto& [name, member, grad] :
       {std::tuple<const char*, Member, const Tensor*>{"q", &ref::GdrInputs::q, &g.dq},
        {"k", &ref::GdrInputs::k, &g.dk},
        {"v", &ref::GdrInputs::v, &g.dv},
        {"g", &ref::GdrInputs::g, &g.dg},
        {"beta", &ref::GdrInputs::beta, &g.dbeta}}) {
    const Tensor d = ref::seeded_normal(4, name, (in.*member).shape());
    const Member field = member;  // clang before 16 cannot capture a structured binding
    directional(
        r, std::string("kernel d") + name,
        [&](double e) {
          ref::GdrInputs x = in;
          x.*field = stepped(in.*field, d, e);
          return loss(x);
        },
        dot(*grad, d), kKernelStep);
  }
  const Tensor d = ref::seeded_normal(4, "h0", in.initial_state->shape());
  directional(
      r, "kernel dh0",
      [&](double e) {
        ref::GdrInputs x = in;
        x.initial_state = stepped(*in.initial_state, d, e);
        return loss(x);
      },
      dot(g.dh0, d), kKernelStep);
}

void layer_finite_differences(StepResult& r) {
  const ref::LayerConfig config({12, 1, 2, 4, 4, 4, 1e-6, false});
  const ref::LayerParams params = ref::case_params(config, 5);
  const ref::CuSeqlens cu = std::vector<std::int64_t>{0, 9, 16};
  const Tensor h = ref::seeded_normal(5, "hidden", {16, 1, 12}), dy = ref::seeded_normal(5, "dy", {16, 1, 12});
  const ref::LayerGrads g = ref::layer_backward(config, params, ref::layer_forward(config, params, h, cu), dy);
  const auto loss = [&](const ref::LayerParams& p, const Tensor& x) {
    return dot(dy, ref::layer_forward(config, p, x, cu).out);
  };
  const Tensor dh = ref::seeded_normal(6, "hidden", h.shape());
  directional(
      r, "layer grad_hidden", [&](double e) { return loss(params, stepped(h, dh, e)); }, dot(g.grad_hidden, dh),
      kLayerStep);
  for (const char* name : {ref::kALog, ref::kDtBias, ref::kInProjNorm, ref::kInProj, ref::kConvWeight, ref::kOutNorm}) {
    const Tensor d = ref::seeded_normal(6, name, params.at(name).shape());
    directional(
        r, std::string("layer grad::") + name,
        [&](double e) {
          ref::LayerParams p = params;
          p[name] = stepped(params.at(name), d, e);
          return loss(p, h);
        },
        dot(g.params.at(name), d), kLayerStep);
  }
}

// The grouped real-scale run (reference/layer.hpp layer_run_grouped) and the freeing backward
// (layer_backward_freeing) against the whole layer, the same bits: 2 GVA groups, each over every block of
// rows (each block's rstd, dW_in and out_norm chains continue from the block before). At the real block
// of kGroupedRowBlock rows, SBHD (kGroupedRowBlock / 2 + 6) x 2 rows: two blocks, the second of 12 rows;
// at 64-row blocks, 103 x 2 = 206 rows: four, the last of 14. Chunked core, conv bias.
void grouped_run(StepResult& r, std::int64_t row_block) {
  const std::int64_t S = row_block == ref::kGroupedRowBlock ? ref::kGroupedRowBlock / 2 + 6 : 103, B = 2;
  const std::int64_t blocks = (S * B + row_block - 1) / row_block;
  const std::string label = "grouped run 2 groups, " + std::to_string(blocks) + " row blocks" +
                            (row_block == ref::kGroupedRowBlock ? "" : " of " + std::to_string(row_block));
  if (!r.selected(label)) return;
  const ref::LayerConfig config({8, 2, 4, 4, 4, 4, 1e-6, true});
  const ref::LayerParams params = ref::case_params(config, 21);
  const Tensor h = ref::seeded_normal(21, "hidden", {S, B, 8}), dy = ref::seeded_normal(21, "dy", {S, B, 8});
  const ref::LayerOptions options{ref::CoreForm::Chunked, 64};
  const ref::LayerForward fwd = ref::layer_forward(config, params, h, std::nullopt, options);
  const ref::LayerGrads whole = ref::layer_backward(config, params, fwd, dy);
  const ref::GroupedRun grouped = ref::layer_run_grouped(config, params, h, dy, std::nullopt, options, 2, row_block);
  // The freeing backward (what the real-scale runs take) on copies: the same bits too.
  ref::LayerForward fwd_copy = fwd;
  Tensor dy_copy = dy;
  const ref::LayerGrads freed = ref::layer_backward_freeing(config, params, fwd_copy, dy_copy);
  std::string why = grouped.out.bitwise_equal(fwd.out) ? "" : "out";
  if (why.empty() && !grouped.grads.grad_hidden.bitwise_equal(whole.grad_hidden)) why = "grad_hidden";
  for (const auto& [name, t] : whole.params)
    if (why.empty() && !(grouped.grads.params.count(name) && grouped.grads.params.at(name).bitwise_equal(t)))
      why = "grad::" + name;
  if (why.empty() && !freed.grad_hidden.bitwise_equal(whole.grad_hidden)) why = "the freeing backward's grad_hidden";
  for (const auto& [name, t] : whole.params)
    if (why.empty() && !(freed.params.count(name) && freed.params.at(name).bitwise_equal(t)))
      why = "the freeing backward's grad::" + name;
  r.check(why.empty(), label, why + " differs from the whole layer's bits");
}

// The kernel-level conv (reference/conv1d.hpp) with initial states against its recurrence
// y[t] = silu(b + sum_i w[:, i] X[t - (W-1) + i]), X[tau] the token, or for tau < 0 the state's slot
// tau + W, written out here; and its final state: the window after a sequence's first part (its last
// W - 1 tokens, zeros before the start) given as the initial state of the rest gives the whole run's y,
// and the rest's dh0 added to the first part's dx gives the whole run's dx (dweight, dbias: the sums).
// Two sequences of 7 and 13 tokens split after 2 (a state shorter than the window) and 9 tokens.
void conv_states(StepResult& r) {
  const std::string label = "kernel conv initial and final states";
  if (!r.only.empty() && !r.only.starts_with(label)) return;
  const std::int64_t D = 3, W = 4;
  const std::vector<std::int64_t> cu{0, 7, 20}, split{2, 9};
  ref::Conv1dInputs whole{ref::seeded_normal(22, "x", {1, 20, D}),
                          ref::seeded_normal(22, "w", {D, W}),
                          ref::seeded_normal(22, "b", {D}),
                          std::nullopt,
                          cu,
                          ref::Activation::Silu};
  const Tensor dy = ref::seeded_normal(22, "dy", {1, 20, D});
  // Rows [first, second) of each sequence, as a packed input, and dy's.
  const auto part = [&](bool rest) {
    std::vector<double> x, d;
    std::vector<std::int64_t> pcu{0}, rows;
    for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
      const std::int64_t a = rest ? cu[s] + split[s] : cu[s], b = rest ? cu[s + 1] : cu[s] + split[s];
      for (std::int64_t t = a; t < b; ++t) rows.push_back(t);
      pcu.push_back(pcu.back() + b - a);
    }
    for (auto t : rows)
      for (std::int64_t c = 0; c < D; ++c) x.push_back(whole.x.get(t * D + c)), d.push_back(dy.get(t * D + c));
    const auto n = static_cast<std::int64_t>(rows.size());
    return std::tuple{ref::Conv1dInputs{Tensor::from_f64(x, {1, n, D}), whole.weight, whole.bias, std::nullopt, pcu,
                                        ref::Activation::Silu},
                      Tensor::from_f64(d, {1, n, D}), rows};
  };
  auto [head, dy_head, head_rows] = part(false);
  auto [rest, dy_rest, rest_rows] = part(true);
  // The final state of each sequence's head: slot j in [1, W-1] the token j - W tokens before the split.
  Tensor state(DType::F64, {2, D, W});
  for (std::int64_t s = 0; s < 2; ++s)
    for (std::int64_t j = 1; j < W; ++j) {
      const std::int64_t t = cu[s] + split[s] + j - W;
      for (std::int64_t c = 0; c < D; ++c) state.set((s * D + c) * W + j, t >= cu[s] ? whole.x.get(t * D + c) : 0.0);
    }
  rest.initial_state = state;
  // The recurrence on the rest: X[tau] for tau < 0 from the state.
  const Tensor y_rest = ref::conv1d_forward(rest);
  double worst = 0;
  for (std::int64_t s = 0; s < 2; ++s)
    for (std::int64_t t = rest.cu_seqlens->at(s); t < rest.cu_seqlens->at(s + 1); ++t)
      for (std::int64_t c = 0; c < D; ++c) {
        double pre = whole.bias->get(c);
        for (std::int64_t i = 0; i < W; ++i) {
          const std::int64_t tau = t - rest.cu_seqlens->at(s) - (W - 1) + i;
          const double x = tau >= 0 ? rest.x.get((t - (W - 1) + i) * D + c) : state.get((s * D + c) * W + tau + W);
          pre += whole.weight.get(c * W + i) * x;
        }
        worst = std::max(worst, std::abs(y_rest.get(t * D + c) - pre / (1 + std::exp(-pre))));
      }
  // fp64, W + 1 terms of O(1): the recurrence and the oracle agree to ~1e-15; a slot off by one is O(1).
  char buf[96];
  std::snprintf(buf, sizeof buf, "max |y - recurrence| %.3e", worst);
  r.check(worst < 1e-12, label + ": forward from the state", buf);

  const Tensor y = ref::conv1d_forward(whole), y_head = ref::conv1d_forward(head);
  const ref::Conv1dGrads g = ref::conv1d_backward(whole, dy), gh = ref::conv1d_backward(head, dy_head),
                         gr = ref::conv1d_backward(rest, dy_rest);
  Tensor y_split(DType::F64, y.shape()), dx_split(DType::F64, y.shape());
  const auto place = [&](Tensor& into, const Tensor& from, const std::vector<std::int64_t>& rows) {
    for (std::size_t k = 0; k < rows.size(); ++k)
      for (std::int64_t c = 0; c < D; ++c)
        into.set(rows[k] * D + c, into.get(rows[k] * D + c) + from.get(static_cast<std::int64_t>(k) * D + c));
  };
  place(y_split, y_head, head_rows);
  place(y_split, y_rest, rest_rows);
  place(dx_split, gh.dx, head_rows);
  place(dx_split, gr.dx, rest_rows);
  for (std::int64_t s = 0; s < 2; ++s)  // dh0's slots back onto the tokens they hold
    for (std::int64_t j = 1; j < W; ++j) {
      const std::int64_t t = cu[s] + split[s] + j - W;
      for (std::int64_t c = 0; c < D && t >= cu[s]; ++c)
        dx_split.set(t * D + c, dx_split.get(t * D + c) + gr.dh0->get((s * D + c) * W + j));
    }
  Tensor dw = gh.dweight, db = *gh.dbias;
  for (std::int64_t i = 0; i < dw.numel(); ++i) dw.set(i, dw.get(i) + gr.dweight.get(i));
  for (std::int64_t i = 0; i < db.numel(); ++i) db.set(i, db.get(i) + gr.dbias->get(i));
  // Sums of a few O(1) terms in another order: fp64 roundoff ~1e-16; 1e-12 relative RMS.
  check_rel_rms(r, label + ": y across the state", y, y_split, 1e-12);
  check_rel_rms(r, label + ": dx across the state", g.dx, dx_split, 1e-12);
  check_rel_rms(r, label + ": dweight across the state", g.dweight, dw, 1e-12);
  check_rel_rms(r, label + ": dbias across the state", *g.dbias, db, 1e-12);
}

// The kernel conv's final state and its gradient on every slot, against the recurrence of docs/DESIGN.md
// §1.2 written out here: sequence n's extended tokens E[tau], tau in [-W, len), are initial_state slot
// tau + W before its start and x after; y[t] = silu(b + sum_i w[:, i] E[t - (W-1) + i]), final state
// slot s = E[len - W + s], and each one's gradient flows back to the E it read. Lengths 0, 1, 3, 4, 9 at
// W = 4 put every slot of the final state on the initial state (slot 0 of an empty sequence: its own
// slot 0) and on a token.
struct ConvRecurrence {
  Tensor y, final_state, dx, dweight, dbias, dh0;
};

ConvRecurrence conv_recurrence(const ref::Conv1dInputs& in, const Tensor& dy, const Tensor& dht) {
  const std::int64_t D = in.x.dim(2), W = in.weight.dim(1);
  const std::vector<std::int64_t>& cu = *in.cu_seqlens;
  ConvRecurrence r{Tensor(DType::F64, in.x.shape()), Tensor(DType::F64, dht.shape()),
                   Tensor(DType::F64, in.x.shape()), Tensor(DType::F64, in.weight.shape()),
                   Tensor(DType::F64, {D}),          Tensor(DType::F64, dht.shape())};
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    const auto seq = static_cast<std::int64_t>(n);
    const std::int64_t begin = cu[n], len = cu[n + 1] - cu[n];
    // Flat offsets of E[tau] (and of its gradient) channel c, in x or in the initial state.
    const auto at = [&](std::int64_t tau, std::int64_t c) {
      return tau >= 0 ? (begin + tau) * D + c : (seq * D + c) * W + tau + W;
    };
    const auto E = [&](std::int64_t tau, std::int64_t c) {
      return tau >= 0 ? in.x.get(at(tau, c)) : in.initial_state->get(at(tau, c));
    };
    const auto add_grad = [&](std::int64_t tau, std::int64_t c, double g) {
      Tensor& into = tau >= 0 ? r.dx : r.dh0;
      into.set(at(tau, c), into.get(at(tau, c)) + g);
    };
    for (std::int64_t c = 0; c < D; ++c) {
      for (std::int64_t s = 0; s < W; ++s) {
        r.final_state.set((seq * D + c) * W + s, E(len - W + s, c));
        add_grad(len - W + s, c, dht.get((seq * D + c) * W + s));
      }
      for (std::int64_t t = 0; t < len; ++t) {
        double pre = in.bias->get(c);
        for (std::int64_t i = 0; i < W; ++i) pre += in.weight.get(c * W + i) * E(t - (W - 1) + i, c);
        const double sig = 1 / (1 + std::exp(-pre)), g = dy.get(at(t, c)) * sig * (1 + pre * (1 - sig));
        r.y.set(at(t, c), pre * sig);
        r.dbias.set(c, r.dbias.get(c) + g);
        for (std::int64_t i = 0; i < W; ++i) {
          const std::int64_t tau = t - (W - 1) + i;
          r.dweight.set(c * W + i, r.dweight.get(c * W + i) + g * E(tau, c));
          add_grad(tau, c, g * in.weight.get(c * W + i));
        }
      }
    }
  }
  return r;
}

void conv_state_slots(StepResult& r) {
  const std::int64_t D = 2, W = 4;
  const std::vector<std::int64_t> cu{0, 0, 1, 4, 8, 17};
  const auto N = static_cast<std::int64_t>(cu.size()) - 1;
  const ref::Conv1dInputs in{ref::seeded_normal(23, "x", {1, cu.back(), D}),
                             ref::seeded_normal(23, "w", {D, W}),
                             ref::seeded_normal(23, "b", {D}),
                             ref::seeded_normal(23, "h0", {N, D, W}),
                             cu,
                             ref::Activation::Silu};
  const Tensor dy = ref::seeded_normal(23, "dy", in.x.shape()), dht = ref::seeded_normal(23, "dht", {N, D, W});
  const std::string label = "kernel conv every state slot";
  r.check_case(label + ": y and final state", [&]() -> std::string {
    const ConvRecurrence want = conv_recurrence(in, Tensor(DType::F64, dy.shape()), dht);
    // The final state is copies of inputs: exact. y: W + 1 terms of O(1), fp64 roundoff ~1e-16.
    if (!ref::conv1d_final_state(in).bitwise_equal(want.final_state)) return "the final state is not E[len - W + s]";
    StepResult y;
    check_rel_rms(y, "y", want.y, ref::conv1d_forward(in), 1e-12);
    return y.detail;
  });
  // dht on slot s alone, dy = 0: the gradient is dht's slot s placed on the token (or initial-state
  // slot) it holds, nothing added: exact.
  for (std::int64_t slot = 0; slot < W; ++slot)
    r.check_case(label + ": dht slot " + std::to_string(slot), [&]() -> std::string {
      Tensor one(DType::F64, dht.shape());
      for (std::int64_t i = slot; i < one.numel(); i += W) one.set(i, dht.get(i));
      const Tensor zero(DType::F64, dy.shape());
      const ConvRecurrence want = conv_recurrence(in, zero, one);
      const ref::Conv1dGrads got = ref::conv1d_backward(in, zero, one);
      if (!got.dx.bitwise_equal(want.dx)) return "dx is not dht's slot on the token it holds";
      if (!got.dh0->bitwise_equal(want.dh0)) return "dh0 is not dht's slot on the initial-state slot it holds";
      return "";
    });
  r.check_case(label + ": gradients", [&]() -> std::string {
    const ConvRecurrence want = conv_recurrence(in, dy, dht);
    const ref::Conv1dGrads got = ref::conv1d_backward(in, dy, dht);
    // Sums of <= W + 1 terms of O(1) in another order: fp64 roundoff ~1e-16; 1e-12 relative RMS.
    StepResult g;
    check_rel_rms(g, "dx", want.dx, got.dx, 1e-12);
    check_rel_rms(g, "dweight", want.dweight, got.dweight, 1e-12);
    check_rel_rms(g, "dbias", want.dbias, *got.dbias, 1e-12);
    check_rel_rms(g, "dh0", want.dh0, *got.dh0, 1e-12);
    return g.detail;
  });
}

// The oracle's GEMM (core/gemm.hpp) through subnormals, on every kernel this CPU has (the AVX-512 one
// runs such tiles on its exact path, core/gemm_subnormal.hpp, 8 lanes at a time): each C(i, j) must be
// the bits of its fma chain, written out here. For each lane L of a 16-column tile (two 8-lane vectors;
// two tiles of the 8-column kernels), subnormals sit only in B's columns j = L (mod 16), in C's entries
// of those columns and in A's entries with i + k = L (mod 16) (every lane of A's packed panels); every
// product and C is near the subnormal range: an even step k multiplies A's tiny values (2^-1060 ..
// 2^-1018) by B's O(1) ones, an odd step A's O(1) values by B's tiny ones, so each chain's bits hang on
// its subnormal terms, and some results in the lane's columns are subnormal. 28 x 20 x 32: two tiles each
// way on every kernel.
double signed_binade(const Rng& rng, std::uint64_t u, int binade) {
  return std::ldexp((rng.uniform(u) < 0.5 ? -1 : 1) * (1 + rng.uniform(u + 1)), binade);
}

// Tiny: subnormal where `subnormal`, else normal in [2^-1022, 2^-1018); else O(1) (2^-12 .. 2^0): products
// and sums of a few signed ones straddle the subnormal boundary 2^-1022.
int lane_binade(const Rng& rng, std::uint64_t u, bool tiny, bool subnormal) {
  if (!tiny) return static_cast<int>(std::floor(rng.uniform(u, -12, 0)));
  return static_cast<int>(std::floor(subnormal ? rng.uniform(u, -1060, -1023) : rng.uniform(u, -1022, -1018)));
}

struct LaneOperands {
  RowMatrix A, B, C;
};

LaneOperands subnormal_lane_operands(int lane, std::int64_t M, std::int64_t K, std::int64_t N) {
  const Rng rng(24, "gemm lane " + std::to_string(lane));
  LaneOperands o{RowMatrix(M, K), RowMatrix(K, N), RowMatrix(M, N)};
  std::uint64_t u = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t k = 0; k < K; ++k, u += 3)
      o.A(i, k) = signed_binade(rng, u, lane_binade(rng, u + 2, k % 2 == 0, (i + k) % 16 == lane));
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t j = 0; j < N; ++j, u += 3)
      o.B(k, j) = signed_binade(rng, u, lane_binade(rng, u + 2, k % 2 == 1, j % 16 == lane));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j, u += 3)
      o.C(i, j) = signed_binade(rng, u, lane_binade(rng, u + 2, true, j % 16 == lane));
  return o;
}

RowMatrix fma_chain(const RowMatrix& A, const RowMatrix& B, const RowMatrix* C0) {
  RowMatrix C(A.rows(), B.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      double acc = C0 ? (*C0)(i, j) : 0.0;
      for (Eigen::Index k = 0; k < A.cols(); ++k) acc = std::fma(A(i, k), B(k, j), acc);
      C(i, j) = acc;
    }
  return C;
}

// "" when C has the chain's bits, else the first differing element.
std::string first_other_bits(const RowMatrix& got, const RowMatrix& want) {
  for (Eigen::Index i = 0; i < got.rows(); ++i)
    for (Eigen::Index j = 0; j < got.cols(); ++j)
      if (std::memcmp(&got(i, j), &want(i, j), sizeof(double)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "C(%ld, %ld) = %a, its fma chain gives %a", static_cast<long>(i),
                      static_cast<long>(j), got(i, j), want(i, j));
        return buf;
      }
  return "";
}

// "" when every lane holds on `kernel`, else the first lane and element that does not.
std::string subnormal_lanes_on(GemmKernel kernel) {
  const std::int64_t M = 28, K = 20, N = 32;
  const auto flushed = [](RowMatrix m) {
    for (Eigen::Index i = 0; i < m.size(); ++i)
      if (std::fpclassify(m.data()[i]) == FP_SUBNORMAL) m.data()[i] = 0;
    return m;
  };
  for (int lane = 0; lane < 16; ++lane) {
    const LaneOperands o = subnormal_lane_operands(lane, M, K, N);
    const RowMatrix want = fma_chain(o.A, o.B, &o.C), fC = flushed(o.C);
    const std::string at = "lane " + std::to_string(lane) + ": ";
    // The case keeps its point: some results of the lane are subnormal, each operand's subnormals move bits.
    bool subnormal_result = false;
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t j = lane; j < N; j += 16) subnormal_result |= std::fpclassify(want(i, j)) == FP_SUBNORMAL;
    if (!subnormal_result || first_other_bits(fma_chain(flushed(o.A), o.B, &o.C), want).empty() ||
        first_other_bits(fma_chain(o.A, flushed(o.B), &o.C), want).empty() ||
        first_other_bits(fma_chain(o.A, o.B, &fC), want).empty())
      return at +
             "the case lost its point: no subnormal result in the lane, or some operand's subnormals move no chain";
    RowMatrix C = o.C, P(M, N);
    gemm(view(o.A), view(o.B), mutable_view(C), {.accumulate = true, .kernel = kernel});
    gemm(view(o.A), view(o.B), mutable_view(P), {.kernel = kernel});
    if (const std::string why = first_other_bits(C, want); !why.empty()) return at + "C += A B: " + why;
    if (const std::string why = first_other_bits(P, fma_chain(o.A, o.B, nullptr)); !why.empty())
      return at + "A B: " + why;
  }
  return "";
}

// One case over every kernel the CPU has, so that the step's count is the same on every CPU.
void gemm_subnormal_lanes(StepResult& r) {
  r.check_case("gemm subnormal lanes", [] {
    for (const auto& [kernel, name] :
         {std::pair{GemmKernel::Avx512, "avx512"}, {GemmKernel::Avx2, "avx2"}, {GemmKernel::Portable, "portable"}})
      if (gemm_kernel_available(kernel))
        if (const std::string why = subnormal_lanes_on(kernel); !why.empty()) return std::string(name) + ": " + why;
    return std::string();
  });
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  const bool quick = options.quick_matrix();
  std::vector<KernelShape> shapes = {{{0, 37}, 1, 1, 6, 5}, {{0, 1, 64, 65, 130}, 2, 4, 8, 6}};
  if (!quick) shapes.push_back({{0, 200}, 2, 2, 16, 12});
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (int chunk : quick ? std::vector<int>{64} : std::vector<int>{16, 32, 64})
      forms_agree(r, shapes[i], chunk, 10 + 100 * i + chunk);  // the seed depends on the case only
  kernel_finite_differences(r);
  layer_finite_differences(r);
  grouped_run(r, ref::kGroupedRowBlock);
  grouped_run(r, 64);
  conv_states(r);
  conv_state_slots(r);
  gemm_subnormal_lanes(r);
  return r;
}

}  // namespace

const Step oracle_self_checks{"oracle self-checks", run};

}  // namespace gdnv::gate
