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
#include <span>
#include <string_view>
#include <vector>

#include "comm/accounting.hpp"
#include "comm/inprocess.hpp"
#include "cost/cost.hpp"
#include "cp/backend.hpp"
#include "cp/cp_config.hpp"
#include "cp/stage_record.hpp"
#include "reference/layer.hpp"

namespace gdnv::cp {

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

// docs/DESIGN.md §3.1 for the whole run: the configuration, one lengths list per micro-batch when they have
// their own, then each micro-batch at its own CP size (with several micro-batches the message names
// which): ConfigError naming the fix, before any case is built.
void validate_run(const RunSpec& spec);
// Whether validate_run accepts `spec`.
bool is_legal(const RunSpec& spec);

// Inputs rounded to the storage dtype (so the oracle sees exactly what the implementation sees), and
// the fp64 oracle's answer on them. A Case is one micro-batch's: its packing is the one that runs.
struct Case {
  ref::LayerConfig config;
  ref::LayerParams params;  // F64
  Tensor hidden;            // [T, 1, hidden] | [S, B, hidden] F64, natural order
  Tensor grad_output;       // same shape
  ref::CuSeqlens cu_seqlens;
};
// Micro-batch m's inputs: the parameters every micro-batch shares, hidden_states and grad_output of
// its own packing (micro-batch 0's are those of a single-micro-batch run of the same spec).
Case make_case(const RunSpec& spec, std::size_t micro_batch = 0);
// The inputs of a run, as run_in_process takes them: one Case per micro-batch when each has its own
// lengths (micro_batch_lengths), else the one Case every micro-batch runs on.
std::vector<Case> make_cases(const RunSpec& spec);

// The extreme regime reaches each range through a parameter or a hidden row the generator shapes
// (ln_w stays 1, so RMSNorm maps a row 1e4 e_0 to sqrt(hidden) e_0 and every other row to RMS 1 with
// x_0 = 0: in_proj's column 0 acts on the spike rows only):
//   a + dt_bias = +-1e3   even heads: dt_bias = -10, alpha row column 0 = (1e3 + 10) / sqrt(hidden),
//                         so +1e3 on spike rows (g = -1e6: e^g underflows) and -10 + O(0.1) elsewhere;
//                         odd heads: dt_bias = 1 (init), column 0 = -(1e3 + 1) / sqrt(hidden): -1e3 on
//                         spike rows (softplus underflows: g = 0)
//   A = exp(A_log) = 1e3  even heads (g ~ -1e3 softplus(-10) = -0.045 off the spikes); odd heads init
//   beta logits +-50      beta row column 0 = +-50 / sqrt(hidden): +50 (even) / -50 (odd heads) on spikes
//   q/k rows ~ 0          q rows of key head 0 zero (q = 0 on every token); k rows of key head Hk-1
//                         times 1e-29 (|k| ~ 1e-30: |k|^2 underflows below the L2 norm's eps); every
//                         zero hidden row at a sequence start makes that token's q, k, v rows zero
//   hidden rows           per sequence i (THD: packed order; SBHD: batch index), token t of L: t = 0 of
//                         even i zero; else t = L/2 the spike 1e4 e_0; else t = L-1 times 1e4
// The CP>1 cases keep lengths divisible by 2*cp (zigzag), so the length-1 sequence is a CP=1 case's.
void shape_extreme_params(const ref::LayerConfig& config, ref::LayerParams& params);
Tensor extreme_rows(const Tensor& hidden, const ref::CuSeqlens& cu_seqlens);

// Which named stages an answer holds: none, or every stage of the layer, plus chunkwise's boundary
// state for CP size `chunkwise_cp` when it is above 1.
struct StageRequest {
  bool on = false;
  int chunkwise_cp = 0;
};
StageRequest stage_request(const RunSpec& spec, int cp_size);  // what a run of `spec` records at that size

struct Answer {
  Tensor out, grad_hidden;   // natural order, F64
  ref::LayerParams grads;    // full (TP-assembled), F64
  ref::StageTensors stages;  // "stage::..." and "stage_grad::..." (reference/layer.hpp), natural order, F64
  StageRequest stage_request;
};
Answer oracle_answer(const Case& c, const StageRequest& stages = {});

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
  int tp_rank = 0;
  std::vector<HostStage> stages;  // RunSpec::stages: what this rank recorded
};

// Which elements of a reassembled stage one CP rank computed: natural rows x full-layer columns
// (cols empty: every column). all_gather's summed gradients are attributed to the rank's zigzag rows.
struct StagePiece {
  int cp_rank = 0;
  std::vector<std::int64_t> rows, cols;
};

struct MicroBatchRun {
  int cp_size = 1;
  Answer answer;
  Counters forward, backward;     // world rank 0's collectives in this micro-batch
  std::vector<RankOutput> ranks;  // what every world rank computed and measured, by world rank
  std::map<std::string, std::vector<StagePiece>> stage_pieces;  // RunSpec::stages: who computed what
};

// Every CP rank's recorded stages of one micro-batch of CP size run.cp_size, put (or summed) at their
// natural rows and full-layer columns: run.answer.stages, with who computed what in run.stage_pieces.
// `ranks`: the world ranks of the first CP sub-group, by world rank (cp_rank * tp + tp_rank).
void assemble_stages(const Case& c, std::span<const RankOutput* const> ranks, MicroBatchRun& run);

// How an implementation forms its decay factors (docs/DESIGN.md §4): product-of-decays multiplies per-token
// e^{g_t} (our backends: relative error ~u per factor); cumsum-decay takes e^{gamma_i - gamma_j} of fp32
// chunk-local cumsums gamma of g (FLA's and Hugging Face's chunked kernels: absolute error ~u |gamma|).
enum class DecayClass { ProductOfDecays, CumsumDecay };
DecayClass parse_decay_class(std::string_view name);  // "product-of-decays" | "cumsum-decay"
std::string_view decay_class_name(DecayClass decays);

// Relative-RMS gate of each tensor of a layer run against the fp64 oracle on the same rounded inputs,
// by tensor name ("out", "grad_hidden", "grad::<param>"), for an implementation of class `decays`.
std::map<std::string, double> oracle_gates(const Case& c, const Answer& oracle, DType dtype,
                                           DecayClass decays = DecayClass::ProductOfDecays);

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
// host syncs counted in the rank's Accounting. Micro-batch m runs on cases[m], or every one on the
// only case given. Collective over `world`.
std::vector<RankOutput> run_rank(const RunSpec& spec, std::span<const Case> cases, std::unique_ptr<Backend> backend,
                                 Communicator& world);
inline std::vector<RankOutput> run_rank(const RunSpec& spec, const Case& c, std::unique_ptr<Backend> backend,
                                        Communicator& world) {
  return run_rank(spec, std::span<const Case>(&c, 1), std::move(backend), world);
}

// Natural rows (of hidden viewed as [rows, width], rows = tokens, or S for SBHD) of CP rank r of c.
std::vector<std::int64_t> zigzag_rows(const Case& c, int cp_size, int cp_rank);

// The micro-batches `spec` runs, as the cost model sees them, checked in the order run_in_process
// checks them (same ConfigError, same message) but without building anything.
std::vector<cost::CostGeometry> planned_micro_batches(const RunSpec& spec);
// Where world rank `world_rank` sits in a micro-batch of CP size `cp_size` (dynamic CP: groups of
// consecutive static CP ranks).
cost::RankPlace place_of(const RunSpec& spec, int world_rank, int cp_size);

// Runs every micro-batch of `spec` fwd+bwd on tp*cp in-process ranks (world rank = cp_rank * tp +
// tp_rank), micro-batch m on cases[m] (make_cases), or every one on the only case given; each answer
// is in its case's natural order. Validation errors (ConfigError: the configuration, each case's
// packing at its micro-batch's CP size) are thrown before any collective.
std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, std::span<const Case> cases,
                                          const BackendFactory& factory);
inline std::vector<MicroBatchRun> run_in_process(const RunSpec& spec, const Case& c, const BackendFactory& factory) {
  return run_in_process(spec, std::span<const Case>(&c, 1), factory);
}

}  // namespace gdnv::cp
