#pragma once
// Planted faults: runtime-selected bugs of the kind that have shipped in CP stacks, so the test suite
// and the gate can prove they catch them (docs/DESIGN.md §10). Selected by GDNV_FAULT=<name> (or
// ScopedFault in tests) and honoured only by the implementation under test (cp/, cpu/, gpu/, comm/,
// train/'s trainer), never by the oracle, through the seams of faults/seams.hpp.
#include <string_view>
#include <vector>

// X(enumerator, name, where: the seam and the files that call it, what breaks), one line per fault.
#define GDNV_PLANTED_FAULTS(X)                                                                                         \
  X(AllGatherNoReduceScatter, "allgather_no_reduce_scatter", "faults::all_gather_grad_unreduced (cp/all_gather.cpp)",  \
    "all_gather backward keeps each rank's own input-gradient rows instead of reduce-scattering the sum")              \
  X(HeadwiseHeadPermShift, "headwise_head_perm_shift", "faults::head_owner (cp/layer.cpp)",                            \
    "headwise sends CP rank j the heads of rank j+1 (section permutation shifted by one rank)")                        \
  X(MissingGradReductionOverCp, "missing_grad_reduction_over_cp", "faults::grad_reduction_ranks (cp/layer.cpp)",       \
    "parameter gradients are left as per-rank partials, not summed over the CP group")                                 \
  X(ChunkwiseBf16StateChain, "chunkwise_bf16_state_chain", "faults::state_exchange_dtype (cp/chunkwise.cpp)",          \
    "chunkwise exchanges and folds the (M, h_ext) state chain in bf16 instead of fp32")                                \
  X(ConvHaloWrongRank, "conv_halo_wrong_rank", "faults::halo_rank (cp/micro_batch.cpp)",                               \
    "chunkwise reads each conv halo piece from the next rank instead of the rank that owns it")                        \
  X(ConvHaloOneRank, "conv_halo_one_rank", "faults::halo_rows_read (cp/micro_batch.cpp)",                              \
    "chunkwise takes the conv halo from the previous rank only, zeros where it reaches further back")                  \
  X(RouteOffByOne, "route_off_by_one", "faults::route_index (cp/micro_batch.cpp)",                                     \
    "the zigzag -> contiguous route puts every received row one row past where it belongs")                            \
  X(DynamicCpUsesStaticGroup, "dynamic_cp_uses_static_group", "faults::dynamic_cp_group (cp/layer.cpp)",               \
    "a dynamic-CP micro-batch runs its collectives on the static CP group instead of its sub-group")                   \
  X(ZigzagSwapHalves, "zigzag_swap_halves", "faults::zigzag_positions (cp/micro_batch.cpp)",                           \
    "the zigzag shard is read as chunk 2W-1-r before chunk r of every sequence (headwise, all_gather)")                \
  X(GateSoftplusMissingDtBias, "gate_softplus_missing_dt_bias",                                                        \
    "faults::dt_bias_dropped (cpu/backend.cpp, gpu/kernel_backend.cpp)",                                               \
    "the gate is computed as -exp(A_log) * softplus(a), without dt_bias")                                              \
  X(L2normEpsDropped, "l2norm_eps_dropped",                                                                            \
    "faults::l2norm_eps (cp/layer.cpp, cpu/backend.cpp, gpu/kernel_backend.cpp)",                                      \
    "the core's L2 norm of q and k divides by sqrt(sum x^2), without eps")                                             \
  X(SoftplusOverflows, "softplus_overflows", "faults::naive_softplus (cpu/kernels_gates.cpp, gpu/kernel_backend.cpp)", \
    "the gate's softplus is log(1 + e^x): inf past x = 88 in fp32, and imprecise for x << 0")                          \
  X(DynamicCpReusesPlan, "dynamic_cp_reuses_plan", "faults::reused_plan (cp/layer.cpp)",                               \
    "micro-batch plans (routes, contexts) are cached by CP size: a later micro-batch at that size with another "       \
    "packing runs on the first one's plan")                                                                            \
  X(GpuConvBleedsAcrossSequences, "gpu_conv_bleeds_across_sequences",                                                  \
    "faults::conv_bleeds_across_sequences (gpu/kernel_backend.cpp)",                                                   \
    "the gpu/ conv kernel's window reads the previous packed sequence's last tokens (emu and cuda only)")              \
  X(RmsnormFastRsqrt, "rmsnorm_fast_rsqrt", "faults::fast_norm_rsqrt (cpu/kernels_norm.cpp, gpu/kernel_backend.cpp)",  \
    "the RMSNorms' fp32 1/sqrt is a fast approximation (interpolated table, relative error <= 1.5e-6)")                \
  /* Wrong adjoints in hand-written backwards (the gate's adjoint dot-products step). */                               \
  X(BackwardSpanMapUntransposed, "backward_span_map_untransposed",                                                     \
    "faults::backward_span_map_forward_order (cpu/kernels_gdr.cpp)",                                                   \
    "the backward span map composes its chunks' maps as the forward does (M <- M_c M) while it walks them last "       \
    "to first: a span of several 64-token chunks gets M_1 ... M_n, whose transpose is not the forward's adjoint")      \
  X(HaloGradPreviousRankOnly, "halo_grad_previous_rank_only", "faults::dhalo_rows_returned (cp/chunkwise.cpp)",        \
    "chunkwise returns the conv-halo gradient to the previous rank only: halo rows read from ranks further back "      \
    "get none (the forward halo is right)")                                                                            \
  X(RouteReturnUninverted, "route_return_uninverted", "faults::route_return_uninverted (cp/chunkwise.cpp)",            \
    "the contiguous -> zigzag return places row k at route index[k] (the forward's placement) instead of taking "      \
    "row index[k]: the route's permutation not inverted")                                                              \
  X(AllGatherGradNaturalOrder, "allgather_grad_natural_order",                                                         \
    "faults::all_gather_grad_unreordered (cp/all_gather.cpp)",                                                         \
    "all_gather backward reduce-scatters the input gradient in natural token order, without undoing the "              \
    "forward's reorder to source-rank-major")                                                                          \
  X(GateBf16BeforeExp, "gate_bf16_before_exp",                                                                         \
    "faults::gates_rounded_to_bf16 (cpu/kernels_gates.cpp, gpu/kernel_backend.cpp)",                                   \
    "at bf16 storage the gates store g and beta rounded to bf16, so the core takes e^g of a bf16 value")               \
  X(DecayCumsumFp32, "decay_cumsum_fp32", "faults::decay_from_cumsum (cpu/gdr_chunk.cpp, gpu/kernel_backend.cpp)",     \
    "the chunk's decay factors are e^{gamma_i - gamma_j} of fp32 cumsums of g, not products of e^{g_t}")               \
  X(ReduceRoundsPerHop, "reduce_rounds_per_hop", "faults::sum_rounds_every_hop (comm/rank_sum.cpp)",                   \
    "collective sums round to the buffer dtype after every rank's addition, not once (bf16 buffers)")                  \
  X(ReduceOwnRankFirst, "reduce_own_rank_first", "faults::summand_order (comm/inprocess.cpp, comm/mpi.cpp)",           \
    "each rank's collective sum starts from its own contribution (ring order): ranks disagree in bits")                \
  X(GradAllreduceBf16, "grad_allreduce_bf16", "faults::grad_all_reduce_dtype (cp/layer.cpp)",                          \
    "at bf16 storage the parameter gradients are all-reduced over CP as bf16: half the bytes, rounded")                \
  X(HaloGathersWholeSpan, "halo_gathers_whole_span", "faults::halo_tail (cp/micro_batch.cpp)",                         \
    "chunkwise's conv-halo all-gather sends every rank's whole span instead of its W_conv - 1 tail rows")              \
  /* Bugs only training shows (train/, the trainer under test; never the oracle trajectory). */                        \
  X(LossNormalizedPerRank, "loss_normalized_per_rank", "faults::loss_normaliser (train/trainer.cpp)",                  \
    "training divides each rank's loss by that rank's own effective tokens and averages over ranks, instead of "       \
    "dividing by the global batch's effective tokens")                                                                 \
  X(PaddingCountedInLoss, "padding_counted_in_loss", "faults::padding_counted (train/trainer.cpp)",                    \
    "training counts CP padding in the loss: every pad token (and each document's last token) predicts the pad")       \
  X(DynamicCpGradsOverStaticWorld, "dynamic_cp_grads_over_static_world",                                               \
    "faults::adds_sub_group_grads (train/trainer.cpp)",                                                                \
    "training sums a dynamic-CP sub-group's (already sub-group-summed) gradients over the static world: each "         \
    "micro-batch counted c times")                                                                                     \
  X(DynamicCpGradsNotCombined, "dynamic_cp_grads_not_combined",                                                        \
    "faults::adds_sub_group_grads, faults::sub_groups_combined (train/trainer.cpp)",                                   \
    "training never sums dynamic-CP sub-groups' gradients across sub-groups: each rank steps on its own "              \
    "sub-group's micro-batches")                                                                                       \
  X(DynamicCpGradsRootRankZero, "dynamic_cp_grads_root_rank_zero", "faults::adds_sub_group_grads (train/trainer.cpp)", \
    "training adds a CP-1 sub-group's gradients on world rank 0 only, as if every sub-group's root were rank 0: "      \
    "CP-1 micro-batches run on ranks 1..W-1 are lost")                                                                 \
  /* Bugs of the transports and the device kernels' buffers (the gate's MPI transport and precision rules). */         \
  X(MpiAllReduceDropsRemainder, "mpi_all_reduce_drops_remainder", "faults::all_reduce_part_begin (comm/mpi.cpp)",      \
    "the MPI all-reduce gives each rank count / n elements to sum: the count % n last elements of a tensor "           \
    "that does not split evenly are never summed")                                                                     \
  X(GpuLinearDxAccumulates, "gpu_linear_dx_accumulates", "faults::linear_dx_accumulates (gpu/host_kernels.cpp)",       \
    "gpu/'s linear backward adds dx into its output buffer instead of overwriting it (right only on a zeroed "         \
    "buffer; emu only, the CUDA backend runs cuBLAS)")                                                                 \
  X(GpuConvHaloGradPastFirstSequence, "gpu_conv_halo_grad_past_first_sequence",                                        \
    "faults::conv_halo_grad_past_first_sequence (gpu/kernel_backend.cpp)",                                             \
    "gpu/'s conv halo gradient sums the windows of every local token, past the first sequence (wrong when the "        \
    "first local sequence is shorter than the halo)")

namespace gdnv {

enum class Fault {
  None,
#define GDNV_FAULT_ENUMERATOR(fault, name, where, what) fault,
  GDNV_PLANTED_FAULTS(GDNV_FAULT_ENUMERATOR)
#undef GDNV_FAULT_ENUMERATOR
};

struct FaultInfo {
  Fault fault;
  std::string_view name;
  std::string_view where;
  std::string_view what;
};
const std::vector<FaultInfo>& all_faults();
std::string_view fault_name(Fault f);  // "none" for Fault::None

// The active fault: a ScopedFault's if one is alive, else GDNV_FAULT's (an unknown name is a
// ConfigError listing the known ones).
Fault active_fault();

// Test-only override of GDNV_FAULT for the whole process while alive.
class ScopedFault {
 public:
  explicit ScopedFault(Fault f);
  ~ScopedFault();
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;

 private:
  Fault previous_;
};

}  // namespace gdnv
