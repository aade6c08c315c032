// The cost of cp/plain.cpp: the layer on every token of the micro-batch (CP=1, and all_gather's
// redundant whole-sequence compute).
#include "cost/cost.hpp"

namespace gdnv::cost {

RankCost plain_cost(const CostContext& cc) {
  RankCost cost;
  PhaseCost& fwd = cost.forward;
  cost.saved_bytes = cc.input_copy_bytes() + in_proj_forward_cost(cc, fwd, cc.T) +
                     mixer_core_inputs_cost(cc, fwd, cc.local, cc.lengths) +
                     mixer_core_cost(cc, fwd, cc.local, cc.lengths) + cc.T * cc.local.v_dim() * cc.e;  // + y
  out_proj_forward_cost(cc, fwd, cc.T);

  PhaseCost& bwd = cost.backward;
  out_proj_backward_cost(cc, bwd, cc.T);
  mixer_norm_backward_cost(cc, bwd, cc.local, cc.T);
  mixer_core_backward_cost(cc, bwd, cc.local, cc.lengths);
  in_proj_backward_cost(cc, bwd, cc.T);
  return cost;
}

}  // namespace gdnv::cost
