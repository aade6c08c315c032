#include "reference/affine_map.hpp"

#include <algorithm>
#include <string>

#include "core/eigen.hpp"
#include "core/error.hpp"

namespace gdnv::ref {
namespace {

// [B, T, Hv, V] -> [B, T, Hv, K + V] with the K new leading columns zero.
Tensor zero_padded_values(const Tensor& v, std::int64_t K) {
  const std::int64_t V = v.dim(3), rows = v.numel() / std::max<std::int64_t>(V, 1);
  Tensor out(DType::F64, {v.dim(0), v.dim(1), v.dim(2), K + V});
  as_matrix(out, rows, K + V).rightCols(V) = as_matrix(v, rows, V);
  return out;
}

// [N, Hv, K, K + V] states [I | 0].
Tensor identity_states(std::int64_t N, std::int64_t Hv, std::int64_t K, std::int64_t V) {
  Tensor out(DType::F64, {N, Hv, K, K + V});
  for (std::int64_t i = 0; i < N * Hv; ++i)
    MatrixMap(out.data<double>() + i * K * (K + V), K, K + V).leftCols(K).setIdentity();
  return out;
}

void check_state(const AffineMaps& maps, std::int64_t n, const Tensor& S, const char* what) {
  const Shape want{maps.h.dim(1), maps.h.dim(2), maps.h.dim(3)};
  if (S.dtype() != DType::F64 || S.shape() != want)
    throw ConfigError(std::string(what) + " is " + std::string(dtype_name(S.dtype())) + " " + shape_str(S.shape()) +
                      ", expected F64 [Hv, K, V] = " + shape_str(want));
  if (n < 0 || n >= maps.M.dim(0))
    throw ConfigError("sequence " + std::to_string(n) + " out of range: the maps hold " +
                      std::to_string(maps.M.dim(0)) + " sequences");
}

// S [Hv, K, V] <- M[n] S + h[n] (or M[n]^T S + h[n] for the adjoint), per value head.
void fold(const AffineMaps& maps, std::int64_t n, Tensor& S, bool transpose_M, const char* what) {
  check_state(maps, n, S, what);
  const std::int64_t Hv = maps.h.dim(1), K = maps.h.dim(2), V = maps.h.dim(3);
  for (std::int64_t h = 0; h < Hv; ++h) {
    const ConstMatrixMap M(maps.M.data<double>() + (n * Hv + h) * K * K, K, K);
    const ConstMatrixMap offset(maps.h.data<double>() + (n * Hv + h) * K * V, K, V);
    MatrixMap S_h(S.data<double>() + h * K * V, K, V);
    if (transpose_M) S_h = M.transpose() * S_h + offset;
    else S_h = M * S_h + offset;
  }
}

}  // namespace

AffineMaps gdr_affine_maps(const GdrInputs& in, int chunk_size) {
  validate(in);
  const std::int64_t Hv = in.v.dim(2), K = in.k.dim(3), V = in.v.dim(3);
  GdrInputs ext{in.q, in.k, zero_padded_values(in.v, K), in.g, in.beta, std::nullopt, in.cu_seqlens, in.scale,
                in.use_qk_l2norm};
  const std::int64_t N = in.cu_seqlens ? static_cast<std::int64_t>(in.cu_seqlens->size()) - 1 : in.q.dim(0);
  ext.initial_state = identity_states(N, Hv, K, V);
  const Tensor S = gdr_chunked_forward(ext, chunk_size).final_state;  // [N, Hv, K, K + V] = [M | h_ext]
  AffineMaps maps{Tensor(DType::F64, {N, Hv, K, K}), Tensor(DType::F64, {N, Hv, K, V})};
  const ConstMatrixMap all = as_matrix(S, N * Hv * K, K + V);
  as_matrix(maps.M, N * Hv * K, K) = all.leftCols(K);
  as_matrix(maps.h, N * Hv * K, V) = all.rightCols(V);
  return maps;
}

AffineMaps gdr_adjoint_maps(const GdrInputs& in, const Tensor& d_o, int chunk_size) {
  AffineMaps adjoint = gdr_affine_maps(in, chunk_size);
  // dS_in does not depend on S_in, so the input's own initial_state serves.
  adjoint.h = gdr_chunked_backward(in, d_o, std::nullopt, chunk_size).dh0;
  return adjoint;
}

void fold_forward(const AffineMaps& maps, std::int64_t n, Tensor& S) { fold(maps, n, S, false, "S"); }

void fold_adjoint(const AffineMaps& adjoint, std::int64_t n, Tensor& dS) { fold(adjoint, n, dS, true, "dS"); }

}  // namespace gdnv::ref
