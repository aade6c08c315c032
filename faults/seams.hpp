#pragma once
// The seams where the planted faults act (docs/DESIGN.md §10): one function per thing a fault perturbs,
// called where the implementation under test computes that thing. A value seam takes the right
// value and returns it unchanged unless its fault is active; a switch (a seam without an argument to
// pass through) says whether the planted variant of an operation runs, for faults whose variant is
// another formula or buffer operation in cp/, cpu/ or gpu/ code. No code outside faults/ reads the
// active fault.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "faults/registry.hpp"

namespace gdnv::faults {

// Layouts and routes (cp/micro_batch.cpp).
// ZigzagSwapHalves: rank p's zigzag positions with each sequence's two chunks swapped.
std::vector<std::int64_t> zigzag_positions(std::vector<std::int64_t> positions, const std::vector<std::int64_t>& cu,
                                           int cp_size);
// RouteOffByOne: every received row one row later.
std::vector<std::int64_t> route_index(std::vector<std::int64_t> index);
// ConvHaloWrongRank: a halo piece read from the next rank.
int halo_rank(int owner, int cp_size);
// ConvHaloOneRank: no rows read from a piece that is not the previous rank's.
std::int64_t halo_rows_read(std::int64_t rows, int owner, int cp_rank);
// HaloGathersWholeSpan: the conv-halo exchange moves the whole span of n rows, not the tail.
std::int64_t halo_tail(std::int64_t tail, std::int64_t n);

// The layer's exchanges and gradients (cp/layer.cpp, cp/chunkwise.cpp, cp/all_gather.cpp).
// HeadwiseHeadPermShift: headwise rank j computes with rank j+1's heads.
int head_owner(int rank, int slices);
// MissingGradReductionOverCp: parameter gradients summed over 1 rank, not the CP group.
int grad_reduction_ranks(int cp_size);
// GradAllreduceBf16: at bf16 storage the gradient all-reduce in bf16.
DType grad_all_reduce_dtype(DType grad, DType storage);
// ChunkwiseBf16StateChain: span maps and folded states exchanged in bf16.
DType state_exchange_dtype(DType state);
// HaloGradPreviousRankOnly: only the last n of the halo gradient's rows returned.
std::int64_t dhalo_rows_returned(std::int64_t rows, std::int64_t n);
// RouteReturnUninverted: to_zigzag places rows by the route index instead of gathering by it.
bool route_return_uninverted();
// AllGatherGradNaturalOrder: the gathered gradient reduce-scattered without undoing the reorder.
bool all_gather_grad_unreordered();
// AllGatherNoReduceScatter: each rank keeps its own input-gradient rows.
bool all_gather_grad_unreduced();
// L2normEpsDropped: the core's q/k L2 norm without its epsilon.
template <class T>
T l2norm_eps(T eps) {
  return active_fault() == Fault::L2normEpsDropped ? T(0) : eps;
}

// DynamicCpReusesPlan: a micro-batch's plan replaced by the first one built at its CP size.
template <class Cache, class Plan>
Plan reused_plan(Cache& by_cp_size, int cp_size, Plan plan) {
  if (active_fault() != Fault::DynamicCpReusesPlan) return plan;
  return by_cp_size.emplace(cp_size, std::move(plan)).first->second;
}
// DynamicCpUsesStaticGroup: a dynamic-CP micro-batch's collectives on the static group.
template <class Group>
Group* dynamic_cp_group(Group* sub_group, Group* static_group) {
  return active_fault() == Fault::DynamicCpUsesStaticGroup ? static_group : sub_group;
}

// The backends' kernels (cpu/, gpu/): switches to the planted formula.
bool dt_bias_dropped();                     // GateSoftplusMissingDtBias
bool naive_softplus();                      // SoftplusOverflows
bool gates_rounded_to_bf16(bool bf16);      // GateBf16BeforeExp, at bf16 storage only
bool fast_norm_rsqrt();                     // RmsnormFastRsqrt
bool decay_from_cumsum();                   // DecayCumsumFp32
bool backward_span_map_forward_order();     // BackwardSpanMapUntransposed
bool conv_bleeds_across_sequences();        // GpuConvBleedsAcrossSequences
bool conv_halo_grad_past_first_sequence();  // GpuConvHaloGradPastFirstSequence
bool linear_dx_accumulates();               // GpuLinearDxAccumulates

// The transports' sums (comm/).
// ReduceRoundsPerHop: a collective sum rounded after every rank's addition.
bool sum_rounds_every_hop();
// ReduceOwnRankFirst: a rank's summands from its own onwards, wrapping around (ring order).
template <class T>
void summand_order(std::vector<T>& summands, int own_rank) {
  if (active_fault() == Fault::ReduceOwnRankFirst)
    std::rotate(summands.begin(), summands.begin() + own_rank, summands.end());
}
// MpiAllReduceDropsRemainder: part p of an n-way split of count begins at p (count / n).
std::int64_t all_reduce_part_begin(std::int64_t begin, std::int64_t count, int n, int p);

// Training (train/trainer.cpp).
// PaddingCountedInLoss: pad tokens and each document's last token get a target.
bool padding_counted();
// LossNormalizedPerRank: each rank's own count (from own_count()) times the world size.
template <class OwnCount>
double loss_normaliser(double global_count, int world_size, OwnCount own_count) {
  if (active_fault() != Fault::LossNormalizedPerRank) return global_count;
  return static_cast<double>(std::max<std::int64_t>(1, own_count())) * world_size;
}
// DynamicCpGradsRootRankZero, DynamicCpGradsOverStaticWorld, DynamicCpGradsNotCombined: whether world
// rank `rank` adds the gradients of its size-c sub-group into the cross-group sum (`root`: it is the
// sub-group's root).
bool adds_sub_group_grads(bool root, int rank, int c);
// DynamicCpGradsNotCombined: sub-groups' gradients never summed across the world.
bool sub_groups_combined(bool combined);

}  // namespace gdnv::faults
