#pragma once
// Harness of the CPU backend's tests and properties: inputs as the backend stores them, the fp64
// oracle of reference/ run on those same stored values, and whole-tensor comparisons with the
// tolerance of each output's storage dtype.
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/half.hpp"
#include "cp/backend.hpp"
#include "reference/conv1d.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/gates.hpp"
#include "reference/norms.hpp"
#include "reference/span_map.hpp"
#include "tests/reference_testing.hpp"

namespace gdnv::testing {

// Relative-RMS tolerances per storage dtype (docs/DESIGN.md §4).
struct Tolerance {
  double act;    // outputs of single ops (norms, GEMM, conv, gates) stored in dtype()
  double gdr;    // gated delta rule outputs stored in dtype()
  double state;  // outputs stored in state_dtype(): computed in fp32 (fp64) whatever the storage
};

inline Tolerance tolerance(DType storage) {
  switch (storage) {
    // fp64: unit roundoff 1.1e-16; the deepest sums here (a <= 200-token state recurrence, 64-row chunk
    // GEMMs, condition of the unit-lower (I + A) ~ 1e2) stay near 1e-13; chunked and recurrent
    // forms agree to ~1e-12 (docs/DESIGN.md §1.1). 1e-10 leaves two orders of margin.
    case DType::F64:
      return {1e-10, 1e-10, 1e-10};
    // fp32: unit roundoff 6e-8; sums of <= 64 terms per chunk in blocked form grow it to ~5e-7, times a
    // condition ~10 for the chunk solve: the docs/DESIGN.md §4 gate 1e-5.
    case DType::F32:
      return {1e-5, 1e-5, 1e-5};
    // bf16 storage: values stored in bf16 are compared with the oracle rounded to bf16, what an exact
    // kernel stores (ThunderKittens' convention: round the reference too). Against the unrounded oracle the
    // storage rounding alone is 2^-7 / sqrt(12 E[m^2]) ~ 1.5e-3 relative RMS for mantissas m log-uniform
    // in [1, 2), above the 1e-3 conv gate whatever the kernel does. Rounded on both sides, an output
    // differs only where the fp32 error (~1e-6 relative) straddles a rounding boundary: one bf16 ulp
    // (<= 2^-7) with probability ~1e-6 / 2^-8, ~1e-5 relative RMS, well inside the docs/DESIGN.md §4 gates
    // (bf16 conv 1e-3, used for every single op; bf16 GDN 2e-3). Outputs kept in fp32 (gates, rstd,
    // states, dg, dbeta, parameter gradients) see fp32 math on the same stored inputs: the fp32 gate.
    case DType::BF16:
      return {1e-3, 2e-3, 1e-5};
    default:
      return {0, 0, 0};
  }
}

// The value the backend holds for t uploaded as `dtype`, back in fp64: the oracle's input.
inline Tensor stored(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::F64); }

// got (as the backend stored it) against the fp64 oracle `want`, rounded alike when got is bf16.
inline ::testing::AssertionResult matches(const std::string& name, const Tensor& got, const Tensor& want, double tol) {
  const Tensor ref = got.dtype() == DType::BF16 ? stored(want, DType::BF16) : want;
  return close(name, got.to(DType::F64), ref.reshaped(got.shape()), tol);
}

// Rows [begin, begin + count) of t seen as rows of numel(shape) / count elements, shaped `shape`.
inline Tensor rows_of(const Tensor& t, std::int64_t begin, std::int64_t count, const Shape& shape) {
  const std::int64_t row = count == 0 ? 0 : shape_numel(shape) / count;
  const std::vector<double> all = t.to_f64();
  return Tensor::from_f64(std::vector<double>(all.begin() + begin * row, all.begin() + (begin + count) * row), shape);
}

inline cp::Varlen varlen(cp::Backend& be, const std::vector<std::int64_t>& cu) {
  return {cu, be.upload(Tensor::from(cu, {static_cast<std::int64_t>(cu.size())}), DType::I64)};
}

using Results = std::vector<::testing::AssertionResult>;

// Logs every comparison (name, relative RMS, max abs) and fails on any miss.
inline void expect_all(const Results& results) {
  for (const auto& r : results) {
    std::cout << "  " << r.message() << "\n";
    EXPECT_TRUE(r);
  }
}

// 1 + scale * N(0, 1): a norm weight.
inline Tensor around_one(std::int64_t n, std::uint64_t seed, const std::string& stream, double scale = 0.3) {
  Tensor w = random_normal({n}, seed, stream, scale);
  for (std::int64_t i = 0; i < n; ++i) w.set(i, 1 + w.get(i));
  return w;
}

inline cp::Buffer index_buffer(cp::Backend& be, const std::vector<std::int64_t>& idx) {
  return be.upload(Tensor::from(idx, {static_cast<std::int64_t>(idx.size())}), DType::I64);
}

// ---- data movement, the same for every backend -------------------------------------------------
// Gathering bf16 rows by a permutation picks exactly the indexed rows; scattering them back restores x.
inline void expect_rows_move_exact_bytes(cp::Backend& be) {
  const Tensor x = random_normal({5, 2, 3}, 7, "rows").to(DType::BF16);
  const std::vector<std::int64_t> perm{3, 0, 4, 1, 2};
  const Tensor got = be.download(be.gather_rows(be.upload(x, DType::BF16), index_buffer(be, perm)));
  ASSERT_EQ(got.shape(), (Shape{5, 2, 3}));
  for (std::int64_t i = 0; i < 5; ++i)
    for (std::int64_t j = 0; j < 6; ++j) EXPECT_EQ(got.get(i * 6 + j), x.get(perm[i] * 6 + j));
  cp::Buffer back = be.alloc(DType::BF16, {5, 2, 3});
  be.scatter_rows(be.upload(got, DType::BF16), index_buffer(be, perm), back);
  EXPECT_TRUE(be.download(back).bitwise_equal(x));
}

// Gathering fp64 columns picks exactly the indexed ones; scattering them back fills only those.
inline void expect_columns_move_exact_bytes(cp::Backend& be) {
  const Tensor x = random_normal({3, 6}, 8, "cols");
  const std::vector<std::int64_t> cols{5, 1, 2};
  const Tensor got = be.download(be.gather_columns(be.upload(x, DType::F64), index_buffer(be, cols)));
  ASSERT_EQ(got.shape(), (Shape{3, 3}));
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(got.get(r * 3 + j), x.get(r * 6 + cols[j]));
  cp::Buffer out = be.alloc(DType::F64, {3, 6});
  be.scatter_columns(be.upload(got, DType::F64), index_buffer(be, cols), out);
  const Tensor back = be.download(out);
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t c = 0; c < 6; ++c)
      EXPECT_EQ(back.get(r * 6 + c), (c == 5 || c == 1 || c == 2) ? x.get(r * 6 + c) : 0.0) << r << "," << c;
}

// bf16 += bf16 is the fp32 sum rounded once to bf16.
inline void expect_bf16_accumulate_rounds_once(cp::Backend& be) {
  const Tensor y = random_normal({4, 3}, 9, "y").to(DType::BF16), x = random_normal({4, 3}, 9, "x").to(DType::BF16);
  cp::Buffer yb = be.upload(y, DType::BF16);
  be.accumulate(yb, be.upload(x, DType::BF16));
  const Tensor sum = be.download(yb);
  for (std::int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(sum.get(i), round_bf16(static_cast<float>(y.get(i)) + static_cast<float>(x.get(i))));
}

// ---- single ops: `rows` rows of inputs stored as the backend stores them, against the oracle -----
inline Results compare_rmsnorm(cp::Backend& be, std::int64_t rows) {
  const DType act = be.dtype();
  const Tolerance tol = tolerance(act);
  const Tensor x = stored(random_normal({rows, 13}, 3, "x"), act), w = stored(around_one(13, 3, "w"), act);
  const Tensor dy = stored(random_normal({rows, 13}, 3, "dy"), act);
  const cp::RmsNormOut fwd = be.rmsnorm(be.upload(x, act), be.upload(w, act), 1e-6);
  const ref::RmsNorm want = ref::rmsnorm_forward(x, w, 1e-6);
  const cp::RmsNormGrads g = be.rmsnorm_backward(be.upload(dy, act), be.upload(x, act), be.upload(w, act), fwd.rstd);
  const ref::RmsNormGrads g_want = ref::rmsnorm_backward(x, w, want.rstd, dy);
  return {matches("y", be.download(fwd.y), want.y, tol.act),
          matches("rstd", be.download(fwd.rstd), want.rstd, tol.state),
          matches("dx", be.download(g.dx), g_want.dx, tol.act), matches("dw", be.download(g.dw), g_want.dw, tol.state)};
}

// Against fp64 GEMMs written as plain sums.
inline Results compare_linear(cp::Backend& be, std::int64_t rows) {
  const DType act = be.dtype();
  const Tolerance tol = tolerance(act);
  const std::int64_t N = rows, in = 11, out = 6;
  const Tensor x = stored(random_normal({N, in}, 4, "x"), act), w = stored(random_normal({out, in}, 4, "w", 0.3), act);
  const Tensor dy = stored(random_normal({N, out}, 4, "dy"), act);
  Tensor y(DType::F64, {N, out}), dx(DType::F64, {N, in}), dw(DType::F64, {out, in});
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        y.set(r * out + o, y.get(r * out + o) + x.get(r * in + i) * w.get(o * in + i));
        dx.set(r * in + i, dx.get(r * in + i) + dy.get(r * out + o) * w.get(o * in + i));
        dw.set(o * in + i, dw.get(o * in + i) + dy.get(r * out + o) * x.get(r * in + i));
      }
  const cp::Buffer xb = be.upload(x, act), wb = be.upload(w, act);
  const cp::LinearGrads g = be.linear_backward(be.upload(dy, act), xb, wb);
  return {matches("y", be.download(be.linear(xb, wb)), y, tol.act), matches("dx", be.download(g.dx), dx, tol.act),
          matches("dw", be.download(g.dw), dw, tol.state)};
}

inline Results compare_gates(cp::Backend& be, std::int64_t rows) {
  const DType act = be.dtype(), st = be.state_dtype();
  const Tolerance tol = tolerance(act);
  const std::int64_t N = rows, Hv = 5;
  const Tensor a = stored(random_normal({N, Hv}, 5, "a", 2), act), b = stored(random_normal({N, Hv}, 5, "b", 2), act);
  Tensor A_log(DType::F64, {Hv});
  const Rng u(5, "A");
  for (std::int64_t h = 0; h < Hv; ++h) A_log.set(h, std::log(u.uniform(static_cast<std::uint64_t>(h), 1, 16)));
  A_log = stored(A_log, act);
  const Tensor dt_bias = stored(around_one(Hv, 5, "dt", 0.1), act);
  const Tensor dg = stored(random_normal({N, Hv}, 5, "dg"), st), dbeta = stored(random_normal({N, Hv}, 5, "dbeta"), st);
  const cp::Buffer ab = be.upload(a, act), bb = be.upload(b, act), Ab = be.upload(A_log, act),
                   db = be.upload(dt_bias, act);
  const cp::Gates fwd = be.gates(ab, bb, Ab, db);
  const ref::Gates want = ref::gates_forward(a, b, A_log, dt_bias);
  const cp::GateGrads g = be.gates_backward(be.upload(dg, st), be.upload(dbeta, st), ab, bb, Ab, db);
  const ref::GateGrads g_want = ref::gates_backward(a, b, A_log, dt_bias, dg, dbeta);
  return {matches("g", be.download(fwd.g), want.g, tol.state),
          matches("beta", be.download(fwd.beta), want.beta, tol.state),
          matches("da", be.download(g.da), g_want.da, tol.act),
          matches("db", be.download(g.db), g_want.db, tol.act),
          matches("dA_log", be.download(g.dA_log), g_want.dA_log, tol.state),
          matches("ddt_bias", be.download(g.ddt_bias), g_want.ddt_bias, tol.state)};
}

inline Results compare_gated_norm(cp::Backend& be, std::int64_t rows) {
  const DType act = be.dtype();
  const Tolerance tol = tolerance(act);
  const Shape shape{rows, 3, 10};
  const Tensor o = stored(random_normal(shape, 6, "o"), act), z = stored(random_normal(shape, 6, "z", 2), act);
  const Tensor w = stored(around_one(10, 6, "w"), act), dy = stored(random_normal(shape, 6, "dy"), act);
  const cp::Buffer ob = be.upload(o, act), zb = be.upload(z, act), wb = be.upload(w, act);
  const cp::GatedNormOut fwd = be.gated_norm(ob, zb, wb, 1e-6);
  const ref::GatedNorm want = ref::gated_rmsnorm_forward(o, z, w, 1e-6);
  const cp::GatedNormGrads g = be.gated_norm_backward(be.upload(dy, act), ob, zb, wb, fwd.rstd, 1e-6);
  const ref::GatedNormGrads g_want = ref::gated_rmsnorm_backward(o, z, w, want.rstd, dy);
  return {matches("y", be.download(fwd.y), want.y, tol.act),
          matches("rstd", be.download(fwd.rstd), want.rstd, tol.state),
          matches("d_o", be.download(g.d_o), g_want.d_o, tol.act), matches("dz", be.download(g.dz), g_want.dz, tol.act),
          matches("dw", be.download(g.dw), g_want.dw, tol.state)};
}

// ---- conv1d ------------------------------------------------------------------------------------
struct ConvCase {
  std::vector<std::int64_t> cu;  // local packed sequences
  std::int64_t D = 5, W = 4;
  bool bias = true;
  bool halo = false;  // the first sequence continues from a previous rank
  std::uint64_t seed = 1;
};

// The backend's conv over [halo; x] against the oracle's conv of the concatenation, whose first
// W-1 rows are the halo: y and dx are its remaining rows, dhalo the gradient of its first rows.
inline Results compare_conv(cp::Backend& be, const ConvCase& c) {
  const DType act = be.dtype();
  const Tolerance tol = tolerance(act);
  const std::int64_t N = c.cu.back(), off = c.halo ? c.W - 1 : 0;
  const Tensor halo = stored(random_normal({off, c.D}, c.seed, "halo"), act);
  const Tensor x = stored(random_normal({N, c.D}, c.seed, "x"), act);
  ref::Conv1dInputs in;
  std::vector<double> cat = halo.to_f64();
  for (const double v : x.to_f64()) cat.push_back(v);
  in.x = Tensor::from_f64(cat, {1, N + off, c.D});
  in.weight = stored(random_normal({c.D, c.W}, c.seed, "w", 0.5), act);
  if (c.bias) in.bias = stored(random_normal({c.D}, c.seed, "bias", 0.3), act);
  in.cu_seqlens = c.cu;
  for (std::size_t i = 1; i < c.cu.size(); ++i) (*in.cu_seqlens)[i] += off;
  const Tensor dy = stored(random_normal({N, c.D}, c.seed, "dy"), act);
  Tensor dy_cat(DType::F64, {1, N + off, c.D});
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy_cat.set(off * c.D + i, dy.get(i));
  const Tensor y_ref = ref::conv1d_forward(in);
  const ref::Conv1dGrads g_ref = ref::conv1d_backward(in, dy_cat);

  const cp::Buffer xb = be.upload(x, act), wb = be.upload(in.weight, act);
  const cp::Buffer bb = c.bias ? be.upload(*in.bias, act) : cp::Buffer();
  const cp::Buffer hb = c.halo ? be.upload(halo, act) : cp::Buffer();
  const cp::Varlen seqs = varlen(be, c.cu);
  const cp::ConvArgs args{xb, wb, c.bias ? &bb : nullptr, seqs, hb};
  const Tensor y = be.download(be.conv1d(args));
  const cp::ConvGrads g = be.conv1d_backward(args, be.upload(dy, act));
  Results r{matches("y", y, rows_of(y_ref, off, N, {N, c.D}), tol.act),
            matches("dx", be.download(g.dx), rows_of(g_ref.dx, off, N, {N, c.D}), tol.act),
            matches("dw", be.download(g.dw), g_ref.dweight, tol.state)};
  if (c.bias) r.push_back(matches("dbias", be.download(g.dbias), *g_ref.dbias, tol.state));
  if (c.halo) r.push_back(matches("dhalo", be.download(g.dhalo), rows_of(g_ref.dx, 0, off, {off, c.D}), tol.act));
  return r;
}

// ---- gated delta rule ----------------------------------------------------------------------------
struct GdrCase {
  std::vector<std::int64_t> cu;
  std::int64_t Hk = 1, Hv = 1, K = 8, V = 6;
  bool h0 = true, dht = true;  // initial state of the first sequence, gradient of the last one's final state
  std::uint64_t seed = 1;
  Gates gates = Gates::LogSigmoidTau1;
};

// The case's kernel inputs as the backend stores them (q, k, v in dtype(), g and beta in state_dtype()),
// without initial state.
inline ref::GdrInputs stored_gdr_inputs(const GdrCase& c, DType act, DType st) {
  GdrSpec spec;
  spec.T = c.cu.back(), spec.Hk = c.Hk, spec.Hv = c.Hv, spec.K = c.K, spec.V = c.V, spec.cu_seqlens = c.cu;
  spec.initial_state = false, spec.l2norm = true, spec.seed = c.seed, spec.gates = c.gates;
  ref::GdrInputs in = random_gdr(spec);
  in.q = stored(in.q, act), in.k = stored(in.k, act), in.v = stored(in.v, act);
  in.g = stored(in.g, st), in.beta = stored(in.beta, st);
  in.scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  return in;
}

// The stored inputs uploaded, and the GdrArgs over them (h0 as given).
struct GdrBuffers {
  cp::Buffer q, k, v, g, beta, h0;
  cp::Varlen seqs;
  double scale;

  GdrBuffers(cp::Backend& be, const ref::GdrInputs& in, const GdrCase& c, const cp::Buffer& initial = {})
      : q(be.upload(in.q.reshaped({in.q.dim(1), c.Hk, c.K}), be.dtype())),
        k(be.upload(in.k.reshaped({in.k.dim(1), c.Hk, c.K}), be.dtype())),
        v(be.upload(in.v.reshaped({in.v.dim(1), c.Hv, c.V}), be.dtype())),
        g(be.upload(in.g.reshaped({in.g.dim(1), c.Hv}), be.state_dtype())),
        beta(be.upload(in.beta.reshaped({in.beta.dim(1), c.Hv}), be.state_dtype())),
        h0(initial),
        seqs(varlen(be, c.cu)),
        scale(*in.scale) {}
  cp::GdrArgs args() const { return {q, k, v, g, beta, seqs, h0, scale}; }
};

// The backend's chunked kernel against the recurrent fp64 oracle (an independent form) on the same
// stored inputs: h0 enters the first sequence only, dht the last one's final state.
inline Results compare_gdr(cp::Backend& be, const GdrCase& c) {
  const DType act = be.dtype(), st = be.state_dtype();
  const Tolerance tol = tolerance(act);
  const std::int64_t N = c.cu.back(), n = static_cast<std::int64_t>(c.cu.size()) - 1;
  const Shape state_shape{c.Hv, c.K, c.V};
  ref::GdrInputs in = stored_gdr_inputs(c, act, st);
  const Tensor h0 = stored(random_normal(state_shape, c.seed, "h0", 0.5), st);
  const Tensor dht = stored(random_normal(state_shape, c.seed, "dht", 0.5), st);
  const Tensor d_o = stored(random_normal({1, N, c.Hv, c.V}, c.seed, "do"), act);
  const std::int64_t S = h0.numel();
  in.initial_state = Tensor(DType::F64, {n, c.Hv, c.K, c.V});
  if (c.h0)
    for (std::int64_t i = 0; i < S; ++i) in.initial_state->set(i, h0.get(i));
  Tensor dht_all(DType::F64, {n, c.Hv, c.K, c.V});
  if (c.dht)
    for (std::int64_t i = 0; i < S; ++i) dht_all.set((n - 1) * S + i, dht.get(i));
  const ref::GdrOutputs out_ref = ref::gdr_recurrent_forward(in);
  const ref::GdrGrads g_ref = ref::gdr_recurrent_backward(in, d_o, dht_all);

  const GdrBuffers bufs(be, in, c, c.h0 ? be.upload(h0, st) : cp::Buffer());
  const cp::GdrArgs args = bufs.args();
  const cp::GdrOut out = be.gdr(args);
  const cp::GdrGrads gr =
      be.gdr_backward(args, be.upload(d_o.reshaped({N, c.Hv, c.V}), act), c.dht ? be.upload(dht, st) : cp::Buffer());
  const auto last = [&](const Tensor& t) { return rows_of(t, (n - 1) * S, S, state_shape); };
  return {matches("o", be.download(out.o), out_ref.o, tol.gdr),
          matches("final_state", be.download(out.final_state), last(out_ref.final_state.reshaped({n * S})), tol.state),
          matches("dq", be.download(gr.dq), g_ref.dq, tol.gdr),
          matches("dk", be.download(gr.dk), g_ref.dk, tol.gdr),
          matches("dv", be.download(gr.dv), g_ref.dv, tol.gdr),
          matches("dg", be.download(gr.dg), g_ref.dg, tol.state),
          matches("dbeta", be.download(gr.dbeta), g_ref.dbeta, tol.state),
          matches("dh0", be.download(gr.dh0), rows_of(g_ref.dh0.reshaped({n * S}), 0, S, state_shape), tol.state)};
}

// Chunkwise CP's span maps against the oracle's (reference/span_map.hpp) on the same stored inputs: the
// last sequence's forward map, the first sequence's backward map, and the fold of every sequence's maps
// stacked as if each were a rank, both directions.
inline Results compare_span_maps(cp::Backend& be, const GdrCase& c) {
  const DType act = be.dtype(), st = be.state_dtype();
  const Tolerance tol = tolerance(act);
  const std::int64_t N = c.cu.back(), n = static_cast<std::int64_t>(c.cu.size()) - 1;
  const ref::GdrInputs in = stored_gdr_inputs(c, act, st);
  const Tensor d_o = stored(random_normal({1, N, c.Hv, c.V}, c.seed, "do"), act);
  const Tensor fwd = ref::gdr_span_maps(in), bwd = ref::gdr_backward_span_maps(in, d_o);
  // The fold's inputs as the backend stores them, for both sides.
  const Tensor fwd_st = stored(fwd, st), bwd_st = stored(bwd, st);
  const GdrBuffers bufs(be, in, c);
  const cp::Buffer do_b = be.upload(d_o.reshaped({N, c.Hv, c.V}), act);

  const Shape map_shape{c.Hv, c.K, c.V + c.K};
  Tensor S(DType::F64, {c.Hv, c.K, c.V}), dS = S;
  for (std::int64_t j = 0; j < n; ++j) {
    ref::fold_span_map(fwd_st, j, FoldDirection::Forward, S);
    ref::fold_span_map(bwd_st, n - 1 - j, FoldDirection::Backward, dS);
  }
  const auto fold = [&](const Tensor& stack, FoldDirection direction) {
    return be.download(be.fold_span_maps(be.upload(stack, st), 0, static_cast<int>(n), direction));
  };
  return {matches("last_span_map", be.download(be.gdr_last_span_map(bufs.args())), rows_of(fwd, n - 1, 1, map_shape),
                  tol.state),
          matches("first_backward_span_map", be.download(be.gdr_first_backward_span_map(bufs.args(), do_b)),
                  rows_of(bwd, 0, 1, map_shape), tol.state),
          matches("fold", fold(fwd_st, FoldDirection::Forward), S, tol.state),
          matches("fold_backward", fold(bwd_st, FoldDirection::Backward), dS, tol.state)};
}

// ---- the fixed cases, named, that every backend's suite runs ----------------------------------------
inline std::string storage_name(DType d) { return std::string(dtype_option_name(d)); }

template <class Case>
struct Named {
  const char* name;
  Case c;
};
template <class Case>
void PrintTo(const Named<Case>& n, std::ostream* os) {
  *os << n.name;
}
// "<storage>_<case>" for a (storage dtype, named case) parameter.
template <class Case>
std::string test_name(const ::testing::TestParamInfo<std::tuple<DType, Named<Case>>>& p) {
  return storage_name(std::get<0>(p.param)) + "_" + std::get<1>(p.param).name;
}
using NamedConv = Named<ConvCase>;
using NamedGdr = Named<GdrCase>;

// Packed sequences with length-1 ones, halos shorter than the width, and rows past one 64-row block.
inline std::vector<NamedConv> conv_cases() {
  return {NamedConv{"packed_with_length_1", {{0, 1, 6, 23, 24}, 10, 4, true, false, 11}},
          NamedConv{"no_bias_width_3", {{0, 9, 17}, 7, 3, false, false, 12}},
          NamedConv{"halo", {{0, 5, 12}, 6, 4, true, true, 13}},
          NamedConv{"halo_first_shorter_than_width", {{0, 2, 9}, 5, 4, true, true, 14}},
          NamedConv{"halo_single_token", {{0, 1}, 3, 4, false, true, 15}},
          NamedConv{"halo_width_2", {{0, 3, 4}, 4, 2, true, true, 16}},
          NamedConv{"rows_past_one_block", {{0, 50, 130}, 6, 4, true, true, 17}}};
}

// Chunk edges (T = 1, 63, 64, 65), packed GVA groups of 1, 2 and 4, and the strong-decay regimes.
inline std::vector<NamedGdr> gdr_cases() {
  return {NamedGdr{"T1", {{0, 1}, 1, 3, 8, 6, true, true, 21}}, NamedGdr{"T63", {{0, 63}, 1, 2, 5, 7, true, true, 22}},
          NamedGdr{"T64", {{0, 64}, 1, 1, 8, 6, true, true, 23}},
          NamedGdr{"T65", {{0, 65}, 2, 2, 6, 5, true, true, 24}},
          NamedGdr{"packed_gva2", {{0, 1, 66, 129, 193}, 2, 4, 12, 10, true, true, 25}},
          NamedGdr{"packed_gva4", {{0, 70, 71, 135}, 1, 4, 7, 9, true, true, 26}},
          NamedGdr{"packed_gva1_3heads", {{0, 30, 100}, 3, 3, 6, 5, true, true, 27}},
          NamedGdr{"no_h0_no_dht", {{0, 20, 90}, 1, 2, 9, 3, false, false, 28}},
          // g ~ -8 per token: gamma reaches ~ -500 within a chunk, where e^{gamma_i - gamma_j} from fp32
          // cumsums lost 3e-5 of dg.
          NamedGdr{"strong_decay", {{0, 64}, 1, 4, 2, 1, false, false, 0, Gates::LogSigmoidTau01}},
          NamedGdr{"strongly_negative_gates", {{0, 40, 130}, 2, 4, 10, 6, true, true, 29, Gates::StronglyNegative}}};
}

}  // namespace gdnv::testing
