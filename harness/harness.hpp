#pragma once
// The shared harness behind `gdn-verify run`, the property suites and bench_cp: build a seeded case,
// ask the fp64 oracle, run GdnCpLayer on an in-process world of tp*cp ranks, and assemble what the
// ranks computed back into natural order for comparison.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "comm/accounting.hpp"
#include "comm/inprocess.hpp"
#include "cp/backend.hpp"
#include "cost/cost.hpp"
#include "cp/cp_config.hpp"
#include "reference/layer.hpp"

namespace gdnv::cp {

// The decay regime of the gates, set through A_log (A = exp(A_log), g = -A softplus(a + dt_bias) with
// softplus ~ 1.3 at init): default A log-uniform in [1, 16] (Megatron's init: a few tokens of memory);
// weak [1e-3, 1e-2] (g ~ 0: the state, and with it the chunkwise fold, carries across every rank);
// strong [8, 32] (e^g < 3e-5: only the last tokens before a boundary matter).
enum class GateRegime { Default, Weak, Strong };
GateRegime parse_gate_regime(std::string_view name);  // "default" | "weak" | "strong"

struct RunSpec {
  ref::LayerConfig::Values layer;
  CpConfig cp;
  DType dtype = DType::F32;
  Format format = Format::Thd;
  std::vector<std::int64_t> lengths;    // THD sequence lengths
  std::int64_t seq_len = 0, batch = 1;  // SBHD
  std::vector<int> micro_batches;       // CP size of each micro-batch; empty: one at cp.cp
  GateRegime gates = GateRegime::Default;
  std::uint64_t seed = 0;
};

// docs/DESIGN.md §3.1 for the whole run (configuration and the micro-batch at the static CP size):
// ConfigError naming the fix, before any case is built.
void validate_run(const RunSpec& spec);

// Inputs rounded to the storage dtype (so the oracle sees exactly what the implementation sees), and
// the fp64 oracle's answer on them.
struct Case {
  ref::LayerConfig config;
  ref::LayerParams params;  // F64
  Tensor hidden;            // [T, 1, hidden] | [S, B, hidden] F64, natural order
  Tensor grad_output;       // same shape
  ref::CuSeqlens cu_seqlens;
};
Case make_case(const RunSpec& spec);

struct Answer {
  Tensor out, grad_hidden;  // natural order, F64
  ref::LayerParams grads;   // full (TP-assembled), F64
};
Answer oracle_answer(const Case& c);

// What one rank of the world computed for one micro-batch.
struct RankOutput {
  int cp_size = 1, cp_rank = 0;
  Tensor out, grad_hidden;  // this CP rank's zigzag shard, F64
  ref::LayerParams grads;   // this TP rank's shard, summed over CP (F64)
  Counters forward, backward;
  // What cost/cost.hpp predicts, measured by a CountingBackend around the factory's backend: the FLOPs
  // of the ops that ran, and the bytes the forward allocated and left alive for the backward.
  double forward_flops = 0, backward_flops = 0;
  std::int64_t saved_bytes = 0;
};

struct MicroBatchRun {
  int cp_size = 1;
  Answer answer;
  Counters forward, backward;     // world rank 0's collectives in this micro-batch
  std::vector<RankOutput> ranks;  // what every world rank computed and measured, by world rank
};

// Relative-RMS gate of each tensor of a layer run against the fp64 oracle on the same rounded inputs,
// by tensor name ("out", "grad_hidden", "grad::<param>").
std::map<std::string, double> oracle_gates(const Case& c, const Answer& oracle, DType dtype);

using BackendFactory = std::function<std::unique_ptr<Backend>(DType)>;

// One backend per rank of an in-process world, and the world's options whose movers carry each rank's
// collectives in order with its backend's work (device backends: on its stream).
struct RankBackends {
  std::vector<std::unique_ptr<Backend>> backends;  // by world rank
  WorldOptions options;
};
RankBackends make_rank_backends(int ranks, const BackendFactory& factory, DType dtype);

// This rank's part of every micro-batch of `spec` on `world` (tp * cp ranks, any transport whose
// Memory is the backend's): the TP x CP grid, the layer, then fwd+bwd per micro-batch, the backend's
// host syncs counted in the rank's Accounting. Collective over `world`.
std::vector<RankOutput> run_rank(const RunSpec& spec, const Case& c, std::unique_ptr<Backend> backend,
                                 Communicator& world);

// Natural rows (of hidden viewed as [rows, width], rows = tokens, or S for SBHD) of CP rank r of c.
std::vector<std::int64_t> zigzag_rows(const Case& c, int cp_size, int cp_rank);

// The micro-batches `spec` runs, as the cost model sees them, checked in the order run_in_process
// checks them (same ConfigError, same message) but without building anything.
std::vector<cost::CostGeometry> planned_micro_batches(const RunSpec& spec);
// Where world rank `world_rank` sits in a micro-batch of CP size `cp_size` (dynamic CP: groups of
// consecutive static CP ranks).
cost::RankPlace place_of(const RunSpec& spec, int world_rank, int cp_size);

// Runs every micro-batch of `spec` fwd+bwd on tp*cp in-process ranks (world rank = cp_rank * tp +
// tp_rank). Validation errors (ConfigError) are thrown before any collective.
std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, const Case& c, const BackendFactory& factory);

}  // namespace gdnv::cp
