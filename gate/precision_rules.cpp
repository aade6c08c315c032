// Gate step "precision rules": the rules behind the CP mode matrix's whole-layer gates, which a misplaced
// rounding stays inside. It calls the Backend ops of every backend directly and holds their state-dtype
// outputs to fp32 accuracy against the fp64 oracle (docs/DESIGN.md §4).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "core/rng.hpp"
#include "cpu/backend.hpp"
#include "gate/steps.hpp"
#include "gpu/cuda_plugin.hpp"
#include "gpu/kernel_backend.hpp"
#include "gpu/kernels.hpp"
#include "gpu/params.hpp"
#include "harness/world.hpp"
#include "reference/conv1d.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/gates.hpp"
#include "reference/norms.hpp"
#include "reference/span_map.hpp"

namespace gdnv::gate {
namespace {

using Ints = std::vector<std::int64_t>;

// Every input is exact in its storage dtype and the oracle runs on those values, so what is measured is
// the backend's own arithmetic. Each bound is the fp32 unit roundoff u times a count of roundings, each
// weighted by the condition of what follows it: an IEEE operation rounds once (at most u); exp, log1p
// and sqrt within 2 ulp on every backend (4u; CUDA's expf is the widest, 2 ulp). The single ops' bounds
// are worst cases, every rounding at its limit and in one direction: each bounds every element's
// relative error, hence the relative RMS that is compared.
constexpr double kU = 0x1p-24;  // 6e-8

// Gate inputs: x = a + dt_bias in [-2.3, 4.3], b in [-6, 6], A = exp(A_log) in [1, 16].
// g = -exp(A_log) softplus(x): the sum x (u, times softplus's condition x sigmoid(x) / softplus(x) <= 2.3
// on this range), exp(-|x|) (4u), log1p (4u, condition <= 1), the add of max(x, 0) (u), exp(A_log) (4u),
// the product (u): 16.3u. beta = sigmoid(b): exp, add, divide: 6u. Both within 17u = 1.0e-6.
constexpr double kGateBound = 17 * kU;

// The parameter-gradient inputs are positive (dg, dy, x, o, z, w), so each gradient is a sum of terms of
// one sign: condition 1, and a sum of R terms adds at most (R - 1)u in any order. R = 128 rows everywhere.
constexpr std::int64_t kRows = 128;

// The chunked core, whose outputs pass through too many roundings for a worst case to be useful: per
// 64-token chunk at most ~600 (a decay factor is a product of <= 64 factors e^{g_t}, 5u each; the
// unit-lower solve by (I + A) and the state's k_tail^T v_new sum <= 64 terms, W S K more; twice through
// the backward). Roundings of independent sign add in quadrature, as docs/DESIGN.md §4's oracle gates take
// them: sqrt(600) u = 24.5u per chunk. The chunks' errors add, since the state map of a chunk contracts
// (e^g <= 1, 0 <= beta < 1) and does not amplify what earlier chunks rounded; the solve's condition is
// below 2 with beta <= 0.6 and unit keys. So 49u per chunk: 2.9e-6 for one, 1.2e-5 for sequences of
// 4 chunks, against 2.8e-7 measured on cpu and emu (4.6u). The planted faults it catches are O(1e-3)
// (bf16 roundings; exponents from fp32 cumsums at |gamma| ~ 1e4), 100x out.
constexpr double kChunkRoundings = 600;
constexpr std::int64_t kChunk = 64;

double chunk_bound(const Ints& cu) {
  std::int64_t chunks = 0;
  for (std::size_t s = 1; s < cu.size(); ++s) chunks = std::max(chunks, (cu[s] - cu[s - 1] + kChunk - 1) / kChunk);
  return 2 * std::sqrt(kChunkRoundings) * static_cast<double>(chunks) * kU;
}

// Seeded inputs: each case's draws depend on its label and the tensor's name only.
Tensor uniform(const std::string& label, const std::string& name, Shape shape, double lo, double hi) {
  Tensor t(DType::F64, std::move(shape));
  const Rng rng(stream_of(label), name);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(static_cast<std::uint64_t>(i), lo, hi));
  return t;
}
Tensor normal(const std::string& label, const std::string& name, Shape shape, double scale) {
  Tensor t(DType::F64, std::move(shape));
  const Rng rng(stream_of(label), name);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, scale * rng.normal(static_cast<std::uint64_t>(i)));
  return t;
}
// The value a backend holds for t stored as `dtype`, in fp64: the oracle's input.
Tensor stored(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::F64); }

// A case's state-dtype outputs against the oracle; the first miss is the case's why.
class StateJudge {
 public:
  explicit StateJudge(cp::Backend& be) : be_(be) {}

  void check(const std::string& name, const cp::Buffer& got, const Tensor& want, double bound) {
    check_as(name, got, want, bound, be_.state_dtype(), "the state dtype ", "fp32 bound");
  }
  // An output stored in the activation dtype.
  void check_stored(const std::string& name, const cp::Buffer& got, const Tensor& want, double bound) {
    check_as(name, got, want, bound, be_.dtype(), "", "bound");
  }
  const std::string& why() const { return why_; }

 private:
  // `got` must be stored in `dtype` (else that is the case's why), then within `bound` of `want`.
  void check_as(const std::string& name, const cp::Buffer& got, const Tensor& want, double bound, DType dtype,
                const std::string& dtype_words, const char* bound_words) {
    if (!why_.empty()) return;
    if (got.dtype() != dtype) {
      why_ = name + " is stored as " + std::string(dtype_name(got.dtype())) + ", not " + dtype_words +
             std::string(dtype_name(dtype));
      return;
    }
    judge(name, be_.download(got).to(DType::F64), want, bound, bound_words);
  }
  void judge(const std::string& name, const Tensor& t, const Tensor& want, double bound, const char* kind) {
    const Metrics m = compare(want.reshaped(t.shape()), t);
    if (m.nan_cand == 0 && m.inf_cand == 0 && m.rel_rms <= bound) return;
    char buf[160];
    if (m.nan_cand || m.inf_cand)
      std::snprintf(buf, sizeof buf, ": %lld NaN, %lld Inf", static_cast<long long>(m.nan_cand),
                    static_cast<long long>(m.inf_cand));
    else std::snprintf(buf, sizeof buf, ": rel_rms %.3e > %s %.3e", m.rel_rms, kind, bound);
    why_ = name + buf;
  }

  cp::Backend& be_;
  std::string why_;
};

struct GateInputs {
  Tensor a, b, A_log, dt_bias;  // stored in the backend's dtype
};
GateInputs gate_inputs(const std::string& label, DType act, std::int64_t N, std::int64_t Hv) {
  return {stored(uniform(label, "a", {N, Hv}, -3, 3), act), stored(uniform(label, "b", {N, Hv}, -6, 6), act),
          stored(uniform(label, "A_log", {Hv}, 0, std::log(16.0)), act),
          stored(uniform(label, "dt_bias", {Hv}, 0.7, 1.3), act)};
}

// (a) g and beta equal the oracle to fp32 accuracy at any storage dtype: Megatron computes the gates
// in fp32, and the core takes e^g of them.
void gates_rule(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const GateInputs in = gate_inputs(label, be.dtype(), kRows, 4);
  const auto up = [&](const Tensor& t) { return be.upload(t, be.dtype()); };
  const cp::Gates got = be.gates(up(in.a), up(in.b), up(in.A_log), up(in.dt_bias));
  const ref::Gates want = ref::gates_forward(in.a, in.b, in.A_log, in.dt_bias);
  judge.check("g", got.g, want.g, kGateBound);
  judge.check("beta", got.beta, want.beta, kGateBound);
}

// The core's inputs: weak decays, and with `spikes` one token of very strong decay (value head h of Hv:
// g = -10^{3 + 2h/(Hv-1)}, -1e3 .. -1e5) at the second token of every chunk, so within the chunk gamma
// is huge while the differences gamma_i - gamma_j the factors need stay O(1).
Tensor core_gates(const std::string& label, const Ints& cu, std::int64_t Hv, bool spikes) {
  Tensor g = uniform(label, "g", {1, cu.back(), Hv}, -0.03, -0.003);
  if (!spikes) return g;
  for (std::size_t s = 1; s < cu.size(); ++s)
    for (std::int64_t t = cu[s - 1] + 1; t < cu[s]; t += kChunk)
      for (std::int64_t h = 0; h < Hv; ++h)
        g.set(t * Hv + h, -std::pow(10.0, 3.0 + 2.0 * static_cast<double>(h) / static_cast<double>(Hv - 1)));
  return g;
}

// (b), (c) the chunked core's state-dtype outputs: the last sequence's final state from an initial state
// of the first, the first's dh0 for d_o and a dht of the last, the last's forward and the first's backward
// span maps, and the folds of every sequence's maps stacked as if each were a rank.
void core_rule(cp::Backend& be, StateJudge& judge, const std::string& label, const Ints& cu, bool spikes) {
  const DType act = be.dtype(), st = be.state_dtype();
  const std::int64_t T = cu.back(), n = static_cast<std::int64_t>(cu.size()) - 1;
  const std::int64_t Hk = 2, Hv = 4, K = 8, V = 6, S = Hv * K * V;
  ref::GdrInputs in;
  in.q = stored(normal(label, "q", {1, T, Hk, K}, 1), act);
  in.k = stored(normal(label, "k", {1, T, Hk, K}, 1), act);
  in.v = stored(normal(label, "v", {1, T, Hv, V}, 1), act);
  in.g = stored(core_gates(label, cu, Hv, spikes), st);
  in.beta = stored(uniform(label, "beta", {1, T, Hv}, 0.05, 0.6), st);
  in.cu_seqlens = cu;
  in.scale = 1 / std::sqrt(static_cast<double>(K));
  in.use_qk_l2norm = true;
  const Tensor h0 = stored(normal(label, "h0", {Hv, K, V}, 0.5), st);
  const Tensor dht = stored(normal(label, "dht", {Hv, K, V}, 0.5), st);
  const Tensor d_o = stored(normal(label, "do", {1, T, Hv, V}, 1), act);

  const Tensor maps = stored(ref::gdr_span_maps(in), st), back_maps = stored(ref::gdr_backward_span_maps(in, d_o), st);
  Tensor S_fold(DType::F64, {Hv, K, V}), dS_fold = S_fold;
  for (std::int64_t j = 0; j < n; ++j) {
    ref::fold_span_map(maps, j, FoldDirection::Forward, S_fold);
    ref::fold_span_map(back_maps, n - 1 - j, FoldDirection::Backward, dS_fold);
  }
  ref::GdrInputs with_h0 = in;
  with_h0.initial_state = Tensor(DType::F64, {n, Hv, K, V});
  Tensor dht_all(DType::F64, {n, Hv, K, V});
  for (std::int64_t i = 0; i < S; ++i) {
    with_h0.initial_state->set(i, h0.get(i));
    dht_all.set((n - 1) * S + i, dht.get(i));
  }
  const ref::GdrOutputs out = ref::gdr_recurrent_forward(with_h0);
  const ref::GdrGrads grads = ref::gdr_recurrent_backward(with_h0, d_o, dht_all);
  const auto block = [](const Tensor& t, std::int64_t i, std::int64_t size) {
    const std::vector<double> all = t.to_f64();
    return Tensor::from_f64(std::vector<double>(all.begin() + i * size, all.begin() + (i + 1) * size), {size});
  };

  const cp::Buffer q = be.upload(in.q.reshaped({T, Hk, K}), act), k = be.upload(in.k.reshaped({T, Hk, K}), act);
  const cp::Buffer v = be.upload(in.v.reshaped({T, Hv, V}), act), g = be.upload(in.g.reshaped({T, Hv}), st);
  const cp::Buffer beta = be.upload(in.beta.reshaped({T, Hv}), st), h0_b = be.upload(h0, st), none;
  const cp::Buffer do_b = be.upload(d_o.reshaped({T, Hv, V}), act);
  const cp::Varlen seqs{cu, cp::upload_index(be, cu)};
  const cp::GdrArgs args{q, k, v, g, beta, seqs, h0_b, *in.scale}, no_h0{q, k, v, g, beta, seqs, none, *in.scale};
  const double bound = chunk_bound(cu);
  judge.check("final_state", be.gdr(args).final_state, block(out.final_state, n - 1, S), bound);
  judge.check("dh0", be.gdr_backward(args, do_b, be.upload(dht, st)).dh0, block(grads.dh0, 0, S), bound);
  const std::int64_t map = Hv * K * (V + K);
  judge.check("last_span_map", be.gdr_last_span_map(no_h0), block(maps, n - 1, map), bound);
  judge.check("first_backward_span_map", be.gdr_first_backward_span_map(no_h0, do_b), block(back_maps, 0, map), bound);
  const int ranks = static_cast<int>(n);
  judge.check("fold", be.fold_span_maps(be.upload(maps, st), 0, ranks, FoldDirection::Forward), S_fold, bound);
  judge.check("fold_backward", be.fold_span_maps(be.upload(back_maps, st), 0, ranks, FoldDirection::Backward), dS_fold,
              bound);
}

// (b) decays that make fp32 cumsum differences visible: two sequences of 3 chunks (the last partial).
void decay_chain_rule(cp::Backend& be, StateJudge& judge, const std::string& label) {
  core_rule(be, judge, label, {0, 168, 360}, true);
}

// (c) the state carried over several chunks and sequences at weak decays: 3 sequences, up to 4 chunks.
void state_chain_rule(cp::Backend& be, StateJudge& judge, const std::string& label) {
  core_rule(be, judge, label, {0, 150, 350, 420}, false);
}

// x w^T's weight gradient dw = dy^T x, summed in fp64.
Tensor linear_dw(const Tensor& dy, const Tensor& x) {
  const std::int64_t N = x.dim(0), in = x.dim(1), out = dy.dim(1);
  Tensor dw(DType::F64, {out, in});
  for (std::int64_t o = 0; o < out; ++o)
    for (std::int64_t i = 0; i < in; ++i) {
      double sum = 0;
      for (std::int64_t r = 0; r < N; ++r) sum += dy.get(r * out + o) * x.get(r * in + i);
      dw.set(o * in + i, sum);
    }
  return dw;
}

void linear_grads(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype();
  const Tensor x = stored(uniform(label, "linear x", {kRows, 12}, 0.1, 1), act);
  const Tensor w = stored(uniform(label, "linear w", {8, 12}, 0.1, 1), act);
  const Tensor dy = stored(uniform(label, "linear dy", {kRows, 8}, 0.1, 1), act);
  // A product (u) and a sum of kRows terms: kRows u.
  judge.check("linear dw", be.linear_backward(be.upload(dy, act), be.upload(x, act), be.upload(w, act)).dw,
              linear_dw(dy, x), kRows * kU);
}

void rmsnorm_grads(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype();
  const std::int64_t D = 16;
  const Tensor x = stored(uniform(label, "rmsnorm x", {kRows, D}, 0.1, 1), act);
  const Tensor w = stored(uniform(label, "rmsnorm w", {D}, 0.5, 1.5), act);
  const Tensor dy = stored(uniform(label, "rmsnorm dy", {kRows, D}, 0.1, 1), act);
  const cp::Buffer xb = be.upload(x, act), wb = be.upload(w, act);
  const cp::RmsNormOut got = be.rmsnorm(xb, wb, 1e-6);
  const ref::RmsNorm want = ref::rmsnorm_forward(x, w, 1e-6);
  // rstd = 1 / sqrt(mean(x^2) + eps): D squares summed (D u), the mean, eps, sqrt (4u, halved) and the
  // reciprocal: (D + 5)u. dw = sum_rows dy x rstd: two products, rstd, kRows terms: (kRows + D + 6)u.
  judge.check("rmsnorm rstd", got.rstd, want.rstd, static_cast<double>(D + 5) * kU);
  // rstd with every rounding counted, on rows of RMS near 1, where a table-interpolated 1/sqrt (planted
  // fault rmsnorm_fast_rsqrt) errs most, 18-25u between its knots 1/256 apart. Row r: x = +-1 but
  // x_0 = +-(9 + r mod 7)/8, x_1 = +-9/8 (exact in bf16): the D = 16 squares (multiples of 1/64) and their
  // mean (D a power of two) are exact, mean(x^2) = 1 + s/1024 with s in {34, 53, 74, 97, 122, 149, 178}, off
  // the knots (multiples of 4/1024). Adding eps rounds once (u, halved by the square root), sqrt within
  // 2 ulp (4u), the reciprocal once (u): 5.5u, so 6u.
  Tensor unit(DType::F64, {kRows, D});
  const Tensor signs = uniform(label, "rmsnorm unit signs", {kRows, D}, 0, 1);
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t i = 0; i < D; ++i) {
      const double k = i == 0 ? 9 + r % 7 : i == 1 ? 9 : 8;
      unit.set(r * D + i, (signs.get(r * D + i) < 0.5 ? -k : k) / 8);
    }
  judge.check("rmsnorm rstd at unit RMS", be.rmsnorm(be.upload(unit, act), wb, 1e-6).rstd,
              ref::rmsnorm_forward(unit, w, 1e-6).rstd, 6 * kU);
  judge.check("rmsnorm dw", be.rmsnorm_backward(be.upload(dy, act), xb, wb, got.rstd).dw,
              ref::rmsnorm_backward(x, w, want.rstd, dy).dw, static_cast<double>(kRows + D + 6) * kU);
}

void gated_norm_grads(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype();
  const std::int64_t dv = 8;
  const Shape shape{kRows / 2, 2, dv};
  const Tensor o = stored(uniform(label, "gated o", shape, 0.1, 1), act);
  const Tensor z = stored(uniform(label, "gated z", shape, 0.1, 2), act);
  const Tensor w = stored(uniform(label, "gated w", {dv}, 0.5, 1.5), act);
  const Tensor dy = stored(uniform(label, "gated dy", shape, 0.1, 1), act);
  const cp::Buffer ob = be.upload(o, act), zb = be.upload(z, act), wb = be.upload(w, act);
  const cp::GatedNormOut got = be.gated_norm(ob, zb, wb, 1e-6);
  const ref::GatedNorm want = ref::gated_rmsnorm_forward(o, z, w, 1e-6);
  // rstd over dv: (dv + 5)u. dw = sum over kRows (token, head) rows of dy o rstd silu(z): silu (exp, add,
  // divide, product: 7u), three products, rstd, kRows terms: (kRows + dv + 15)u.
  judge.check("gated_norm rstd", got.rstd, want.rstd, static_cast<double>(dv + 5) * kU);
  judge.check("gated_norm dw", be.gated_norm_backward(be.upload(dy, act), ob, zb, wb, got.rstd, 1e-6).dw,
              ref::gated_rmsnorm_backward(o, z, w, want.rstd, dy).dw, static_cast<double>(kRows + dv + 15) * kU);
}

void conv_grads(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype();
  const std::int64_t D = 6, W = 4;
  const Ints cu{0, 50, kRows};
  ref::Conv1dInputs in;
  in.x = stored(uniform(label, "conv x", {1, kRows, D}, 0.1, 1), act);
  in.weight = stored(uniform(label, "conv w", {D, W}, 0.1, 0.5), act);
  in.bias = stored(uniform(label, "conv bias", {D}, 0.1, 0.5), act);
  in.cu_seqlens = cu;
  const Tensor dy = stored(uniform(label, "conv dy", {1, kRows, D}, 0.1, 1), act);
  const ref::Conv1dGrads want = ref::conv1d_backward(in, dy);
  const cp::Buffer xb = be.upload(in.x.reshaped({kRows, D}), act), wb = be.upload(in.weight, act);
  const cp::Buffer bb = be.upload(*in.bias, act), no_halo;
  const cp::Varlen seqs{cu, cp::upload_index(be, cu)};
  const cp::ConvGrads got = be.conv1d_backward({xb, wb, &bb, seqs, no_halo}, be.upload(dy.reshaped({kRows, D}), act));
  // pre = bias + sum of W products, all positive: 2W u. silu'(pre) = s (1 + pre (1 - s)), s = sigmoid(pre)
  // (6u plus pre's 2W u times sigmoid's condition pre (1 - s) <= 1); 1 - s (s <= 0.93) multiplies that by
  // up to 13, damped by pre (1 - s) / (1 + pre (1 - s)) <= 0.22 in the sum: about 3.9 (6 + 2W)u + 3u = 58u.
  // Then dy silu' and, for dw, x (2u), and kRows terms: dw (kRows + 60)u, dbias (kRows + 59)u.
  judge.check("conv dw", got.dw, want.dweight, static_cast<double>(kRows + 60) * kU);
  judge.check("conv dbias", got.dbias, *want.dbias, static_cast<double>(kRows + 59) * kU);
}

void gate_grads(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype(), st = be.state_dtype();
  const std::int64_t Hv = 4;
  const GateInputs in = gate_inputs(label, act, kRows, Hv);
  const Tensor dg = stored(uniform(label, "dg", {kRows, Hv}, 0.1, 1), st);
  const Tensor dbeta = stored(uniform(label, "dbeta", {kRows, Hv}, 0.1, 1), st);
  const auto up = [&](const Tensor& t) { return be.upload(t, act); };
  const cp::GateGrads got =
      be.gates_backward(be.upload(dg, st), be.upload(dbeta, st), up(in.a), up(in.b), up(in.A_log), up(in.dt_bias));
  const ref::GateGrads want = ref::gates_backward(in.a, in.b, in.A_log, in.dt_bias, dg, dbeta);
  // dA_log = sum_rows dg g: g (16.3u, kGateBound), a product, kRows terms. ddt_bias = sum_rows of
  // dg -exp(A_log) sigmoid(x): exp (4u), sigmoid (6u, plus x's u times its condition <= 2.3), two
  // products, kRows terms.
  judge.check("dA_log", got.dA_log, want.dA_log, kRows * kU + kGateBound);
  judge.check("ddt_bias", got.ddt_bias, want.ddt_bias, static_cast<double>(kRows + 15) * kU);
}

// (e) the conv's halo on a rank whose local tokens are several short sequences: the first continues the
// previous rank's sequence for 2 tokens (fewer than the halo's W - 1 = 3), then sequences of 1 and 4
// tokens. The halo feeds, and its gradient dhalo comes from, the first sequence only; against the oracle
// conv with the halo as the first sequence's initial state (slot j + 1 = halo row j). dx and dhalo are
// stored in the activation dtype: one rounding (bf16, 8 significant bits: 2^-8 relative) on top of the fp32 chain,
// which for dx and dhalo is d_pre (58u, conv_grads) times at most W products and W - 1 adds: 64u.
void conv_halo_rule(cp::Backend& be, StateJudge& judge, const std::string& label) {
  const DType act = be.dtype();
  const std::int64_t D = 6, W = 4, N = 7;
  const Ints cu{0, 2, 3, N};
  ref::Conv1dInputs in;
  in.x = stored(uniform(label, "conv x", {1, N, D}, 0.1, 1), act);
  in.weight = stored(uniform(label, "conv w", {D, W}, 0.1, 0.5), act);
  in.bias = stored(uniform(label, "conv bias", {D}, 0.1, 0.5), act);
  in.cu_seqlens = cu;
  const Tensor halo = stored(uniform(label, "conv halo", {W - 1, D}, 0.1, 1), act);
  in.initial_state = Tensor(DType::F64, {3, D, W});
  for (std::int64_t j = 0; j < W - 1; ++j)
    for (std::int64_t d = 0; d < D; ++d) in.initial_state->set(d * W + j + 1, halo.get(j * D + d));
  const Tensor dy = stored(uniform(label, "conv dy", {1, N, D}, 0.1, 1), act);
  const ref::Conv1dGrads want = ref::conv1d_backward(in, dy);
  Tensor dhalo_want(DType::F64, {W - 1, D});
  for (std::int64_t j = 0; j < W - 1; ++j)
    for (std::int64_t d = 0; d < D; ++d) dhalo_want.set(j * D + d, want.dh0->get(d * W + j + 1));
  const cp::Buffer xb = be.upload(in.x.reshaped({N, D}), act), wb = be.upload(in.weight, act);
  const cp::Buffer bb = be.upload(*in.bias, act), hb = be.upload(halo, act);
  const cp::Varlen seqs{cu, cp::upload_index(be, cu)};
  const cp::ConvGrads got = be.conv1d_backward({xb, wb, &bb, seqs, hb}, be.upload(dy.reshaped({N, D}), act));
  const double bound = (act == DType::BF16 ? 0x1p-8 : 0.0) + 64 * kU;
  judge.check_stored("conv dx", got.dx, want.dx, bound);
  judge.check_stored("conv dhalo", got.dhalo, dhalo_want, bound);
  judge.check("conv dw (halo)", got.dw, want.dweight, static_cast<double>(N + 60) * kU);
}

// (d) parameter gradients (and the norms' rstd) are kept in the state dtype, to fp32 accuracy.
void parameter_gradients_rule(cp::Backend& be, StateJudge& judge, const std::string& label) {
  linear_grads(be, judge, label);
  rmsnorm_grads(be, judge, label);
  gated_norm_grads(be, judge, label);
  conv_grads(be, judge, label);
  gate_grads(be, judge, label);
}

struct Rule {
  const char* name;
  void (*check)(cp::Backend&, StateJudge&, const std::string&);
};
constexpr Rule kRules[] = {{"gates", gates_rule},
                           {"decay chain", decay_chain_rule},
                           {"state chain", state_chain_rule},
                           {"parameter gradients", parameter_gradients_rule},
                           {"conv halo short sequences", conv_halo_rule}};

// (f) the emulation's kernels overwrite their outputs: each launch runs three times on the same output
// buffers, first zeroed, then holding the first call's results (a buffer reused across calls, as a
// caching allocator hands it back), then NaN; the three results must be the same bits. The linear's y,
// dx and dw; the conv's y, dx, dhalo, dw and dbias on the short sequences of (e); the gated norm's y,
// rstd, dx, dz and dw; the gates' g, beta, da, db, dA_log and ddt_bias.
using Floats = std::vector<float>;

Floats seeded_floats(const std::string& label, const std::string& name, std::size_t n) {
  const Rng rng(stream_of(label), name);
  Floats out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(rng.uniform(i, 0.1, 1));
  return out;
}

// Runs `launch` with `outputs` zeroed, reused and NaN; the name of an output that changed, or "".
std::string overwrites(gpu::Kernels& k, const std::vector<std::pair<const char*, Floats*>>& outputs,
                       const std::function<void()>& launch) {
  std::vector<Floats> first;
  for (int call = 0; call < 3; ++call) {
    for (auto& [name, out] : outputs)
      if (call != 1) std::fill(out->begin(), out->end(), call == 0 ? 0.0f : std::nanf(""));
    launch();
    k.stream()->synchronize("gate: kernel outputs");
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (call == 0) first.push_back(*outputs[i].second);
      else if (std::memcmp(first[i].data(), outputs[i].second->data(), first[i].size() * sizeof(float)) != 0)
        return std::string(outputs[i].first) +
               (call == 1 ? " changes when its buffer is reused" : " depends on its buffer's old contents (NaN)");
    }
  }
  return "";
}

std::string kernel_outputs_overwritten(const std::string& label) {
  const std::unique_ptr<gpu::Kernels> k = gpu::make_host_kernels();
  const std::int64_t N = 7, in = 5, out = 3, D = 4, W = 4;
  const Floats x = seeded_floats(label, "x", N * in), w = seeded_floats(label, "w", out * in),
               dy = seeded_floats(label, "dy", N * out);
  Floats y(N * out), dx(N * in), dw(out * in);
  std::string why = overwrites(*k, {{"linear y", &y}}, [&] {
    k->linear_forward({x.data(), w.data(), nullptr, y.data(), nullptr, N, in, out, false});
  });
  if (why.empty())
    why = overwrites(*k, {{"linear dx", &dx}, {"linear dw", &dw}}, [&] {
      k->linear_backward({x.data(), w.data(), dy.data(), dx.data(), dw.data(), N, in, out, false});
    });
  if (!why.empty()) return why;
  const Floats cx = seeded_floats(label, "conv x", N * D), cw = seeded_floats(label, "conv w", D * W),
               cb = seeded_floats(label, "conv bias", D), halo = seeded_floats(label, "conv halo", (W - 1) * D),
               cdy = seeded_floats(label, "conv dy", N * D);
  const Ints cu{0, 2, 3, N};
  Floats cy(N * D), cdx(N * D), d_pre(N * D), cdw(D * W), cdb(D), dhalo((W - 1) * D);
  gpu::ConvParams p{};
  p.x = cx.data(), p.weight = cw.data(), p.bias = cb.data(), p.halo = halo.data(), p.cu = cu.data();
  p.n = 3, p.N = N, p.D = D, p.W = W, p.dy = cdy.data(), p.d_pre = d_pre.data();
  p.dw = cdw.data(), p.dbias = cdb.data(), p.dhalo = dhalo.data();
  why = overwrites(*k, {{"conv y", &cy}}, [&] {
    p.y = cy.data();
    k->conv_forward(p, N * D);
  });
  if (why.empty())
    why = overwrites(
        *k,
        {{"conv d_pre", &d_pre}, {"conv dx", &cdx}, {"conv dhalo", &dhalo}, {"conv dw", &cdw}, {"conv dbias", &cdb}},
        [&] {
          p.y = cdx.data();
          k->conv_dpre(p, N * D);
          k->conv_dx(p, N * D);
          k->conv_dhalo(p, (W - 1) * D);
          k->conv_weight_grad(p, D * W);
        });
  if (!why.empty()) return why;
  // The gated norm (the RMSNorm is the same kernels without z): rows of n = 4, forward and backward.
  const std::int64_t rows = 6, n = 4;
  const Floats o = seeded_floats(label, "norm o", rows * n), z = seeded_floats(label, "norm z", rows * n),
               nw = seeded_floats(label, "norm w", n), ndy = seeded_floats(label, "norm dy", rows * n);
  Floats ny(rows * n), rstd(rows), ndx(rows * n), ndz(rows * n), ndw(n);
  gpu::NormParams q{};
  q.x = o.data(), q.z = z.data(), q.w = nw.data(), q.rows = rows, q.n = n, q.eps = 1e-6f;
  why = overwrites(*k, {{"norm y", &ny}, {"norm rstd", &rstd}}, [&] {
    q.y = ny.data(), q.rstd = rstd.data();
    k->norm_forward(q, rows);
  });
  if (why.empty())
    why = overwrites(*k, {{"norm dx", &ndx}, {"norm dz", &ndz}, {"norm dw", &ndw}}, [&] {
      q.dy = ndy.data(), q.rstd_in = rstd.data(), q.y = ndx.data(), q.dz = ndz.data(), q.dw = ndw.data();
      k->norm_backward(q, rows);
      k->norm_weight_grad(q, n);
    });
  if (!why.empty()) return why;
  // The gates, forward and backward, N = 5 tokens of Hv = 2 heads.
  const std::int64_t T = 5, Hv = 2;
  const Floats a = seeded_floats(label, "gate a", T * Hv), b = seeded_floats(label, "gate b", T * Hv),
               A_log = seeded_floats(label, "gate A_log", Hv), dt_bias = seeded_floats(label, "gate dt_bias", Hv),
               dg = seeded_floats(label, "gate dg", T * Hv), dbeta = seeded_floats(label, "gate dbeta", T * Hv);
  Floats g(T * Hv), beta(T * Hv), da(T * Hv), db(T * Hv), dA_log(Hv), ddt_bias(Hv);
  gpu::GateParams gp{};
  gp.a = a.data(), gp.b = b.data(), gp.A_log = A_log.data(), gp.dt_bias = dt_bias.data(), gp.N = T, gp.Hv = Hv;
  gp.dg = dg.data(), gp.dbeta = dbeta.data(), gp.g = g.data(), gp.beta = beta.data(), gp.da = da.data();
  gp.db = db.data(), gp.dA_log = dA_log.data(), gp.ddt_bias = ddt_bias.data();
  why = overwrites(*k, {{"gates g", &g}, {"gates beta", &beta}}, [&] { k->gates_forward(gp, T * Hv); });
  if (why.empty())
    why = overwrites(
        *k, {{"gates da", &da}, {"gates db", &db}, {"gates dA_log", &dA_log}, {"gates ddt_bias", &ddt_bias}}, [&] {
          k->gates_backward(gp, T * Hv);
          k->gates_param_grad(gp, Hv);
        });
  return why;
}

struct RuleBackend {
  std::string name;
  cp::BackendFactory factory;
};

// cpu and its GPU-math emulation always; cuda where the plugin loads and a device is usable.
std::vector<RuleBackend> rule_backends() {
  std::vector<RuleBackend> out{{"cpu", cpu::make_backend}, {"emu", gpu::make_emulated_backend}};
  if (gpu::cuda_plugin_unavailable_reason().empty()) out.push_back({"cuda", gpu::cuda_plugin().api->make_backend});
  return out;
}

// docs/DESIGN.md §4 on every backend: gates, the decay and state chains, rstd and parameter gradients at
// fp32 accuracy against the oracle on the same stored inputs, at fp32 and bf16 storage. Small ops on
// small inputs: the same cases with --quick (0.2 s).
StepResult run(const StepOptions& options) {
  StepResult r(options);
  for (const RuleBackend& backend : rule_backends())
    for (DType dtype : {DType::F32, DType::BF16})
      for (const Rule& rule : kRules) {
        const std::string label = backend.name + " " + std::string(dtype_option_name(dtype)) + " " + rule.name;
        if (!r.selected(label)) continue;
        std::string why;
        try {
          const std::unique_ptr<cp::Backend> be = backend.factory(dtype);
          StateJudge judge(*be);
          rule.check(*be, judge, label);
          why = judge.why();
        } catch (const Error& e) {
          why = e.what();
        }
        r.check(why.empty(), label, why);
      }
  const std::string label = "emu kernels overwrite reused outputs";
  if (r.selected(label)) {
    std::string why;
    try {
      why = kernel_outputs_overwritten(label);
    } catch (const Error& e) {
      why = e.what();
    }
    r.check(why.empty(), label, why);
  }
  return r;
}

}  // namespace

const Step precision_rules{"precision rules", run};

}  // namespace gdnv::gate
