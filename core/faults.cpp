#include "core/faults.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace gdnv {
namespace {

std::atomic<Fault> g_override{Fault::None};
std::atomic<bool> g_override_set{false};

Fault from_environment() {
  const char* env = std::getenv("GDNV_FAULT");
  if (!env || !*env) return Fault::None;
  for (const auto& f : all_faults())
    if (f.name == env) return f.fault;
  std::string known;
  for (const auto& f : all_faults()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw ConfigError("GDNV_FAULT='" + std::string(env) + "' is not a known fault: use one of " + known +
                    " (gdn-verify gate --list-faults), or unset it");
}

}  // namespace

const std::vector<FaultInfo>& all_faults() {
  static const std::vector<FaultInfo> table = {
      {Fault::AllGatherNoReduceScatter, "allgather_no_reduce_scatter",
       "all_gather backward keeps each rank's own input-gradient rows instead of reduce-scattering the sum"},
      {Fault::HeadwiseHeadPermShift, "headwise_head_perm_shift",
       "headwise sends CP rank j the heads of rank j+1 (section permutation shifted by one rank)"},
      {Fault::MissingGradReductionOverCp, "missing_grad_reduction_over_cp",
       "parameter gradients are left as per-rank partials, not summed over the CP group"},
      {Fault::ChunkwiseBf16StateChain, "chunkwise_bf16_state_chain",
       "chunkwise exchanges and folds the (M, h_ext) state chain in bf16 instead of fp32"},
      {Fault::ConvHaloWrongRank, "conv_halo_wrong_rank",
       "chunkwise reads each conv halo piece from the next rank instead of the rank that owns it"},
      {Fault::ConvHaloOneRank, "conv_halo_one_rank",
       "chunkwise takes the conv halo from the previous rank only, zeros where it reaches further back"},
      {Fault::RouteOffByOne, "route_off_by_one",
       "the zigzag -> contiguous route puts every received row one row past where it belongs"},
      {Fault::DynamicCpUsesStaticGroup, "dynamic_cp_uses_static_group",
       "a dynamic-CP micro-batch runs its collectives on the static CP group instead of its sub-group"},
      {Fault::ZigzagSwapHalves, "zigzag_swap_halves",
       "the zigzag shard is read as chunk 2W-1-r before chunk r of every sequence (headwise, all_gather)"},
      {Fault::GateSoftplusMissingDtBias, "gate_softplus_missing_dt_bias",
       "the gate is computed as -exp(A_log) * softplus(a), without dt_bias"},
      {Fault::L2normEpsDropped, "l2norm_eps_dropped",
       "the core's L2 norm of q and k divides by sqrt(sum x^2), without eps"},
      {Fault::SoftplusOverflows, "softplus_overflows",
       "the gate's softplus is log(1 + e^x): inf past x = 88 in fp32, and imprecise for x << 0"},
      {Fault::DynamicCpReusesPlan, "dynamic_cp_reuses_plan",
       "micro-batch plans (routes, contexts) are cached by CP size: a later micro-batch at that size with another "
       "packing runs on the first one's plan"},
      {Fault::GpuConvBleedsAcrossSequences, "gpu_conv_bleeds_across_sequences",
       "the gpu/ conv kernel's window reads the previous packed sequence's last tokens (emu and cuda only)"},
      {Fault::RmsnormFastRsqrt, "rmsnorm_fast_rsqrt",
       "the RMSNorms' fp32 1/sqrt is a fast approximation (interpolated table, relative error <= 1.5e-6)"},
      {Fault::BackwardSpanMapUntransposed, "backward_span_map_untransposed",
       "the backward span map composes its chunks' maps as the forward does (M <- M_c M) while it walks them last "
       "to first: a span of several 64-token chunks gets M_1 ... M_n, whose transpose is not the forward's adjoint"},
      {Fault::HaloGradPreviousRankOnly, "halo_grad_previous_rank_only",
       "chunkwise returns the conv-halo gradient to the previous rank only: halo rows read from ranks further back "
       "get none (the forward halo is right)"},
      {Fault::RouteReturnUninverted, "route_return_uninverted",
       "the contiguous -> zigzag return places row k at route index[k] (the forward's placement) instead of taking "
       "row index[k]: the route's permutation not inverted"},
      {Fault::AllGatherGradNaturalOrder, "allgather_grad_natural_order",
       "all_gather backward reduce-scatters the input gradient in natural token order, without undoing the "
       "forward's reorder to source-rank-major"},
      {Fault::GateBf16BeforeExp, "gate_bf16_before_exp",
       "at bf16 storage the gates store g and beta rounded to bf16, so the core takes e^g of a bf16 value"},
      {Fault::DecayCumsumFp32, "decay_cumsum_fp32",
       "the chunk's decay factors are e^{gamma_i - gamma_j} of fp32 cumsums of g, not products of e^{g_t}"},
      {Fault::ReduceRoundsPerHop, "reduce_rounds_per_hop",
       "collective sums round to the buffer dtype after every rank's addition, not once (bf16 buffers)"},
      {Fault::ReduceOwnRankFirst, "reduce_own_rank_first",
       "each rank's collective sum starts from its own contribution (ring order): ranks disagree in bits"},
      {Fault::GradAllreduceBf16, "grad_allreduce_bf16",
       "at bf16 storage the parameter gradients are all-reduced over CP as bf16: half the bytes, rounded"},
      {Fault::HaloGathersWholeSpan, "halo_gathers_whole_span",
       "chunkwise's conv-halo all-gather sends every rank's whole span instead of its W_conv - 1 tail rows"},
      {Fault::LossNormalizedPerRank, "loss_normalized_per_rank",
       "training divides each rank's loss by that rank's own effective tokens and averages over ranks, instead of "
       "dividing by the global batch's effective tokens"},
      {Fault::PaddingCountedInLoss, "padding_counted_in_loss",
       "training counts CP padding in the loss: every pad token (and each document's last token) predicts the pad"},
      {Fault::DynamicCpGradsOverStaticWorld, "dynamic_cp_grads_over_static_world",
       "training sums a dynamic-CP sub-group's (already sub-group-summed) gradients over the static world: each "
       "micro-batch counted c times"},
      {Fault::DynamicCpGradsNotCombined, "dynamic_cp_grads_not_combined",
       "training never sums dynamic-CP sub-groups' gradients across sub-groups: each rank steps on its own "
       "sub-group's micro-batches"},
      {Fault::DynamicCpGradsRootRankZero, "dynamic_cp_grads_root_rank_zero",
       "training adds a CP-1 sub-group's gradients on world rank 0 only, as if every sub-group's root were rank 0: "
       "CP-1 micro-batches run on ranks 1..W-1 are lost"},
      {Fault::MpiAllReduceDropsRemainder, "mpi_all_reduce_drops_remainder",
       "the MPI all-reduce gives each rank count / n elements to sum: the count % n last elements of a tensor "
       "that does not split evenly are never summed"},
      {Fault::GpuLinearDxAccumulates, "gpu_linear_dx_accumulates",
       "gpu/'s linear backward adds dx into its output buffer instead of overwriting it (right only on a zeroed "
       "buffer; emu only, the CUDA backend runs cuBLAS)"},
      {Fault::GpuConvHaloGradPastFirstSequence, "gpu_conv_halo_grad_past_first_sequence",
       "gpu/'s conv halo gradient sums the windows of every local token, past the first sequence (wrong when the "
       "first local sequence is shorter than the halo)"},
  };
  return table;
}

std::string_view fault_name(Fault f) {
  for (const auto& info : all_faults())
    if (info.fault == f) return info.name;
  return "none";
}

Fault active_fault() {
  if (g_override_set.load()) return g_override.load();
  static const Fault env = from_environment();
  return env;
}

ScopedFault::ScopedFault(Fault f) : previous_(g_override.load()) {
  g_override.store(f);
  g_override_set.store(true);
}

ScopedFault::~ScopedFault() {
  g_override.store(previous_);
  g_override_set.store(previous_ != Fault::None);
}

}  // namespace gdnv
