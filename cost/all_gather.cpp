// The cost of cp/all_gather.cpp: every rank gathers all T tokens' hidden states and runs the whole
// layer on them (cp times the compute and activations of a CP rank's share), then reduce-scatters the
// input gradient in the backward.
#include "cost/cost.hpp"

namespace gdnv::cost {

RankCost all_gather_cost(const CostContext& cc) {
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(cc.c), cc.N_loc * cc.hidden);
  RankCost cost = plain_cost(cc);
  count_all_gather_v(cc, cost.forward, counts, cc.e);
  cost.saved_bytes += cc.T * cc.hidden * cc.e;  // the gathered hidden states, in natural order
  count_reduce_scatter_v(cc, cost.backward, counts, cc.e);
  return cost;
}

}  // namespace gdnv::cost
