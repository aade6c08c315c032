// The cost of cp/headwise.cpp: the in_proj and out_proj on this rank's N_loc zigzag tokens, the mixer
// on all T tokens for 1/cp of the TP-local heads, and one all-to-all each way around the mixer, in
// both directions (4 per layer, whatever the sequence lengths).
#include "cost/cost.hpp"

namespace gdnv::cost {
namespace {

// scatter_heads: N_loc tokens x E columns to every peer, the peers' tokens (N_loc each) back.
// gather_heads is the same exchange reversed, with equal counts: the same bytes.
void heads_all_to_all(const CostContext& cc, PhaseCost& phase, std::int64_t E) {
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(cc.c), cc.N_loc * E);
  count_all_to_all_v(cc, phase, counts, counts, cc.e);
}

}  // namespace

RankCost headwise_cost(const CostContext& cc) {
  const MixerGeometry slice = cc.local.split(cc.c);
  RankCost cost;
  PhaseCost& fwd = cost.forward;
  cost.saved_bytes = cc.input_copy_bytes() + in_proj_forward_cost(cc, fwd, cc.N_loc);
  heads_all_to_all(cc, fwd, slice.in_dim());
  cost.saved_bytes += mixer_core_inputs_cost(cc, fwd, slice, cc.lengths) + mixer_core_cost(cc, fwd, slice, cc.lengths);
  heads_all_to_all(cc, fwd, slice.v_dim());
  cost.saved_bytes += cc.N_loc * cc.local.v_dim() * cc.e;  // y, back on this rank's tokens
  out_proj_forward_cost(cc, fwd, cc.N_loc);

  PhaseCost& bwd = cost.backward;
  out_proj_backward_cost(cc, bwd, cc.N_loc);
  heads_all_to_all(cc, bwd, slice.v_dim());
  mixer_norm_backward_cost(cc, bwd, slice, cc.T);
  mixer_core_backward_cost(cc, bwd, slice, cc.lengths);
  heads_all_to_all(cc, bwd, slice.in_dim());
  in_proj_backward_cost(cc, bwd, cc.N_loc);
  return cost;
}

}  // namespace gdnv::cost
