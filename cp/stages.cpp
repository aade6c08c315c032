#include "cp/stages.hpp"

#include <numeric>

namespace gdnv::cp {
namespace {

Buffer index_buffer(Backend& be, std::int64_t begin, std::int64_t count) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(count));
  std::iota(idx.begin(), idx.end(), begin);
  return upload_index(be, idx);
}

}  // namespace

void plan_mixer_columns(Backend& be, MixerParams& mp) {
  const MixerGeometry& g = mp.geo;
  const std::int64_t c = g.conv_dim(), v = g.v_dim();
  mp.cols_qkv = index_buffer(be, 0, c);
  mp.cols_z = index_buffer(be, c, v);
  mp.cols_b = index_buffer(be, c + v, g.Hv);
  mp.cols_a = index_buffer(be, c + v + g.Hv, g.Hv);
  mp.cols_q = index_buffer(be, 0, g.qk_dim());
  mp.cols_k = index_buffer(be, g.qk_dim(), g.qk_dim());
  mp.cols_v = index_buffer(be, 2 * g.qk_dim(), v);
}

Buffer in_proj_forward(Backend& be, const ProjParams& pp, const Buffer& hidden, InProjSaved& saved) {
  RmsNormOut norm = be.rmsnorm(hidden, pp.ln_w, pp.eps);
  saved = {hidden, norm.y, norm.rstd};
  return be.linear(norm.y, pp.in_proj);
}

InProjGrads in_proj_backward(Backend& be, const ProjParams& pp, const InProjSaved& saved, const Buffer& dp,
                             comm::Communicator* tp_group, const StageTap& tap) {
  LinearGrads lin = be.linear_backward(dp, saved.x, pp.in_proj);
  if (tp_group && tp_group->size() > 1) tp_group->all_reduce(lin.dx.mut());  // column-parallel in_proj
  tap("stage_grad::in_proj", dp, StageRows::Proj, StageCols::InProj);
  tap("stage_grad::x_norm", lin.dx, StageRows::Proj, StageCols::Hidden);
  RmsNormGrads norm = be.rmsnorm_backward(lin.dx, saved.hidden, pp.ln_w, saved.rstd);
  return {norm.dx, norm.dw, lin.dw};
}

void mixer_core_inputs(Backend& be, const MixerParams& mp, const Buffer& p, const Varlen& seqs, const Buffer& halo,
                       MixerSaved& s) {
  const MixerGeometry& g = mp.geo;
  const std::int64_t N = p.dim(0);
  s.p = p;
  s.seqs = &seqs;
  s.halo = halo;
  s.qkv = be.gather_columns(p, mp.cols_qkv);
  s.z = be.gather_columns(p, mp.cols_z).reshaped({N, g.Hv, g.dv});
  s.b = be.gather_columns(p, mp.cols_b);
  s.a = be.gather_columns(p, mp.cols_a);
  s.conv = be.conv1d({s.qkv, mp.conv_w, mp.conv_b.empty() ? nullptr : &mp.conv_b, seqs, halo});
  s.q = be.gather_columns(s.conv, mp.cols_q).reshaped({N, g.Hk, g.dk});
  s.k = be.gather_columns(s.conv, mp.cols_k).reshaped({N, g.Hk, g.dk});
  s.v = be.gather_columns(s.conv, mp.cols_v).reshaped({N, g.Hv, g.dv});
  s.gates = be.gates(s.a, s.b, mp.A_log, mp.dt_bias);
}

GdrArgs core_args(const MixerParams& mp, const MixerSaved& s) {
  return {s.q, s.k, s.v, s.gates.g, s.gates.beta, *s.seqs, s.h0, mp.geo.scale};
}

MixerOut mixer_core(Backend& be, const MixerParams& mp, const Buffer& h0, MixerSaved& s) {
  s.h0 = h0;
  GdrOut core = be.gdr(core_args(mp, s));
  s.o = core.o;
  GatedNormOut norm = be.gated_norm(core.o, s.z, mp.out_norm, mp.geo.eps);
  s.norm_rstd = norm.rstd;
  return {norm.y.reshaped({s.p.dim(0), mp.geo.v_dim()}), core.final_state};
}

void tap_mixer_forward(const StageTap& tap, const MixerSaved& s, const Buffer& y) {
  if (!tap) return;
  tap("stage::conv", s.conv, StageRows::Mixer, StageCols::Conv);
  tap("stage::q", s.q, StageRows::Mixer, StageCols::Q);
  tap("stage::k", s.k, StageRows::Mixer, StageCols::K);
  tap("stage::v", s.v, StageRows::Mixer, StageCols::V);
  tap("stage::g", s.gates.g, StageRows::Mixer, StageCols::Heads);
  tap("stage::beta", s.gates.beta, StageRows::Mixer, StageCols::Heads);
  tap("stage::core", s.o, StageRows::Mixer, StageCols::V);
  tap("stage::gated_norm", y, StageRows::Mixer, StageCols::V);
}

MixerOut mixer_forward(Backend& be, const MixerParams& mp, const Buffer& p, const Varlen& seqs, const Buffer& halo,
                       const Buffer& h0, MixerSaved& s) {
  mixer_core_inputs(be, mp, p, seqs, halo, s);
  return mixer_core(be, mp, h0, s);
}

GatedNormGrads mixer_norm_backward(Backend& be, const MixerParams& mp, const MixerSaved& s, const Buffer& dy,
                                   const StageTap& tap) {
  const MixerGeometry& g = mp.geo;
  GatedNormGrads norm =
      be.gated_norm_backward(dy.reshaped({s.p.dim(0), g.Hv, g.dv}), s.o, s.z, mp.out_norm, s.norm_rstd, g.eps);
  tap("stage_grad::gated_norm", dy, StageRows::Mixer, StageCols::V);
  tap("stage_grad::core", norm.d_o, StageRows::Mixer, StageCols::V);
  return norm;
}

MixerGrads mixer_core_backward(Backend& be, const MixerParams& mp, const MixerSaved& s, const GatedNormGrads& norm,
                               const Buffer& dht, const StageTap& tap) {
  const MixerGeometry& g = mp.geo;
  const std::int64_t N = s.p.dim(0);
  GdrGrads core = be.gdr_backward(core_args(mp, s), norm.d_o, dht);
  GateGrads gates = be.gates_backward(core.dg, core.dbeta, s.a, s.b, mp.A_log, mp.dt_bias);

  Buffer dconv = be.alloc(be.dtype(), {N, g.conv_dim()});
  be.scatter_columns(core.dq.reshaped({N, g.qk_dim()}), mp.cols_q, dconv);
  be.scatter_columns(core.dk.reshaped({N, g.qk_dim()}), mp.cols_k, dconv);
  be.scatter_columns(core.dv.reshaped({N, g.v_dim()}), mp.cols_v, dconv);
  if (tap) {
    tap("stage_grad::beta", core.dbeta, StageRows::Mixer, StageCols::Heads);
    tap("stage_grad::g", core.dg, StageRows::Mixer, StageCols::Heads);
    tap("stage_grad::v", core.dv, StageRows::Mixer, StageCols::V);
    tap("stage_grad::conv_k", core.dk, StageRows::Mixer, StageCols::K);
    tap("stage_grad::conv_q", core.dq, StageRows::Mixer, StageCols::Q);
    tap("stage_grad::conv", dconv, StageRows::Mixer, StageCols::Conv);
  }
  ConvGrads conv =
      be.conv1d_backward({s.qkv, mp.conv_w, mp.conv_b.empty() ? nullptr : &mp.conv_b, *s.seqs, s.halo}, dconv);

  Buffer dp = be.alloc(be.dtype(), {N, g.in_dim()});
  be.scatter_columns(conv.dx, mp.cols_qkv, dp);
  be.scatter_columns(norm.dz.reshaped({N, g.v_dim()}), mp.cols_z, dp);
  be.scatter_columns(gates.db, mp.cols_b, dp);
  be.scatter_columns(gates.da, mp.cols_a, dp);
  return {dp, conv.dw, conv.dbias, gates.dA_log, gates.ddt_bias, norm.dw, conv.dhalo, core.dh0};
}

MixerGrads mixer_backward(Backend& be, const MixerParams& mp, const MixerSaved& s, const Buffer& dy, const Buffer& dht,
                          const StageTap& tap) {
  return mixer_core_backward(be, mp, s, mixer_norm_backward(be, mp, s, dy, tap), dht, tap);
}

}  // namespace gdnv::cp
