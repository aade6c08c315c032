// Chunk-local stages of the chunked gated delta rule; see cpu/gdr_chunk.hpp for the math.
#include "cpu/gdr_chunk.hpp"

#include <cmath>

#include "faults/seams.hpp"

namespace gdnv::cpu {
namespace {

using Eigen::Index;

// e^{gamma_i} = prod_{t <= i} e^{g_t}.
template <class C>
Vec<C> cumprod(const Vec<C>& e_g) {
  Vec<C> out(e_g.size());
  C acc = 1;
  for (Index i = 0; i < e_g.size(); ++i) out(i) = acc *= e_g(i);
  return out;
}

// e^{gamma_C - gamma_i} = prod_{t > i} e^{g_t}.
template <class C>
Vec<C> tail_prod(const Vec<C>& e_g) {
  Vec<C> out(e_g.size());
  C acc = 1;
  for (Index i = e_g.size() - 1; i >= 0; --i) {
    out(i) = acc;
    acc *= e_g(i);
  }
  return out;
}

// decay [c, c]: e^{gamma_i - gamma_j} = prod_{j < t <= i} e^{g_t} on and below the diagonal, zero above.
template <class C>
Mat<C> decay_of(const Vec<C>& e_g) {
  const Index c = e_g.size();
  Mat<C> decay = Mat<C>::Zero(c, c);
  for (Index i = 0; i < c; ++i) {
    if (i > 0) decay.row(i).head(i) = decay.row(i - 1).head(i) * e_g(i);
    decay(i, i) = 1;
  }
  return decay;
}

// Planted fault DecayCumsumFp32: gamma = the within-chunk cumsum of g in C, and every decay factor as
// e^{gamma_i - gamma_j} of two cumsums, whose difference keeps only eps |gamma| of the exponent.
template <class C>
void decays_from_cumsum(const ConstVecMap<C>& g, Intra<C>& in) {
  const Index c = g.size();
  Vec<C> gamma(c);
  C acc = 0;
  for (Index i = 0; i < c; ++i) gamma(i) = acc += g(i);
  in.e_gamma = gamma.array().exp();
  in.e_C = in.e_gamma(c - 1);
  in.e_tail = (gamma(c - 1) - gamma.array()).exp();
  in.decay = Mat<C>::Zero(c, c);
  for (Index i = 0; i < c; ++i)
    for (Index j = 0; j <= i; ++j) in.decay(i, j) = std::exp(gamma(i) - gamma(j));
}

// out_t = sum_{i >= t} x_i: the gradient w.r.t. g_t of terms depending on gamma_i, i >= t.
template <class C>
Vec<C> reverse_cumsum(const Vec<C>& x) {
  Vec<C> out(x.size());
  C acc = 0;
  for (Index i = x.size() - 1; i >= 0; --i) out(i) = acc += x(i);
  return out;
}

// out_t = sum_{i < t} x_i: the gradient w.r.t. g_t of terms depending on gamma_C - gamma_i, i < t.
template <class C>
Vec<C> exclusive_cumsum(const Vec<C>& x) {
  Vec<C> out(x.size());
  C acc = 0;
  for (Index i = 0; i < x.size(); ++i) {
    out(i) = acc;
    acc += x(i);
  }
  return out;
}

// For X_ij = Y_ij e^{gamma_i - gamma_j} (lower triangular) and H = dX * X: the gradient w.r.t. g_t of
// <dX, X> is sum_{i >= t} sum_{j < t} H_ij, the factors spanning token t. Summed directly (column
// suffix sums) rather than as the reverse cumsum of row minus column sums, whose terms cancel in exact
// arithmetic but leave rounding of the O(1) near-diagonal terms when the cross terms are decayed away.
template <class C>
Vec<C> spanning_sums(const Mat<C>& H) {
  const Index c = H.rows();
  Mat<C> suffix = H;  // suffix(i, j) = sum_{i' >= i} H(i', j)
  for (Index i = c - 2; i >= 0; --i) suffix.row(i) += suffix.row(i + 1);
  Vec<C> out(c);
  for (Index t = 0; t < c; ++t) out(t) = suffix.row(t).head(t).sum();
  return out;
}

// (Q K^T) * decay on and below the diagonal (zero above), computing only that triangle.
template <class C>
Mat<C> decayed_lower(const ConstMatMap<C>& a, const ConstMatMap<C>& b, const Mat<C>& decay) {
  Mat<C> out = Mat<C>::Zero(a.rows(), a.rows());
  out.template triangularView<Eigen::Lower>() = a * b.transpose();
  return out.cwiseProduct(decay);
}

}  // namespace

template <class C>
Intra<C> ChunkStages<C>::intra(const Chunk<C>& x) {
  const Index c = x.g.size(), K = x.k.cols(), V = x.v.cols();
  Intra<C> in;
  if (faults::decay_from_cumsum()) {
    decays_from_cumsum(x.g, in);
  } else {
    const Vec<C> e_g = x.g.array().exp();
    in.e_gamma = cumprod(e_g);
    in.e_C = in.e_gamma(c - 1);
    in.e_tail = tail_prod(e_g);
    in.decay = decay_of(e_g);
  }
  in.KKd = decayed_lower(x.k, x.k, in.decay);
  in.KKd.diagonal().setZero();
  in.A = x.beta.asDiagonal() * in.KKd;
  in.UW.resize(c, V + K);
  in.UW << x.beta.asDiagonal() * x.v, x.beta.cwiseProduct(in.e_gamma).asDiagonal() * x.k;
  in.A.template triangularView<Eigen::UnitLower>().solveInPlace(in.UW);  // (I + A): A's diagonal reads as 1
  in.P = decayed_lower(x.q, x.k, in.decay);
  in.q_dec = in.e_gamma.asDiagonal() * x.q;
  in.k_tail = in.e_tail.asDiagonal() * x.k;
  return in;
}

template <class C>
Mat<C> ChunkStages<C>::new_values(const Intra<C>& in, const Mat<C>& S) {
  Mat<C> v_new = in.U();
  v_new.noalias() -= in.W() * S;
  return v_new;
}

template <class C>
void ChunkStages<C>::advance(const Intra<C>& in, const Mat<C>& v_new, Mat<C>& S) {
  S *= in.e_C;
  S.noalias() += in.k_tail.transpose() * v_new;
}

template <class C>
void ChunkStages<C>::output(const Intra<C>& in, const Mat<C>& S, const Mat<C>& v_new, C scale, MatMap<C> o) {
  Mat<C> out = in.q_dec * S;
  out.noalias() += in.P.template triangularView<Eigen::Lower>() * v_new;
  o = scale * out;
}

template <class C>
SpanMap<C> ChunkStages<C>::span_map(const Intra<C>& in) {
  SpanMap<C> map;
  const Index K = in.k_tail.cols();
  map.M = in.e_C * Mat<C>::Identity(K, K);
  map.M.noalias() -= in.k_tail.transpose() * in.W();
  map.h_ext.noalias() = in.k_tail.transpose() * in.U();
  return map;
}

template <class C>
void ChunkStages<C>::fold_backward(const Intra<C>& in, const Mat<C>& M, ConstMatMap<C> d_o, C scale, Mat<C>& dS) {
  Mat<C> q_eff = in.q_dec;
  q_eff.noalias() -= in.P.template triangularView<Eigen::Lower>() * in.W();
  Mat<C> dS_in = M.transpose() * dS;
  dS_in.noalias() += q_eff.transpose() * (scale * d_o);
  dS = std::move(dS_in);
}

template <class C>
ChunkGrads<C> ChunkStages<C>::backward(const Chunk<C>& x, const Intra<C>& in, const Mat<C>& S, const Mat<C>& v_new,
                                       ConstMatMap<C> d_o, C scale, Mat<C>& dS) {
  const Index c = x.g.size(), V = x.v.cols();
  const Mat<C> s_do = scale * d_o;
  ChunkGrads<C> d;
  Vec<C> d_gamma = Vec<C>::Zero(c);  // w.r.t. gamma_i through the factors e^{gamma_i}

  // O = scale [q_dec S + P v_new], P lower triangular.
  const Mat<C> d_qdec = s_do * S.transpose();
  Mat<C> dS_in = in.q_dec.transpose() * s_do;
  Mat<C> dP = Mat<C>::Zero(c, c);
  dP.template triangularView<Eigen::Lower>() = s_do * v_new.transpose();
  Mat<C> dv_new = in.P.template triangularView<Eigen::Lower>().transpose() * s_do;
  d.dq = in.e_gamma.asDiagonal() * d_qdec;
  d_gamma += in.q_dec.cwiseProduct(d_qdec).rowwise().sum();
  const Mat<C> dQK = dP.cwiseProduct(in.decay);  // P = (Q K^T) * decay
  d.dq.noalias() += dQK.template triangularView<Eigen::Lower>() * x.k;
  d.dk.noalias() = dQK.template triangularView<Eigen::Lower>().transpose() * x.q;
  Vec<C> dg_spanning = spanning_sums<C>(dP.cwiseProduct(in.P));  // w.r.t. g_t through e^{gamma_i - gamma_j}

  // S_out = e^{gamma_C} S + k_tail^T v_new.
  dS_in += in.e_C * dS;
  const C dg_state = in.e_C * S.cwiseProduct(dS).sum();  // w.r.t. every g_t through e^{gamma_C}
  const Mat<C> d_ktail = v_new * dS.transpose();
  dv_new.noalias() += in.k_tail * dS;
  d.dk += in.e_tail.asDiagonal() * d_ktail;
  const Vec<C> tail = in.k_tail.cwiseProduct(d_ktail).rowwise().sum();  // w.r.t. gamma_C - gamma_i

  // v_new = U - W S: [dU | dW] = [dv_new | -dv_new S^T].
  Mat<C> d_b(c, in.UW.cols());
  d_b << dv_new, -dv_new * S.transpose();
  dS_in.noalias() -= in.W().transpose() * dv_new;

  // [U | W] = T [beta V | beta e^gamma K], T = (I + A)^-1: in place, d_b becomes [d_bv | d_bk] =
  // T^T [dU | dW]; dA = -T^T dT T^T = -(d_bv U^T + d_bk W^T), kept strictly lower.
  in.A.transpose().template triangularView<Eigen::UnitUpper>().solveInPlace(d_b);
  Mat<C> dA = Mat<C>::Zero(c, c);
  dA.template triangularView<Eigen::Lower>() = -d_b * in.UW.transpose();
  dA.diagonal().setZero();
  const auto d_bv = d_b.leftCols(V);
  const auto d_bk = d_b.rightCols(x.k.cols());
  d.dv = x.beta.asDiagonal() * d_bv;
  d.dbeta = x.v.cwiseProduct(d_bv).rowwise().sum();
  const Vec<C> k_dbk = in.e_gamma.cwiseProduct(x.k.cwiseProduct(d_bk).rowwise().sum());  // e^gamma_i k_i.d_bk_i
  d.dk += x.beta.cwiseProduct(in.e_gamma).asDiagonal() * d_bk;
  d.dbeta += k_dbk;
  d_gamma += x.beta.cwiseProduct(k_dbk);

  // A = beta KKd, KKd = (K K^T) * decay below the diagonal: dK = (dKK + dKK^T) K.
  d.dbeta += dA.cwiseProduct(in.KKd).rowwise().sum();
  const Mat<C> dKK = (x.beta.asDiagonal() * dA).cwiseProduct(in.decay);
  const Mat<C> dKK_sym = dKK + dKK.transpose();
  d.dk.noalias() += dKK_sym * x.k;
  dg_spanning += spanning_sums<C>(dA.cwiseProduct(in.A));

  // gamma_i = sum_{t <= i} g_t.
  d.dg = reverse_cumsum(d_gamma) + dg_spanning + exclusive_cumsum(tail);
  d.dg.array() += dg_state;
  dS = dS_in;
  return d;
}

template struct ChunkStages<float>;
template struct ChunkStages<double>;

}  // namespace gdnv::cpu
