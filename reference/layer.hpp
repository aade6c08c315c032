#pragma once
// fp64 oracle of the Megatron-Core GatedDeltaNet layer (docs/DESIGN.md §1.3), forward and hand-written
// backward. Three stages, each usable alone (the CP modes put their communication between them):
//   in_proj  (token-local)   P = (rmsnorm(h) * ln_w) W_in^T, rows q,k,v,z,beta,alpha
//   mixer    (per sequence)  conv+SiLU over [q,k,v] -> L2 norm q,k -> GVA -> gates -> core ->
//                            y = rmsnorm_per_head(o) * out_norm_w * silu(z)
//   out_proj (token-local)   out = y W_out^T
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "reference/conv1d.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/kernel_io.hpp"
#include "reference/layer_config.hpp"
#include "reference/layer_params.hpp"
#include "reference/norms.hpp"

namespace gdnv::ref {

// The core op's form: GdrForm::Chunked (WY/UT) or GdrForm::Recurrent (token by token).
using CoreForm = GdrForm;

struct LayerOptions {
  CoreForm core = CoreForm::Chunked;
  int chunk_size = 64;  // chunked core only
  int threads = 0;      // 0: one per hardware thread; the results are bit-identical for any count
  // Added to the gates g [B, T, Hv] before the core, and to their gradient dg after it, when not empty:
  // how the harness measures a tensor's condition to the roundings of a chunk-local cumsum of g and of its
  // backward, the reverse cumsum giving dg (docs/DESIGN.md §4, cumsum-decay).
  Tensor gate_offset, gate_grad_offset;
  // The chunked core's forward keeps its tape in the Mixer for mixer_backward (the same bits, without the
  // backward's second state pass), for one GVA group's memory in layer_run_grouped (docs/DESIGN.md §7).
  bool keep_core_tape = false;
};

using CuSeqlens = std::optional<std::vector<std::int64_t>>;

// ---- stage 1: pre-RMSNorm fused into in_proj -------------------------------------------------
struct InProj {
  Tensor x;     // [N, hidden]  rmsnorm(h) * ln_w
  Tensor rstd;  // [N]
  Tensor p;     // [N, in_proj_dim]
};
// `threads` as in LayerOptions.
InProj in_proj_forward(const LayerConfig& config, const LayerParams& params,
                       const Tensor& h,  // [N, hidden], N tokens in any order
                       int threads = 0);

struct InProjGrads {
  Tensor dh;             // [N, hidden]
  Tensor d_norm_weight;  // [hidden]
  Tensor d_weight;       // [in_proj_dim, hidden]
};
InProjGrads in_proj_backward(const LayerParams& params, const Tensor& h,  // [N, hidden]
                             const InProj& fwd,
                             const Tensor& dp,  // [N, in_proj_dim]
                             int threads = 0);

// ---- stage 2: the mixer over whole sequences -------------------------------------------------
struct Mixer {
  Conv1dInputs conv_in;  // x [B, T, conv_dim] = q,k,v sections of P; weight [conv_dim, W]; SiLU
  Tensor z;              // [B, T, Hv, dv]
  Tensor b, a;           // [B, T, Hv]  beta and alpha sections of P
  GdrInputs core_in;     // conv outputs q,k [B,T,Hk,dk], v [B,T,Hv,dv]; g, beta [B,T,Hv]; L2 norm in the core
  Tensor o;              // [B, T, Hv, dv]  core output
  std::shared_ptr<const GdrTape> core_tape;  // with LayerOptions::keep_core_tape
  GatedNorm y;                               // y [B, T, Hv, dv], rstd [B*T*Hv]
};
Mixer mixer_forward(const LayerConfig& config, const LayerParams& params,
                    const Tensor& p,  // [B, T, in_proj_dim]
                    const CuSeqlens& cu_seqlens, const LayerOptions& options);

struct MixerGrads {
  Tensor dp;           // [B, T, in_proj_dim]
  LayerParams params;  // conv1d.weight, conv1d.bias (when present), A_log, dt_bias, out_norm.weight
};
// With `stages`: the mixer's stage gradients, batch-major [B, T, ...] (layer_backward reorders them).
MixerGrads mixer_backward(const LayerConfig& config, const LayerParams& params, const Mixer& fwd,
                          const Tensor& dy,  // [B, T, Hv, dv]
                          const LayerOptions& options, std::map<std::string, Tensor>* stages = nullptr,
                          Tensor* out_norm_terms = nullptr);  // gated_rmsnorm_backward's dw_terms

// ---- stage 3: out_proj (row-parallel under TP: each rank's output is a partial sum) ----------
Tensor out_proj_forward(const LayerParams& params, const Tensor& y,  // [N, Hv*dv] -> [N, hidden]
                        int threads = 0);

struct OutProjGrads {
  Tensor dy;        // [N, Hv*dv]
  Tensor d_weight;  // [hidden, Hv*dv]
};
OutProjGrads out_proj_backward(const LayerParams& params, const Tensor& y,  // [N, Hv*dv]
                               const Tensor& dout,                          // [N, hidden]
                               int threads = 0);

// ---- the whole layer ----------------------------------------------------------------------------
// hidden_states: THD [T, 1, hidden] with cu_seqlens, or SBHD [S, B, hidden] without. Everything the
// backward needs is kept here; in_proj.p is not (empty): the mixer holds its sections.
struct LayerForward {
  Tensor out;  // [S, B, hidden]
  Tensor h;    // [B*S, hidden]  hidden_states in batch-major token order
  LayerOptions options;
  InProj in_proj;
  Mixer mixer;
};
LayerForward layer_forward(const LayerConfig& config, const LayerParams& params,
                           const Tensor& hidden_states,  // [S, B, hidden]
                           const CuSeqlens& cu_seqlens, const LayerOptions& options = {});

struct LayerGrads {
  Tensor grad_hidden;  // [S, B, hidden]
  LayerParams params;  // every parameter's gradient, by parameter name
};

// ---- named stages (docs/DESIGN.md §1.3): the layer's intermediates, token rows in natural order -------
// "stage::<s>" is stage s's output, "stage_grad::<s>" the loss's gradient w.r.t. it, each [N, ...] with
// N = S*B tokens in the order of `out` ([S, B] for SBHD). stage::q and stage::k are after the core's L2
// norm; the core fuses the L2 norm's backward (as every implementation's kernel does), so the gradients
// recorded are w.r.t. the conv's q and k sections, named for them: stage_grad::conv_q, stage_grad::conv_k
// (a stage and its gradient always name one tensor). chunkwise CP adds stage::boundary_state and
// stage_grad::boundary_state [W, Hv, dk, dv] (the harness computes those: they depend on the span cut).
using StageTensors = std::map<std::string, Tensor>;
// Every tensor name a layer run is judged on, in the order a divergence propagates: the forward stages,
// out, the backward stages, grad_hidden, then the parameter gradients (`grad_names`, given sorted).
std::vector<std::string> judged_order(const std::vector<std::string>& grad_names);
// Whether `name` is a backward tensor (a stage gradient, grad_hidden or a parameter gradient).
bool is_backward_tensor(std::string_view name);
// The shape of stage `name` with `rows` leading rows (N tokens, or W ranks for the boundary state).
Shape stage_shape(const LayerConfig& config, std::string_view name, std::int64_t rows);
StageTensors forward_stages(const LayerConfig& config, const LayerForward& fwd);

// config and params must be those the forward ran with. With `stages`, the backward stage gradients
// are added to it.
LayerGrads layer_backward(const LayerConfig& config, const LayerParams& params, const LayerForward& fwd,
                          const Tensor& grad_output,  // [S, B, hidden]
                          StageTensors* stages = nullptr);
// The same bits, using up fwd and grad_output: each tensor is freed as soon as the backward is done with
// it (at real sizes a GB less at the peak). grad_output is left empty and fwd with only out, h and in_proj.
LayerGrads layer_backward_freeing(const LayerConfig& config, const LayerParams& params, LayerForward& fwd,
                                  Tensor& grad_output, StageTensors* stages = nullptr);

// The layer's forward and backward together, one GVA group of heads at a time (`groups` of them, each
// Hk/groups key heads with their value heads): only one group's mixer activations exist at once and
// x = rmsnorm(h) * ln_w is recomputed where needed, so the peak memory is the whole-layer tensors h,
// grad_output, out, dP and out_norm's terms plus one group's. The same bits as layer_forward + layer_backward: each
// GEMM element's chain is unchanged (out accumulates over the groups' columns of W_out in order, dP W_in runs once at
// the end) and out_norm.weight's gradient sums its (token, head) terms in the whole layer's order.
struct GroupedRun {
  Tensor out;  // [S, B, hidden]
  LayerGrads grads;
};
// x's projections and the end's dP W_in, dW_in and out_norm sums run `row_block` rows at a time (2048 at
// real scale; tests pass a few dozen to cross several blocks on a small input), every group over every block.
constexpr std::int64_t kGroupedRowBlock = 2048;
GroupedRun layer_run_grouped(const LayerConfig& config, const LayerParams& params, Tensor hidden_states,
                             Tensor grad_output, const CuSeqlens& cu_seqlens, const LayerOptions& options,
                             std::int64_t groups, std::int64_t row_block = kGroupedRowBlock);

// Throws ConfigError for a hidden_states shape or cu_seqlens that do not fit `config` (THD needs
// B == 1 and cu_seqlens from 0, non-decreasing, ending at T).
void validate_layer_input(const LayerConfig& config, const Tensor& hidden_states, const CuSeqlens& cu_seqlens);

}  // namespace gdnv::ref
