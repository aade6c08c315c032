#include "faults/seams.hpp"

namespace gdnv::faults {
namespace {

bool is(Fault f) { return active_fault() == f; }

}  // namespace

std::vector<std::int64_t> zigzag_positions(std::vector<std::int64_t> positions, const std::vector<std::int64_t>& cu,
                                           int cp_size) {
  if (!is(Fault::ZigzagSwapHalves)) return positions;
  std::vector<std::int64_t> swapped;
  auto at = positions.begin();
  for (std::size_t i = 1; i < cu.size(); ++i) {
    const std::int64_t chunk = (cu[i] - cu[i - 1]) / (2 * cp_size);
    const std::int64_t held = cp_size == 1 ? cu[i] - cu[i - 1] : 2 * chunk;  // CP=1: the whole sequence, any length
    swapped.insert(swapped.end(), at + chunk, at + held);
    swapped.insert(swapped.end(), at, at + chunk);
    at += held;
  }
  return swapped;
}

std::vector<std::int64_t> route_index(std::vector<std::int64_t> index) {
  if (is(Fault::RouteOffByOne))
    for (auto& i : index) i = (i + 1) % static_cast<std::int64_t>(index.size());
  return index;
}

int halo_rank(int owner, int cp_size) { return is(Fault::ConvHaloWrongRank) ? (owner + 1) % cp_size : owner; }

std::int64_t halo_rows_read(std::int64_t rows, int owner, int cp_rank) {
  return is(Fault::ConvHaloOneRank) && owner != cp_rank - 1 ? 0 : rows;
}

std::int64_t halo_tail(std::int64_t tail, std::int64_t n) { return is(Fault::HaloGathersWholeSpan) ? n : tail; }

int head_owner(int rank, int slices) {
  return is(Fault::HeadwiseHeadPermShift) && slices > 1 ? (rank + 1) % slices : rank;
}

int grad_reduction_ranks(int cp_size) { return is(Fault::MissingGradReductionOverCp) ? 1 : cp_size; }

DType grad_all_reduce_dtype(DType grad, DType storage) {
  return storage == DType::BF16 && is(Fault::GradAllreduceBf16) ? DType::BF16 : grad;
}

DType state_exchange_dtype(DType state) { return is(Fault::ChunkwiseBf16StateChain) ? DType::BF16 : state; }

std::int64_t dhalo_rows_returned(std::int64_t rows, std::int64_t n) {
  return is(Fault::HaloGradPreviousRankOnly) ? std::min(rows, n) : rows;
}

bool route_return_uninverted() { return is(Fault::RouteReturnUninverted); }
bool all_gather_grad_unreordered() { return is(Fault::AllGatherGradNaturalOrder); }
bool all_gather_grad_unreduced() { return is(Fault::AllGatherNoReduceScatter); }

bool dt_bias_dropped() { return is(Fault::GateSoftplusMissingDtBias); }
bool naive_softplus() { return is(Fault::SoftplusOverflows); }
bool gates_rounded_to_bf16(bool bf16) { return bf16 && is(Fault::GateBf16BeforeExp); }
bool fast_norm_rsqrt() { return is(Fault::RmsnormFastRsqrt); }
bool decay_from_cumsum() { return is(Fault::DecayCumsumFp32); }
bool backward_span_map_forward_order() { return is(Fault::BackwardSpanMapUntransposed); }
bool conv_bleeds_across_sequences() { return is(Fault::GpuConvBleedsAcrossSequences); }
bool conv_halo_grad_past_first_sequence() { return is(Fault::GpuConvHaloGradPastFirstSequence); }
bool linear_dx_accumulates() { return is(Fault::GpuLinearDxAccumulates); }

bool sum_rounds_every_hop() { return is(Fault::ReduceRoundsPerHop); }

std::int64_t all_reduce_part_begin(std::int64_t begin, std::int64_t count, int n, int p) {
  return is(Fault::MpiAllReduceDropsRemainder) ? p * (count / n) : begin;
}

bool padding_counted() { return is(Fault::PaddingCountedInLoss); }

bool adds_sub_group_grads(bool root, int rank, int c) {
  if (is(Fault::DynamicCpGradsRootRankZero) && c == 1) return rank == 0;
  return root || is(Fault::DynamicCpGradsOverStaticWorld) || is(Fault::DynamicCpGradsNotCombined);
}

bool sub_groups_combined(bool combined) { return combined && !is(Fault::DynamicCpGradsNotCombined); }

}  // namespace gdnv::faults
