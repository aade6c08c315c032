// Chunked (WY / UT) form of the gated delta rule (docs/DESIGN.md §1.1), the fast oracle. Per chunk of C
// tokens, with gamma = within-chunk cumsum of g and S the state entering the chunk:
//   A[i,j] = beta_i (k_i.k_j) e^{gamma_i - gamma_j} (j < i),  T = (I + A)^-1,
//   U = T (beta V),  W = T (beta e^gamma K),  V_new = U - W S,
//   O = scale [(e^gamma Q) S + (Q K^T * e^{gamma_i - gamma_j} * tril_incl) V_new],
//   S <- e^{gamma_C} S + (e^{gamma_C - gamma} K)^T V_new.
// Stages, as in FLA's pipeline: intra-chunk (gamma, A, T, U, W) -> state pass (V_new, next S) -> output.
// The backward takes each chunk's S, intra-chunk stage and V_new from the forward's tape, or runs the
// forward's state pass once more to record them (docs/DESIGN.md §1.1).
#include <cmath>
#include <memory>

#include "core/error.hpp"
#include "core/gemm.hpp"
#include "reference/gdr_common.hpp"
#include "reference/l2norm.hpp"

namespace gdnv::ref {
namespace {

using namespace detail;
using Eigen::Index;

// T, P, dP * decay and dA are lower triangular: the GEMM skips the zeros above (or, transposed, below)
// their diagonal without changing a bit.
constexpr GemmOptions kLower{.a = Triangle::Lower}, kUpper{.a = Triangle::Upper};

// One chunk of one (sequence, value head), copied contiguous.
struct Chunk {
  RowMatrix q, k;  // [c, K]  (L2-normalised when asked)
  RowMatrix v;     // [c, V]
  Vec g, beta;     // [c]
};

// Intra-chunk stage.
struct Intra {
  Vec gamma;        // [c]     within-chunk cumsum of g
  RowMatrix decay;  // [c, c]  e^{gamma_i - gamma_j} for j <= i, 0 above the diagonal
  RowMatrix KKd;    // [c, c]  (k_i.k_j) e^{gamma_i - gamma_j} for j < i, 0 elsewhere
  RowMatrix A;      // [c, c]  beta_i KKd[i,j]: strictly lower, so I + A is unit lower triangular
  RowMatrix T;      // [c, c]  (I + A)^-1, unit lower triangular (FLA's solve_tril)
  RowMatrix U;      // [c, V]
  RowMatrix W;      // [c, K]
};

// A chunk as the state pass leaves it: the state S entering it, its intra-chunk stage and V_new.
struct ChunkRecord {
  RowMatrix S;
  Intra in;
  RowMatrix v_new;
};

struct ChunkGrads {
  RowMatrix dq, dk;  // [c, K]  w.r.t. the (normalised) q, k
  RowMatrix dv;      // [c, V]
  Vec dg, dbeta;     // [c]
};

Vec cumsum(const Vec& x) {
  Vec out(x.size());
  double acc = 0;
  for (Index i = 0; i < x.size(); ++i) out(i) = acc += x(i);
  return out;
}

Vec reverse_cumsum(const Vec& x) {
  Vec out(x.size());
  double acc = 0;
  for (Index i = x.size() - 1; i >= 0; --i) out(i) = acc += x(i);
  return out;
}

// Gradient w.r.t. g_t of <dX, X> for X[i,j] carrying the factor e^{gamma_i - gamma_j} = e^{sum_{j<t'<=i}
// g_t'}: sum_{i >= t} sum_{j < t} H_ij with H = dX * X, the factors spanning token t (the diagonal,
// factor 1, never does). Summed directly rather than as the reverse cumsum of row minus column sums of
// H: those cancel in exact arithmetic, but with strongly negative g the near-diagonal terms are O(1)
// while the true gradient is tiny, and +x - x would leave their rounding.
Vec spanning_sums(const RowMatrix& H) {
  const Index c = H.rows();
  RowMatrix suffix = H;  // suffix(i, j) = sum_{i' >= i} H(i', j)
  for (Index i = c - 2; i >= 0; --i) suffix.row(i) += suffix.row(i + 1);
  Vec out(c);
  for (Index t = 0; t < c; ++t) out(t) = suffix.row(t).head(t).sum();
  return out;
}

// out_t = sum_{i < t} x_i: the gradient w.r.t. g_t of terms carrying e^{gamma_C - gamma_i}, i < t.
Vec exclusive_cumsum(const Vec& x) {
  Vec out(x.size());
  double acc = 0;
  for (Index i = 0; i < x.size(); ++i) {
    out(i) = acc;
    acc += x(i);
  }
  return out;
}

// gamma_C - gamma_i = sum_{t > i} g_t, summed directly.
Vec tail_sums(const Vec& g) {
  Vec out(g.size());
  double acc = 0;
  for (Index i = g.size() - 1; i >= 0; --i) {
    out(i) = acc;
    acc += g(i);
  }
  return out;
}

Intra intra_chunk(const Chunk& x) {
  const Index c = x.g.size();
  Intra in;
  in.gamma = cumsum(x.g);
  in.decay = RowMatrix::Zero(c, c);
  // e^{gamma_i - gamma_j} with the exponent summed over (j, i] directly, never e^{gamma_i} e^{-gamma_j}
  // (with strongly negative g the second factor overflows) nor the difference of the cumsums (after a
  // token of g = -1e6 that difference keeps only ~1e-10 absolute: a relative 2e-9 of a g ~ -0.05).
  RowMatrix span = RowMatrix::Zero(c, c);  // span(i, j) = sum_{j < t <= i} g_t
  for (Index i = 0; i < c; ++i)
    for (Index j = 0; j <= i; ++j) {
      if (j < i) span(i, j) = span(i - 1, j) + x.g(i);
      in.decay(i, j) = std::exp(span(i, j));
    }
  in.KKd = product(x.k, x.k.transpose());
  in.KKd = in.KKd.cwiseProduct(in.decay).triangularView<Eigen::StrictlyLower>();
  in.A = x.beta.asDiagonal() * in.KKd;
  in.T = RowMatrix::Identity(c, c);
  in.A.triangularView<Eigen::UnitLower>().solveInPlace(in.T);
  in.U = product(in.T, RowMatrix(x.beta.asDiagonal() * x.v), kLower);
  const Vec beta_eg = x.beta.array() * in.gamma.array().exp();
  in.W = product(in.T, RowMatrix(beta_eg.asDiagonal() * x.k), kLower);
  return in;
}

// State pass, V_new [c, V] = U - W S for the state S [K, V] entering the chunk.
RowMatrix new_values(const Intra& in, const RowMatrix& S) {
  RowMatrix v_new = in.U;
  v_new -= product(in.W, S);
  return v_new;
}

// State pass, S [K, V] advanced to the chunk's end.
void advance_state(const Chunk& x, const Intra& in, const RowMatrix& v_new, RowMatrix& S) {
  const double gamma_C = in.gamma(in.gamma.size() - 1);
  const Vec e_tail = tail_sums(x.g).array().exp();  // e^{gamma_C - gamma}
  const RowMatrix k_tail = e_tail.asDiagonal() * x.k;
  S *= std::exp(gamma_C);
  product_into(k_tail.transpose(), v_new, S, {.accumulate = true});
}

// Output stage: o [c, V] from the state S [K, V] entering the chunk and V_new [c, V].
void chunk_output(const Chunk& x, const Intra& in, const RowMatrix& S, const RowMatrix& v_new, double scale, Rows o) {
  RowMatrix P = product(x.q, x.k.transpose());
  P = P.cwiseProduct(in.decay);  // decay is zero above the diagonal: tril_incl
  const RowMatrix q_decayed = in.gamma.array().exp().matrix().asDiagonal() * x.q;
  RowMatrix out = product(q_decayed, S);
  product_into(P, v_new, out, {.accumulate = true, .a = Triangle::Lower});
  o = scale * out;
}

// Magnitude m_s of the adjoint's dgamma_s (gdr_dgamma_magnitudes, docs/DESIGN.md §4 cumsum-decay): the
// adjoint below run with every operand replaced by its absolute value, so every product that carries
// gamma_s counts with its magnitude whatever order a kernel sums them in (transformers: row minus column
// sums of dP * P and dA * A; FLA: q.dq - k.dk with dq, dk from GEMMs). S, dS: the state entering the
// chunk and the gradient of the one leaving it; s_do = scale dO.
Vec dgamma_magnitudes(const Chunk& x, const Intra& in, const RowMatrix& S, const RowMatrix& dS, const RowMatrix& v_new,
                      const RowMatrix& s_do) {
  const Index c = x.g.size();
  const RowMatrix q = x.q.cwiseAbs(), k = x.k.cwiseAbs(), S_abs = S.cwiseAbs(), dS_abs = dS.cwiseAbs();
  const RowMatrix d_o = s_do.cwiseAbs(), V_new = v_new.cwiseAbs();
  const Vec e_gamma = in.gamma.array().exp(), e_tail = tail_sums(x.g).array().exp();
  const RowMatrix k_tail = e_tail.asDiagonal() * k;
  const auto row_and_column = [](const RowMatrix& H) -> Vec {
    return H.rowwise().sum() + H.colwise().sum().transpose();
  };

  // Output: e^gamma q . d_qdec and dP * P.
  const RowMatrix P = product(q, k.transpose()).cwiseProduct(in.decay);
  Vec m = (e_gamma.asDiagonal() * q).cwiseProduct(product(d_o, S_abs.transpose())).rowwise().sum();
  m += row_and_column(product(d_o, V_new.transpose()).cwiseProduct(P));

  // State: e^{gamma_C} S . dS and k_tail . d_ktail.
  const Vec tail = k_tail.cwiseProduct(product(V_new, dS_abs.transpose())).rowwise().sum();
  m += tail;
  m(c - 1) += e_gamma(c - 1) * S_abs.cwiseProduct(dS_abs).sum() + tail.sum();

  // WY: dA * A and beta e^gamma k . d_bk.
  const RowMatrix dv_new = product(P.transpose(), d_o) + product(k_tail, dS_abs);
  const RowMatrix T = in.T.cwiseAbs();
  const RowMatrix d_bv = product(T.transpose(), dv_new);
  const RowMatrix d_bk = product(T.transpose(), product(dv_new, S_abs.transpose()));
  const RowMatrix U = in.U.cwiseAbs(), W = in.W.cwiseAbs();
  RowMatrix dA = product(d_bv, U.transpose());
  product_into(d_bk, W.transpose(), dA, {.accumulate = true});
  dA = dA.triangularView<Eigen::StrictlyLower>();
  m += row_and_column(dA.cwiseProduct(RowMatrix(in.A.cwiseAbs())));
  m += (x.beta.cwiseAbs().array() * e_gamma.array() * k.cwiseProduct(d_bk).rowwise().sum().array()).matrix();
  return m;
}

// Backward of one chunk from its record (S [K, V] the state entering it); d_o [c, V] is the output
// gradient; dS [K, V] enters as the gradient of the state leaving the chunk and leaves as the gradient of S.
ChunkGrads chunk_backward(const Chunk& x, const ChunkRecord& r, double scale, const RowMatrix& d_o, RowMatrix& dS) {
  const Intra& in = r.in;
  const RowMatrix &S = r.S, &v_new = r.v_new;
  const Index c = x.g.size();
  const Vec e_gamma = in.gamma.array().exp();
  const double gamma_C = in.gamma(c - 1), e_C = std::exp(gamma_C);
  const Vec e_tail = tail_sums(x.g).array().exp();
  const RowMatrix q_decayed = e_gamma.asDiagonal() * x.q;
  const RowMatrix k_tail = e_tail.asDiagonal() * x.k;
  RowMatrix P = product(x.q, x.k.transpose());
  P = P.cwiseProduct(in.decay);
  ChunkGrads d;
  Vec d_gamma = Vec::Zero(c);

  // Output: O = scale [q_decayed S + P V_new].
  const RowMatrix s_do = scale * d_o;
  const RowMatrix d_qdec = product(s_do, S.transpose());
  RowMatrix dS_in = product(q_decayed.transpose(), s_do);
  const RowMatrix dP = product(s_do, v_new.transpose());
  RowMatrix dv_new = product(P.transpose(), s_do, kUpper);
  d.dq = e_gamma.asDiagonal() * d_qdec;
  d_gamma += q_decayed.cwiseProduct(d_qdec).rowwise().sum();
  const RowMatrix dQK = dP.cwiseProduct(in.decay);  // P = (Q K^T) * decay
  product_into(dQK, x.k, d.dq, {.accumulate = true, .a = Triangle::Lower});
  d.dk = product(dQK.transpose(), x.q, kUpper);
  const RowMatrix H_out = dP.cwiseProduct(P);
  Vec dg_spanning = spanning_sums(H_out);

  // State: S_next = e^{gamma_C} S + k_tail^T V_new.
  dS_in += e_C * dS;
  d_gamma(c - 1) += e_C * S.cwiseProduct(dS).sum();
  const RowMatrix d_ktail = product(v_new, dS.transpose());
  product_into(k_tail, dS, dv_new, {.accumulate = true});
  d.dk += e_tail.asDiagonal() * d_ktail;
  // e^{gamma_C - gamma_i} = e^{sum_{t > i} g_t}.
  const Vec tail = k_tail.cwiseProduct(d_ktail).rowwise().sum();

  // V_new = U - W S.
  const RowMatrix dW = -product(dv_new, S.transpose());
  dS_in -= product(in.W.transpose(), dv_new);

  // U = (I + A)^-1 (beta V), W = (I + A)^-1 (beta e^gamma K).
  const RowMatrix d_bv = product(in.T.transpose(), dv_new, kUpper);
  const RowMatrix d_bk = product(in.T.transpose(), dW, kUpper);
  RowMatrix dA = product(d_bv, in.U.transpose());
  product_into(d_bk, in.W.transpose(), dA, {.accumulate = true});
  dA = (-dA).triangularView<Eigen::StrictlyLower>();
  d.dv = x.beta.asDiagonal() * d_bv;
  d.dbeta = x.v.cwiseProduct(d_bv).rowwise().sum();
  const Vec k_dbk = e_gamma.array() * x.k.cwiseProduct(d_bk).rowwise().sum().array();  // e^gamma_i k_i.d_bk_i
  d.dk += (x.beta.array() * e_gamma.array()).matrix().asDiagonal() * d_bk;
  d.dbeta += k_dbk;
  d_gamma += x.beta.cwiseProduct(k_dbk);

  // A = beta * KKd.
  d.dbeta += dA.cwiseProduct(in.KKd).rowwise().sum();
  const RowMatrix dKK = (x.beta.asDiagonal() * dA).cwiseProduct(in.decay);
  product_into(dKK, x.k, d.dk, {.accumulate = true, .a = Triangle::Lower});
  product_into(dKK.transpose(), x.k, d.dk, {.accumulate = true, .a = Triangle::Upper});
  const RowMatrix H_A = dA.cwiseProduct(in.A);
  dg_spanning += spanning_sums(H_A);

  d.dg = reverse_cumsum(d_gamma) + dg_spanning + exclusive_cumsum(tail);  // gamma = cumsum(g)
  dS = dS_in;
  return d;
}

// One (sequence, value head) of the input, read chunk by chunk.
struct Head {
  const GdrInputs& in;
  const Sequence& s;
  std::int64_t h, kh;  // value head and the key head it reads

  Chunk chunk(std::int64_t begin, std::int64_t c) const {
    Chunk x{head_rows(in.q, s, kh, begin, c), head_rows(in.k, s, kh, begin, c), head_rows(in.v, s, h, begin, c),
            head_gates(in.g, s, h, begin, c), head_gates(in.beta, s, h, begin, c)};
    if (in.use_qk_l2norm) {
      l2norm_rows(x.q);
      l2norm_rows(x.k);
    }
    return x;
  }
};

void check_chunk_size(int chunk_size) {
  if (chunk_size < 1)
    throw ConfigError("chunk_size is " + std::to_string(chunk_size) +
                      "; it must be a positive number of tokens (e.g. 64)");
}

// Runs one head's chunks from the state S, leaving S at the head's end: the output into o and each
// chunk's record into records, where given.
void forward_head(const Head& hd, double scale, int C, RowMatrix& S, Tensor* o, std::vector<ChunkRecord>* records) {
  for (std::int64_t begin = 0; begin < hd.s.len; begin += C) {
    const std::int64_t c = std::min<std::int64_t>(C, hd.s.len - begin);
    const Chunk x = hd.chunk(begin, c);
    Intra in = intra_chunk(x);
    RowMatrix v_new = new_values(in, S);
    if (o) chunk_output(x, in, S, v_new, scale, head_rows(*o, hd.s, hd.h, begin, c));
    RowMatrix S_in = records ? S : RowMatrix();
    advance_state(x, in, v_new, S);
    if (records) records->push_back({std::move(S_in), std::move(in), std::move(v_new)});
  }
}

// Runs the backward of one head chunk by chunk from its records (the forward's tape, or else the state
// pass run here from S0); `magnitudes`, when given, receives each chunk's dgamma_magnitudes (taken before
// the chunk's backward moves dS on).
void backward_head(const Head& hd, double scale, int C, const RowMatrix& S0, const std::vector<ChunkRecord>* taped,
                   const Tensor& d_o, RowMatrix& dS, GdrGrads& grads, Tensor* magnitudes = nullptr) {
  std::vector<ChunkRecord> recorded;
  if (!taped) {
    RowMatrix S = S0;
    forward_head(hd, scale, C, S, nullptr, &recorded);
    taped = &recorded;
  }
  for (auto j = static_cast<std::int64_t>(taped->size()) - 1; j >= 0; --j) {
    const std::int64_t begin = j * C, c = std::min<std::int64_t>(C, hd.s.len - begin);
    const Chunk x = hd.chunk(begin, c);
    const ChunkRecord& r = (*taped)[static_cast<std::size_t>(j)];
    const RowMatrix d_o_c = head_rows(d_o, hd.s, hd.h, begin, c);
    if (magnitudes)
      head_gates(*magnitudes, hd.s, hd.h, begin, c) = dgamma_magnitudes(x, r.in, r.S, dS, r.v_new, scale * d_o_c);
    const ChunkGrads d = chunk_backward(x, r, scale, d_o_c, dS);
    head_rows(grads.dq, hd.s, hd.kh, begin, c) += d.dq;
    head_rows(grads.dk, hd.s, hd.kh, begin, c) += d.dk;
    head_rows(grads.dv, hd.s, hd.h, begin, c) = d.dv;
    head_gates(grads.dg, hd.s, hd.h, begin, c) = d.dg;
    head_gates(grads.dbeta, hd.s, hd.h, begin, c) = d.dbeta;
  }
}

}  // namespace

// Each (sequence, value head)'s chunk records, at [sequence slot * Hv + value head].
struct GdrTape {
  int chunk_size;
  std::vector<std::int64_t> lengths;  // each sequence's tokens
  std::int64_t Hv;
  std::vector<std::vector<ChunkRecord>> heads;
};

namespace {

std::vector<std::int64_t> lengths_of(const GdrGeometry& geo) {
  std::vector<std::int64_t> lengths;
  for (const Sequence& s : geo.seqs) lengths.push_back(s.len);
  return lengths;
}

std::size_t tape_slot(const Sequence& s, std::int64_t Hv, std::int64_t h) {
  return static_cast<std::size_t>(s.n * Hv + h);
}

void check_tape(const GdrTape* tape, const GdrGeometry& geo, int chunk_size) {
  if (tape && (tape->chunk_size != chunk_size || tape->Hv != geo.Hv || tape->lengths != lengths_of(geo)))
    throw Error(
        "gdr_chunked_backward: the tape was recorded for other sequences, heads or chunk size; pass the "
        "tape of the forward of these inputs, or none");
}

}  // namespace

GdrOutputs gdr_chunked_forward(const GdrInputs& in, int chunk_size, int threads, bool keep_tape) {
  check_chunk_size(chunk_size);
  const GdrGeometry geo = gdr_geometry(in);
  GdrOutputs out = make_outputs(geo);
  std::shared_ptr<GdrTape> tape;
  if (keep_tape)
    tape = std::make_shared<GdrTape>(
        GdrTape{chunk_size, lengths_of(geo), geo.Hv, std::vector<std::vector<ChunkRecord>>(geo.seqs.size() * geo.Hv)});
  for_each_head_parallel(geo, threads, [&](const Sequence& s, std::int64_t h) {
    RowMatrix S = state_or_zero(in.initial_state, geo, s, h);
    std::vector<ChunkRecord>* records = tape ? &tape->heads[tape_slot(s, geo.Hv, h)] : nullptr;
    forward_head({in, s, h, geo.key_head(h)}, geo.scale, chunk_size, S, &out.o, records);
    state_of(out.final_state, s.n, h) = S;
  });
  out.tape = std::move(tape);
  return out;
}

GdrGrads gdr_chunked_backward(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht, int chunk_size,
                              int threads, const GdrTape* tape) {
  check_chunk_size(chunk_size);
  const GdrGeometry geo = gdr_geometry(in);
  check_grad_inputs(geo, d_o, dht);
  check_tape(tape, geo, chunk_size);
  GdrGrads grads = make_grads(geo);
  for_each_head_parallel(geo, threads, [&](const Sequence& s, std::int64_t h) {
    RowMatrix dS = state_or_zero(dht, geo, s, h);
    const RowMatrix S0 = state_or_zero(in.initial_state, geo, s, h);
    backward_head({in, s, h, geo.key_head(h)}, geo.scale, chunk_size, S0,
                  tape ? &tape->heads[tape_slot(s, geo.Hv, h)] : nullptr, d_o, dS, grads);
    state_of(grads.dh0, s.n, h) = dS;
  });
  finish_qk_grads(in, grads);
  return grads;
}

Tensor gdr_dgamma_magnitudes(const GdrInputs& in, const Tensor& d_o, int chunk_size) {
  check_chunk_size(chunk_size);
  const GdrGeometry geo = gdr_geometry(in);
  check_grad_inputs(geo, d_o, std::nullopt);
  GdrGrads grads = make_grads(geo);
  Tensor magnitudes(DType::F64, grads.dg.shape());
  for_each_head_parallel(geo, 1, [&](const Sequence& s, std::int64_t h) {
    RowMatrix dS = state_or_zero(std::nullopt, geo, s, h);
    const RowMatrix S0 = state_or_zero(in.initial_state, geo, s, h);
    backward_head({in, s, h, geo.key_head(h)}, geo.scale, chunk_size, S0, nullptr, d_o, dS, grads, &magnitudes);
  });
  return magnitudes;
}

}  // namespace gdnv::ref
