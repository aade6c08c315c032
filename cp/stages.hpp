#pragma once
// The three stages of the layer (docs/DESIGN.md §1.3) on a Backend, shared by every CP mode; the modes put
// their communication between them.
//   in_proj   (token-local)   p = (rmsnorm(h) * ln_w) W_in^T, sections q,k,v,z,beta,alpha
//   mixer     (per sequence)  conv+SiLU over [q,k,v] -> gates -> core (L2 norm in kernel) ->
//                             y = rmsnorm_per_head(o) * out_norm_w * silu(z)
//   out_proj  (token-local)   out = y W_out^T
#include <cstdint>

#include "cp/backend.hpp"
#include "cp/stage_record.hpp"

namespace gdnv::cp {

// Heads the mixer computes on this rank (TP-local, and under headwise a CP rank's slice).
struct MixerGeometry {
  std::int64_t Hk, Hv, dk, dv, W;
  double eps;    // out_norm epsilon
  double scale;  // core scale, 1/sqrt(dk)

  std::int64_t qk_dim() const { return Hk * dk; }
  std::int64_t v_dim() const { return Hv * dv; }
  std::int64_t conv_dim() const { return 2 * qk_dim() + v_dim(); }
  std::int64_t in_dim() const { return conv_dim() + v_dim() + 2 * Hv; }                 // the mixer's slice of p
  MixerGeometry split(int c) const { return {Hk / c, Hv / c, dk, dv, W, eps, scale}; }  // 1/c of the heads
};

struct ProjParams {
  Buffer ln_w;      // [hidden]
  Buffer in_proj;   // [P, hidden]  rows in the order the mode consumes them
  Buffer out_proj;  // [hidden, Hv*dv]
  double eps;
};

struct MixerParams {
  MixerGeometry geo;
  Buffer conv_w;    // [conv_dim, W]
  Buffer conv_b;    // [conv_dim] or empty
  Buffer A_log;     // [Hv]
  Buffer dt_bias;   // [Hv]
  Buffer out_norm;  // [dv]
  // Column indices (I64, on the backend) of the sections in p and of q, k, v in the conv output.
  Buffer cols_qkv, cols_z, cols_b, cols_a, cols_q, cols_k, cols_v;
};

// Uploads the section column indices of `geo` into params (once per geometry).
void plan_mixer_columns(Backend& backend, MixerParams& params);

struct InProjSaved {
  Buffer hidden;  // [N, hidden]
  Buffer x;       // [N, hidden] rmsnorm(hidden) * ln_w
  Buffer rstd;    // [N]
};
Buffer in_proj_forward(Backend& be, const ProjParams& pp, const Buffer& hidden, InProjSaved& saved);  // [N, P]
struct InProjGrads {
  Buffer dhidden, d_ln_w, d_in_proj;
};
// dp [N, P]; `reduce_dx` all-reduces d(rmsnorm output) over TP before the norm's backward (nullptr: none).
// With a tap: records stage_grad::in_proj (dp) and stage_grad::x_norm.
InProjGrads in_proj_backward(Backend& be, const ProjParams& pp, const InProjSaved& saved, const Buffer& dp,
                             comm::Communicator* tp_group, const StageTap& tap = StageTap{});

struct MixerSaved {
  Buffer p, qkv, conv, q, k, v, z, a, b, o, norm_rstd;
  Gates gates;
  const Varlen* seqs = nullptr;
  Buffer halo, h0;
};
struct MixerOut {
  Buffer y;            // [N, Hv*dv]
  Buffer final_state;  // [Hv, dk, dv] of the last sequence
};
MixerOut mixer_forward(Backend& be, const MixerParams& mp, const Buffer& p /*[N, in_dim]*/, const Varlen& seqs,
                       const Buffer& halo, const Buffer& h0, MixerSaved& saved);
// mixer_forward in two halves, so chunkwise CP can fold the core's initial state in between:
// conv + gates (everything the core reads) into `saved`, then the core from h0 and the gated norm.
void mixer_core_inputs(Backend& be, const MixerParams& mp, const Buffer& p, const Varlen& seqs, const Buffer& halo,
                       MixerSaved& saved);
MixerOut mixer_core(Backend& be, const MixerParams& mp, const Buffer& h0, MixerSaved& saved);
// The core's arguments as saved by the forward (valid while `saved` lives).
GdrArgs core_args(const MixerParams& mp, const MixerSaved& saved);
struct MixerGrads {
  Buffer dp;  // [N, in_dim]
  Buffer d_conv_w, d_conv_b, d_A_log, d_dt_bias, d_out_norm;
  Buffer dhalo, dh0;
};
// Records the mixer's stages (conv, q, k, v, g, beta, core, gated_norm) of a finished mixer forward.
void tap_mixer_forward(const StageTap& tap, const MixerSaved& saved, const Buffer& y);
// With a tap, the backward halves record the mixer's stage gradients.
MixerGrads mixer_backward(Backend& be, const MixerParams& mp, const MixerSaved& saved, const Buffer& dy /*[N, Hv*dv]*/,
                          const Buffer& dht, const StageTap& tap = StageTap{});
// mixer_backward in two halves: the gated norm's backward (whose d_o chunkwise CP folds into the last
// sequence's dht), then the rest from dht.
GatedNormGrads mixer_norm_backward(Backend& be, const MixerParams& mp, const MixerSaved& saved, const Buffer& dy,
                                   const StageTap& tap = StageTap{});
MixerGrads mixer_core_backward(Backend& be, const MixerParams& mp, const MixerSaved& saved, const GatedNormGrads& norm,
                               const Buffer& dht, const StageTap& tap = StageTap{});

}  // namespace gdnv::cp
