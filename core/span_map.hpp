#pragma once
// The span map of the gated delta rule, the primitive of chunkwise CP (docs/DESIGN.md §1.1, §3). Over a span
// of tokens the final state is affine in the initial one, and the initial state's gradient in the final
// state's gradient:
//   Forward   S_out = M S_in + h_ext,       M = A_L ... A_1 [K, K],  h_ext = S_out for S_in = 0,
//   Backward  dS_in = M^T dS_out + dh_ext,  dh_ext = dS_in for dS_out = 0 (the span's own d_o only).
// Every layer (oracle, CPU, GPU) packs a span map per value head as the row-major K x (V + K) block [h | M]:
// columns [0, V) hold h (h_ext or dh_ext), columns [V, V + K) hold M (M itself in both directions).
namespace gdnv {

// Which of the two a span map is, and so how a fold applies it.
enum class FoldDirection { Forward, Backward };

}  // namespace gdnv
