// CP=1 (and the whole-sequence compute of all_gather): in_proj -> mixer -> out_proj on every token.
#include "cp/modes.hpp"

namespace gdnv::cp {

Buffer out_proj_forward(const LayerParts& parts, const Buffer& y) {
  Buffer out = parts.be.linear(y, parts.proj.out_proj);
  if (parts.tp && parts.tp->size() > 1) parts.tp->all_reduce(out.mut());
  return out;
}

Buffer plain_forward(const LayerParts& parts, const Varlen& seqs, const Buffer& hidden, Context& ctx) {
  const Buffer p = in_proj_forward(parts.be, parts.proj, hidden, ctx.in);
  ctx.tap("stage::x_norm", ctx.in.x, StageRows::Proj, StageCols::Hidden);
  ctx.tap("stage::in_proj", p, StageRows::Proj, StageCols::InProj);
  ctx.y = mixer_forward(parts.be, parts.mixer, p, seqs, {}, {}, ctx.mix).y;
  tap_mixer_forward(ctx.tap, ctx.mix, ctx.y);
  return out_proj_forward(parts, ctx.y);
}

LocalGrads plain_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout) {
  LinearGrads out = parts.be.linear_backward(dout, ctx.y, parts.proj.out_proj);
  MixerGrads mixer = mixer_backward(parts.be, parts.mixer, ctx.mix, out.dx, {}, ctx.tap);
  InProjGrads in = in_proj_backward(parts.be, parts.proj, ctx.in, mixer.dp, parts.tp, ctx.tap);
  return {in.dhidden, in.d_ln_w, in.d_in_proj, out.dw, mixer};
}

}  // namespace gdnv::cp
