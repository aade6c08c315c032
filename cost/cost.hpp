#pragma once
// The cost model of the GatedDeltaNet layer under each CP mode (docs/DESIGN.md §3): for one rank, one
// layer and one micro-batch, forward and backward, the collectives it calls (calls and bytes per kind,
// exactly as comm/accounting.hpp counts them), the ops it runs (FLOPs and HBM bytes, cost/op_cost.hpp),
// and the activation bytes its forward keeps for the backward. Each mode's model (cost/plain.cpp,
// cost/headwise.cpp, cost/chunkwise.cpp, cost/all_gather.cpp) follows its algorithm, the file of the
// same name in cp/, call by call; this header and cost/cost.cpp hold what they share. The models never
// validate: callers check the geometry with cp/cp_config.hpp first, as GdnCpLayer does.
#include <cstdint>
#include <vector>

#include "comm/accounting.hpp"
#include "core/dtype.hpp"
#include "cost/op_cost.hpp"
#include "cp/cp_config.hpp"
#include "cp/stages.hpp"
#include "reference/layer_config.hpp"

namespace gdnv::cost {

// The algorithm's vocabulary, which the models follow call by call.
using cp::CpConfig, cp::CpMode, cp::Format, cp::MixerGeometry;

// One micro-batch as the layer sees it.
struct CostGeometry {
  ref::LayerConfig config;
  CpConfig cp;  // mode, tp, static CP size
  DType dtype = DType::BF16;
  Format format = Format::Thd;
  std::vector<std::int64_t> cu;  // packed sequences (THD cu_seqlens; SBHD [0, S, 2S, ..., B*S])
  int cp_size = 1;               // this micro-batch's CP size (dynamic CP: a divisor of cp.cp)
};

// The group a collective runs on: the roofline prices TP and CP links apart.
enum class Group : std::uint8_t { Tp, Cp };

// One collective call of one rank (bytes as comm/accounting.hpp counts them).
struct CallCost {
  comm::Collective kind;
  Group group;
  int size;  // ranks in the group
  std::int64_t sent, recv;
};

struct PhaseCost {
  comm::Counters comm;          // the calls below, added up as the accounting does
  std::vector<CallCost> calls;  // in program order
  std::vector<OpCost> ops;

  double flops() const;
  double bytes() const;
};

struct RankCost {
  PhaseCost forward, backward;
  std::int64_t saved_bytes = 0;    // activations the forward allocates and keeps for the backward
  std::uint64_t route_builds = 0;  // once per micro-batch, shared by every layer
};

// A rank's place: its rank in the micro-batch's CP group and in the TP group.
struct RankPlace {
  int cp_rank = 0, tp_rank = 0;
};

RankCost layer_cost(const CostGeometry& geometry, RankPlace at);

// The whole layer on one device (CP 1, TP 1) over THD sequences of `lengths`, forward + backward with every
// gradient: the FLOPs of the plain mode's ops (the two projections, the depthwise conv, the chunked core;
// norms and gates count 0, cost/op_cost.hpp). The numerator of the benches' roofline (bench/layer_roofline).
double layer_flops(const ref::LayerConfig& config, const std::vector<std::int64_t>& lengths);

// ---- shared by the per-mode models ---------------------------------------------------------------

// A rank's view of the geometry: what every mode derives from it.
struct CostContext {
  const CostGeometry& g;
  RankPlace at;
  int c, tp;
  std::int64_t e, s;                  // bytes per element: storage dtype, state dtype
  std::int64_t hidden, T, N_loc;      // model width, tokens of the micro-batch, zigzag tokens per rank
  std::vector<std::int64_t> lengths;  // non-empty sequence lengths
  MixerGeometry local;                // TP-local heads
  bool conv_bias;

  explicit CostContext(const CostGeometry& geometry, RankPlace place);
  ElementSizes sizes() const { return {static_cast<double>(e), static_cast<double>(s)}; }
  // SBHD: the layer reorders its input to batch-major rows, a copy the in_proj keeps (else 0).
  std::int64_t input_copy_bytes() const;
};

// Collectives on the CP group as comm/communicator.cpp accounts them, in elements of `esize` bytes;
// counts are per group rank.
void count_all_to_all_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& recv_counts, std::int64_t esize);
void count_all_gather_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& counts,
                        std::int64_t esize);
void count_reduce_scatter_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& counts,
                            std::int64_t esize);
// An all-reduce of n elements on the TP or the CP group.
void count_all_reduce(const CostContext& cc, PhaseCost& phase, Group group, std::int64_t n, std::int64_t esize);

// The stages of cp/stages.cpp on N tokens; the forwards return the bytes they keep for the backward.
std::int64_t in_proj_forward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N);
void in_proj_backward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N);
// Conv + gates (mixer_core_inputs), then the core on `lengths` and the gated norm (mixer_core).
std::int64_t mixer_core_inputs_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                                    const std::vector<std::int64_t>& lengths);
std::int64_t mixer_core_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                             const std::vector<std::int64_t>& lengths);
void mixer_norm_backward_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m, std::int64_t N);
void mixer_core_backward_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                              const std::vector<std::int64_t>& lengths);
// out_proj forward (its TP all-reduce included) and backward.
void out_proj_forward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N);
void out_proj_backward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N);

// The modes (each in its own file). Plain also serves all_gather's whole-sequence compute.
RankCost plain_cost(const CostContext& cc);
RankCost headwise_cost(const CostContext& cc);
RankCost chunkwise_cost(const CostContext& cc);
RankCost all_gather_cost(const CostContext& cc);

}  // namespace gdnv::cost
