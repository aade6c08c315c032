#pragma once
// What one Backend op costs, from its shapes alone, so the per-mode cost models (cost/cost.hpp) and
// the counting backend (cost/counting_backend.*) price an op the same way: the models add up the ops a
// mode will run, the counting backend the ops that really ran.
//   flops  matmul-class work only (linear layers, the depthwise conv, the chunked core and chunkwise
//          CP's span maps), 2 per multiply-add. Norms, gates and gathers are memory-bound: 0 FLOPs.
//   bytes  HBM traffic: every input read and every output written once (the roofline's memory term).
#include <cstdint>
#include <span>

namespace gdnv::cost {

struct OpCost {
  double flops = 0, bytes = 0;
};

// The chunk length of the chunked core (cpu/gdr_chunk.hpp, FLA's BT = 64).
inline constexpr std::int64_t kCostChunk = 64;

// Element sizes of a backend: storage dtype `e`, state dtype `s` (gates, states, parameter grads).
struct ElementSizes {
  double e, s;
};

// x [N, in] w^T, w [out, in]; backward: dx and dw (twice the forward).
OpCost linear_cost(ElementSizes z, std::int64_t N, std::int64_t in, std::int64_t out);
OpCost linear_backward_cost(ElementSizes z, std::int64_t N, std::int64_t in, std::int64_t out);
// Depthwise causal conv over [N, D] with width W; backward: dx and dw.
OpCost conv_cost(ElementSizes z, std::int64_t N, std::int64_t D, std::int64_t W);
OpCost conv_backward_cost(ElementSizes z, std::int64_t N, std::int64_t D, std::int64_t W);
// Chunked gated delta rule over packed sequences of `lengths`, per value head and chunk of c tokens:
// K K^T and Q K^T (c^2 dk each, triangles), the solve for [U | W] (c^2 (dv + dk)), the intra-chunk
// output (c^2 dv), and v_new = U - W S, (e^gamma Q) S, the state update (2 c dk dv each).
OpCost gdr_cost(ElementSizes z, std::span<const std::int64_t> lengths, std::int64_t Hk, std::int64_t Hv,
                std::int64_t dk, std::int64_t dv);
// Backward: the chunk states recomputed (one forward) plus the two gradient passes (two forwards).
OpCost gdr_backward_cost(ElementSizes z, std::span<const std::int64_t> lengths, std::int64_t Hk, std::int64_t Hv,
                         std::int64_t dk, std::int64_t dv);
// gdr_last_span_map / gdr_first_backward_span_map: one sequence of `length` tokens carrying the state [dk, dv + dk]
// ([h | M]) instead of [dk, dv].
OpCost span_map_cost(ElementSizes z, std::int64_t length, std::int64_t Hk, std::int64_t Hv, std::int64_t dk,
                     std::int64_t dv);
// fold_span_maps over `maps` ranks: S = M_j S + h_j, 2 dk dk dv per value head and rank.
OpCost fold_cost(ElementSizes z, std::int64_t maps, std::int64_t Hv, std::int64_t dk, std::int64_t dv);
// A memory-bound op that reads and writes `bytes` in all.
inline OpCost memory_cost(double bytes) { return {0, bytes}; }

}  // namespace gdnv::cost
