#pragma once
// Span maps of the gated delta rule in fp64 (core/span_map.hpp): every sequence's forward map
// S_out = M S_in + h_ext and backward map dS_in = M^T dS_out + dh_ext, packed [h | M] per value head as
// the backends pack them. Folding the maps of consecutive spans equals running the spans back to back.
#include <cstdint>

#include "core/span_map.hpp"
#include "reference/gated_delta_rule.hpp"

namespace gdnv::ref {

// Forward span maps of every sequence of `in`, [N, Hv, K, V + K] = [h_ext | M] (in.initial_state is
// ignored). Computed with the chunked form on the state [h_ext | M] of width V + K, from [0 | I] with
// values [v | 0].
Tensor gdr_span_maps(const GdrInputs& in, int chunk_size = 64);
// Backward span maps of every sequence for the output gradient d_o [B, T, Hv, V]: [dh_ext | M], the same M.
Tensor gdr_backward_span_maps(const GdrInputs& in, const Tensor& d_o, int chunk_size = 64);

// Folds sequence n's map into S [Hv, K, V], per value head: S <- M[n] S + h[n] (Forward) or
// S <- M[n]^T S + h[n] (Backward).
void fold_span_map(const Tensor& maps, std::int64_t n, FoldDirection direction, Tensor& S);

}  // namespace gdnv::ref
