#pragma once
// What to run (docs/DESIGN.md §3.1): a RunSpec names a layer, its CP configuration and the micro-batches it
// runs; validate_run rules on every micro-batch once and hands back the checked micro-batches a world runs
// (harness/world.hpp), the way google/benchmark registers what to run apart from running it.
#include <cstdint>
#include <string_view>
#include <vector>

#include "cost/cost.hpp"
#include "cp/cp_config.hpp"
#include "cp/micro_batch.hpp"
#include "reference/layer.hpp"

namespace gdnv::harness {

using cp::CpConfig;
using cp::CpMode;
using cp::Format;

// The decay regime of the gates, set through A_log (A = exp(A_log), g = -A softplus(a + dt_bias) with
// softplus ~ 1.3 at init): default A log-uniform in [1, 16] (Megatron's init: a few tokens of memory);
// weak [1e-3, 1e-2] (g ~ 0: the state, and with it the chunkwise fold, carries across every rank);
// strong [8, 32] (e^g < 3e-5: only the last tokens before a boundary matter); extreme: the inputs at
// the edges of every op's range (make_case, extreme_rows below).
enum class GateRegime { Default, Weak, Strong, Extreme };
GateRegime parse_gate_regime(std::string_view name);  // "default" | "weak" | "strong" | "extreme"
std::string_view gate_regime_name(GateRegime regime);

struct RunSpec {
  ref::LayerConfig::Values layer;
  CpConfig cp;
  DType dtype = DType::F32;
  Format format = Format::Thd;
  std::vector<std::int64_t> lengths;    // THD sequence lengths of every micro-batch (unless micro_batch_lengths)
  std::int64_t seq_len = 0, batch = 1;  // SBHD
  std::vector<int> micro_batches;       // CP size of each micro-batch; empty: one at cp.cp
  // THD: each micro-batch's own sequence lengths, one list per micro-batch, each padded for its own CP
  // size only (a dynamic-CP job packs every micro-batch for the size it runs at); empty: `lengths`.
  std::vector<std::vector<std::int64_t>> micro_batch_lengths;
  GateRegime gates = GateRegime::Default;
  std::uint64_t seed = 0;
  bool stages = false;  // record the named stages (reference/layer.hpp) on every rank and reassemble them
};

// The gate's CP-matrix spec (docs/DESIGN.md §11): GVA geometry hidden 24, Hk 4, Hv 8, dk 6, dv 10, conv 4;
// weak gates (the state crosses every rank: chunkwise's fold matters); THD lengths 8W, 4W; SBHD S = 8W,
// batch 2 (chunkwise: 1, docs/DESIGN.md §3.1).
RunSpec gate_matrix_spec(CpMode mode, int W, int tp, DType dtype, Format format);

// The CP size of each micro-batch of `spec`, and micro-batch m's THD sequence lengths.
std::vector<int> micro_batch_sizes(const RunSpec& spec);
const std::vector<std::int64_t>& lengths_of(const RunSpec& spec, std::size_t micro_batch);

// A run ruled legal: its spec and each micro-batch checked once (cu_seqlens and docs/DESIGN.md §3.1 at its
// CP size), which every rank of its world plans as it is.
struct CheckedRun {
  RunSpec spec;
  std::vector<cp::CheckedMicroBatch> micro_batches;
};

// docs/DESIGN.md §3.1 for the whole run: the configuration, one lengths list per micro-batch when they have
// their own, then each micro-batch at its own CP size (with several micro-batches the message names
// which): ConfigError naming the fix, before any case is built.
CheckedRun validate_run(const RunSpec& spec);
// Whether validate_run accepts `spec`.
bool is_legal(const RunSpec& spec);
// Micro-batch m of `spec` packed as `cu_seqlens` (THD; SBHD: spec's S and B), checked once at its CP size as
// validate_run checks it.
cp::CheckedMicroBatch check_micro_batch_of(const RunSpec& spec, const ref::LayerConfig& config,
                                           const std::vector<std::int64_t>& cu_seqlens, std::size_t m);

// The micro-batches `spec` runs, as the cost model sees them, checked as validate_run checks them (same
// ConfigError, same message) but without building anything.
std::vector<cost::CostGeometry> planned_micro_batches(const RunSpec& spec);

}  // namespace gdnv::harness
