#pragma once
// Chunk-local stages of the chunked gated delta rule (docs/DESIGN.md §1.1, WY / UT form), in the compute
// type C, for one chunk of c <= 64 tokens of one (sequence, value head). With gamma = within-chunk
// cumsum of g and S [K, V] the state entering the chunk:
//   A[i,j] = beta_i (k_i.k_j) e^{gamma_i - gamma_j} (j < i),  T = (I + A)^-1,
//   U = T (beta V),  W = T (beta e^gamma K),  v_new = U - W S,
//   O = scale [(e^gamma Q) S + (Q K^T * e^{gamma_i - gamma_j} * tril_incl) v_new],
//   S <- e^{gamma_C} S + (e^{gamma_C - gamma} K)^T v_new  =  M S + h_ext.
// Stages as in FLA's pipeline: intra-chunk (everything independent of S) -> state pass -> output.
// Precision: every decay factor is a product of the per-token e^{g_t} (relative error ~c eps) rather
// than e^{gamma_i - gamma_j} of two fp32 cumsums (absolute error eps |gamma|, ~3e-5 at gamma ~ -500
// in a strongly decaying chunk); dg is assembled from sums without cancellation (see backward).
// T is applied by triangular solves, never formed; products with the triangular A, P and their
// gradients compute only the triangle. span_map() is the chunk's span map (M, h_ext) (core/span_map.hpp),
// the building block of the chunkwise-CP pre-pass.
#include <cstdint>

#include <Eigen/Dense>

namespace gdnv::cpu {

constexpr std::int64_t kChunk = 64;

template <class C>
using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C>
using Vec = Eigen::Matrix<C, Eigen::Dynamic, 1>;
template <class C>
using ConstMatMap = Eigen::Map<const Mat<C>>;
template <class C>
using MatMap = Eigen::Map<Mat<C>>;
template <class C>
using ConstVecMap = Eigen::Map<const Vec<C>>;

// One chunk of one (sequence, value head): contiguous views of c rows.
template <class C>
struct Chunk {
  ConstMatMap<C> q, k;     // [c, K]  L2-normalised
  ConstMatMap<C> v;        // [c, V]
  ConstVecMap<C> g, beta;  // [c]
};

// The intra-chunk stage: everything that does not depend on the entering state.
template <class C>
struct Intra {
  Vec<C> e_gamma;  // [c]  e^gamma
  Vec<C> e_tail;   // [c]  e^{gamma_C - gamma}
  C e_C;           //      e^{gamma_C}
  Mat<C> decay;    // [c, c]  e^{gamma_i - gamma_j} for j <= i, 0 above the diagonal
  Mat<C> KKd;      // [c, c]  (k_i.k_j) decay_ij for j < i, 0 elsewhere
  Mat<C> A;        // [c, c]  beta_i KKd_ij, strictly lower: I + A is unit lower triangular
  Mat<C> UW;       // [c, V+K]  [U | W] = (I + A)^-1 [beta V | beta e^gamma K]
  Mat<C> P;        // [c, c]  (q_i.k_j) decay_ij for j <= i, 0 above
  Mat<C> q_dec;    // [c, K]  e^gamma Q
  Mat<C> k_tail;   // [c, K]  e^{gamma_C - gamma} K

  auto U() const { return UW.leftCols(UW.cols() - k_tail.cols()); }  // [c, V]
  auto W() const { return UW.rightCols(k_tail.cols()); }             // [c, K]
};

// The chunk's state update as its span map: S_out = M S + h_ext.
template <class C>
struct SpanMap {
  Mat<C> M;      // [K, K]  e^{gamma_C} I - k_tail^T W
  Mat<C> h_ext;  // [K, V]  k_tail^T U
};

template <class C>
struct ChunkGrads {
  Mat<C> dq, dk;     // [c, K]  w.r.t. the normalised q, k
  Mat<C> dv;         // [c, V]
  Vec<C> dg, dbeta;  // [c]
};

template <class C>
struct ChunkStages {
  static Intra<C> intra(const Chunk<C>& x);
  // v_new [c, V] = U - W S.
  static Mat<C> new_values(const Intra<C>& in, const Mat<C>& S);
  // S <- e^{gamma_C} S + k_tail^T v_new.
  static void advance(const Intra<C>& in, const Mat<C>& v_new, Mat<C>& S);
  // o [c, V] = scale [q_dec S + P v_new], S the entering state.
  static void output(const Intra<C>& in, const Mat<C>& S, const Mat<C>& v_new, C scale, MatMap<C> o);
  static SpanMap<C> span_map(const Intra<C>& in);
  // Folds the chunk's backward span map for the gradient d_o of its outputs into dS, M = span_map(in).M:
  // dS <- M^T dS + scale (q_dec - P W)^T d_o, the gradient of the entering state
  // (o = scale [(q_dec - P W) S + P U]).
  static void fold_backward(const Intra<C>& in, const Mat<C>& M, ConstMatMap<C> d_o, C scale, Mat<C>& dS);
  // S [K, V] entering the chunk and v_new = new_values(in, S); dS enters as the gradient of the
  // leaving state and leaves as that of S.
  static ChunkGrads<C> backward(const Chunk<C>& x, const Intra<C>& in, const Mat<C>& S, const Mat<C>& v_new,
                                ConstMatMap<C> d_o, C scale, Mat<C>& dS);
};

extern template struct ChunkStages<float>;
extern template struct ChunkStages<double>;

}  // namespace gdnv::cpu
