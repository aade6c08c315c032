#pragma once
// Affine state maps of the gated delta rule, the primitive of chunkwise CP (docs/DESIGN.md §3). Over a span
// of tokens the final state is affine in the initial one, and the initial state's gradient is affine
// in the final state's gradient:
//   S_out  = M S_in + h_ext,       M = A_L ... A_1 [K, K],  h_ext = S_out for S_in = 0,
//   dS_in  = M^T dS_out + dh_ext,  dh_ext = dS_in for dS_out = 0 (the span's own d_o only).
// Folding the maps of consecutive spans therefore equals running the spans back to back.
#include <cstdint>

#include "reference/gated_delta_rule.hpp"

namespace gdnv::ref {

struct AffineMaps {
  Tensor M;  // [N, Hv, K, K]
  Tensor h;  // [N, Hv, K, V]  h_ext (forward maps) or dh_ext (adjoint maps)
};

// Forward maps of every sequence of `in` (in.initial_state is ignored). Computed with the chunked
// form on the state [M | h_ext] of width K + V, from [I | 0] with values [0 | v].
AffineMaps gdr_affine_maps(const GdrInputs& in, int chunk_size = 64);
// Adjoint maps of every sequence for the output gradient d_o [B, T, Hv, V]: the same M, h = dh_ext.
AffineMaps gdr_adjoint_maps(const GdrInputs& in, const Tensor& d_o, int chunk_size = 64);

// S [Hv, K, V] <- M[n] S + h[n], per value head.
void fold_forward(const AffineMaps& maps, std::int64_t n, Tensor& S);
// dS [Hv, K, V] <- M[n]^T dS + h[n], per value head.
void fold_adjoint(const AffineMaps& adjoint, std::int64_t n, Tensor& dS);

}  // namespace gdnv::ref
