#pragma once
// A seeded case: one micro-batch's inputs rounded to the storage dtype, and where each CP rank's zigzag
// shard of them lies.
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "cp/micro_batch.hpp"
#include "harness/run_spec.hpp"
#include "reference/layer.hpp"

namespace gdnv::harness {

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
// (RMSNorm maps a row 1e4 e_0 to x = sqrt(hidden) ln_w[0] e_0 and every other row to x_0 = 0, so
// in_proj's column 0 acts on the spike rows only; it is divided by x_0 = r below):
//   a + dt_bias = +-1e3   even heads: dt_bias = -10, alpha row column 0 = (1e3 + 10) / r, so +1e3 on
//                         spike rows (g = -1e6: e^g underflows) and -10 + O(0.1) elsewhere; odd heads:
//                         dt_bias as drawn (case_params), column 0 = (-1e3 - dt_bias) / r: -1e3 on
//                         spike rows (softplus underflows: g = 0)
//   A = exp(A_log) = 1e3  even heads (g ~ -1e3 softplus(-10) = -0.045 off the spikes); odd heads drawn
//   beta logits +-50      beta row column 0 = +-50 / r: +50 (even) / -50 (odd heads) on spikes
//   q/k rows ~ 0          q rows of key head 0 zero (q = 0 on every token); k rows of key head Hk-1
//                         times 1e-29 (|k| ~ 1e-30: |k|^2 underflows below the L2 norm's eps); every
//                         zero hidden row at a sequence start makes that token's q, k, v rows zero
//   hidden rows           per sequence i (THD: packed order; SBHD: batch index), token t of L: t = 0 of
//                         even i zero; else t = L/2 the spike 1e4 e_0; else t = L-1 times 1e4
// The CP>1 cases keep lengths divisible by 2*cp (zigzag), so the length-1 sequence is a CP=1 case's.
void shape_extreme_params(const ref::LayerConfig& config, ref::LayerParams& params);
Tensor extreme_rows(const Tensor& hidden, const ref::CuSeqlens& cu_seqlens);

// Natural rows (of hidden viewed as [rows, width], rows = tokens, or S for SBHD) of CP rank r of c.
std::vector<std::int64_t> zigzag_rows(const Case& c, int cp_size, int cp_rank);
// The same of a checked micro-batch at its CP size, from the layouts' unchecked building blocks.
std::vector<std::int64_t> zigzag_rows(const cp::CheckedMicroBatch& mb, int cp_rank);
// Micro-batch rows (cu order: THD tokens, SBHD batch-major b*S + s) -> natural rows (SBHD s*B + b).
std::int64_t natural_row(const Case& c, std::int64_t row);

}  // namespace gdnv::harness
