#include "reference/span_map.hpp"

#include <algorithm>
#include <string>

#include "core/eigen.hpp"
#include "core/error.hpp"

namespace gdnv::ref {
namespace {

// [B, T, Hv, V] -> [B, T, Hv, V + K] with the K new trailing columns zero.
Tensor zero_padded_values(const Tensor& v, std::int64_t K) {
  const std::int64_t V = v.dim(3), rows = v.numel() / std::max<std::int64_t>(V, 1);
  Tensor out(DType::F64, {v.dim(0), v.dim(1), v.dim(2), V + K});
  as_matrix(out, rows, V + K).leftCols(V) = as_matrix(v, rows, V);
  return out;
}

// [N, Hv, K, V + K] states [0 | I].
Tensor identity_states(std::int64_t N, std::int64_t Hv, std::int64_t K, std::int64_t V) {
  Tensor out(DType::F64, {N, Hv, K, V + K});
  for (std::int64_t i = 0; i < N * Hv; ++i)
    MatrixMap(out.data<double>() + i * K * (V + K), K, V + K).rightCols(K).setIdentity();
  return out;
}

void check_state(const Tensor& maps, std::int64_t n, const Tensor& S, const char* what) {
  const Shape want{maps.dim(1), maps.dim(2), maps.dim(3) - maps.dim(2)};
  if (S.dtype() != DType::F64 || S.shape() != want)
    throw ConfigError(std::string(what) + " is " + std::string(dtype_name(S.dtype())) + " " + shape_str(S.shape()) +
                      ", expected F64 [Hv, K, V] = " + shape_str(want));
  if (n < 0 || n >= maps.dim(0))
    throw ConfigError("sequence " + std::to_string(n) + " out of range: the maps hold " + std::to_string(maps.dim(0)) +
                      " sequences");
}

}  // namespace

Tensor gdr_span_maps(const GdrInputs& in, int chunk_size) {
  validate(in);
  const std::int64_t Hv = in.v.dim(2), K = in.k.dim(3), V = in.v.dim(3);
  GdrInputs ext{
      in.q, in.k, zero_padded_values(in.v, K), in.g, in.beta, std::nullopt, in.cu_seqlens, in.scale, in.use_qk_l2norm};
  const std::int64_t N = in.cu_seqlens ? static_cast<std::int64_t>(in.cu_seqlens->size()) - 1 : in.q.dim(0);
  ext.initial_state = identity_states(N, Hv, K, V);
  return gdr_chunked_forward(ext, chunk_size).final_state;
}

Tensor gdr_backward_span_maps(const GdrInputs& in, const Tensor& d_o, int chunk_size) {
  Tensor maps = gdr_span_maps(in, chunk_size);
  const std::int64_t rows = maps.dim(0) * maps.dim(1) * maps.dim(2), K = maps.dim(2), V = maps.dim(3) - K;
  // dS_in does not depend on S_in, so the input's own initial_state serves.
  const Tensor dh_ext = gdr_chunked_backward(in, d_o, std::nullopt, chunk_size).dh0;
  as_matrix(maps, rows, V + K).leftCols(V) = as_matrix(dh_ext, rows, V);
  return maps;
}

void fold_span_map(const Tensor& maps, std::int64_t n, FoldDirection direction, Tensor& S) {
  const bool forward = direction == FoldDirection::Forward;
  check_state(maps, n, S, forward ? "S" : "dS");
  const std::int64_t Hv = maps.dim(1), K = maps.dim(2), V = maps.dim(3) - K;
  for (std::int64_t h = 0; h < Hv; ++h) {
    const ConstMatrixMap map(maps.data<double>() + (n * Hv + h) * K * (V + K), K, V + K);
    MatrixMap S_h(S.data<double>() + h * K * V, K, V);
    if (forward) S_h = map.rightCols(K) * S_h + map.leftCols(V);
    else S_h = map.rightCols(K).transpose() * S_h + map.leftCols(V);
  }
}

}  // namespace gdnv::ref
