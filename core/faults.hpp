#pragma once
// Planted faults: runtime-selected bugs of the kind that have shipped in CP stacks, so the test suite
// and the gate can prove they catch them. Selected by GDNV_FAULT=<name> (or ScopedFault in tests) and
// honoured only by the implementation under test (cp/, cpu/, gpu/, comm/), never by the oracle.
#include <string_view>
#include <vector>

namespace gdnv {

enum class Fault {
  None,
  AllGatherNoReduceScatter,      // all_gather backward keeps its own gradient rows, no reduce-scatter
  HeadwiseHeadPermShift,         // headwise section permutation shifted by one CP rank
  MissingGradReductionOverCp,    // parameter gradients not summed over the CP group
  ChunkwiseBf16StateChain,       // chunkwise (M, h_ext) maps and folded states rounded to bf16
  ConvHaloWrongRank,             // chunkwise conv halo read from the next rank instead of the owner
  ConvHaloOneRank,               // chunkwise conv halo limited to the previous rank (zeros beyond)
  RouteOffByOne,                 // zigzag -> contiguous route index shifted by one row
  DynamicCpUsesStaticGroup,      // a dynamic-CP micro-batch's collectives run on the static group
  ZigzagSwapHalves,              // the zigzag shard's two chunks of each sequence taken in swapped order
  GateSoftplusMissingDtBias,     // g = -exp(A_log) softplus(a), dt_bias dropped
  L2normEpsDropped,              // the core's q/k L2 norm without its 1e-6 epsilon
  SoftplusOverflows,             // softplus as log(1 + e^x): inf for x > 88 in fp32 (709 in fp64)
  DynamicCpReusesPlan,           // a micro-batch's plan cached by CP size: another packing at that size reuses it
  GpuConvBleedsAcrossSequences,  // gpu/'s conv window reads the previous sequence's tokens (varlen start ignored)
  RmsnormFastRsqrt,              // the norms' fp32 1/sqrt by a fast approximation (relative error up to 1.5e-6)
  // Wrong adjoints in hand-written backwards (the gate's adjoint dot-products step):
  BackwardSpanMapUntransposed,  // a multi-chunk backward span map composes its chunks' M in forward order
  HaloGradPreviousRankOnly,     // chunkwise halo gradient returned to the previous rank only
  RouteReturnUninverted,        // contiguous -> zigzag return places rows by the route index, not inverted
  AllGatherGradNaturalOrder,    // all_gather backward reduce-scatters natural-order rows
  GateBf16BeforeExp,            // at bf16 storage the gates' g and beta rounded to bf16
  DecayCumsumFp32,              // chunk decay factors e^{gamma_i - gamma_j} from differences of fp32 cumsums
  ReduceRoundsPerHop,           // a collective sum rounded to the buffer dtype after every rank's addition
  ReduceOwnRankFirst,           // each rank's collective sum starts from its own contribution (ring order)
  GradAllreduceBf16,            // at bf16 storage the parameter-gradient all-reduce over CP runs in bf16
  HaloGathersWholeSpan,         // chunkwise's conv-halo exchange moves every rank's whole span, not its tail
  // Bugs only training shows (train/, the trainer under test; never the oracle trajectory):
  LossNormalizedPerRank,          // each rank divides its loss by its own effective tokens, then ranks average
  PaddingCountedInLoss,           // pad tokens (and each document's last token) get a target and count
  DynamicCpGradsOverStaticWorld,  // a dynamic-CP sub-group's gradients summed over the static world: c times
  DynamicCpGradsNotCombined,      // a dynamic-CP sub-group's gradients never summed across sub-groups
  DynamicCpGradsRootRankZero,     // a CP-1 sub-group's gradients added on world rank 0 only (lost on ranks 1..W-1)
  // Bugs of the transports and the device kernels' buffers (the gate's MPI transport and precision rules):
  MpiAllReduceDropsRemainder,  // the MPI all-reduce splits count / n per rank: the count % n last elements unsummed
  GpuLinearDxAccumulates,      // gpu/'s linear dx adds into its output instead of overwriting it
  GpuConvHaloGradPastFirstSequence,  // gpu/'s conv dhalo sums windows past the first local sequence
};

struct FaultInfo {
  Fault fault;
  std::string_view name;
  std::string_view what;
};
const std::vector<FaultInfo>& all_faults();
std::string_view fault_name(Fault f);  // "none" for Fault::None

// The active fault: a ScopedFault's if one is alive, else GDNV_FAULT's (an unknown name is a
// ConfigError listing the known ones).
Fault active_fault();
inline bool fault_active(Fault f) { return active_fault() == f; }

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
