// headwise (Ulysses, docs/DESIGN.md §3): in_proj on the local tokens with its rows permuted so CP rank j's
// sections form column block j; one all-to-all sends block j to rank j (tokens in, heads out); the
// received rows, source-rank-major, are reordered to natural order; the mixer runs on whole sequences
// for rank j's heads; the reverse reorder and all-to-all bring y back for out_proj. Backward mirrors it.
#include "cp/exchanges.hpp"
#include "cp/modes.hpp"

namespace gdnv::cp {

// x [N_loc, cp*E] (block j for rank j) -> this rank's block of every rank's tokens, natural order [T, E].
Buffer scatter_heads(Backend& be, const MicroBatch& mb, const Buffer& x) {
  const std::int64_t N = mb.local_tokens, c = mb.cp_size, E = x.dim(1) / c, T = mb.full.tokens();
  Buffer send = be.gather_rows(x.reshaped({N * c, E}), mb.to_peer_major);  // [cp, N_loc, E]
  Buffer recv = be.alloc(x.dtype(), {T, E});
  const std::vector<std::int64_t> send_counts(static_cast<std::size_t>(c), N * E);
  mb.cp->all_to_all_v(send.view(), send_counts, recv.mut(), mb.element_counts(E));
  return be.gather_rows(recv, mb.natural_from_received);
}

// Inverse of scatter_heads: y [T, E] natural -> [N_loc, cp*E] with rank j's block at columns j*E.
Buffer gather_heads(Backend& be, const MicroBatch& mb, const Buffer& y) {
  const std::int64_t N = mb.local_tokens, c = mb.cp_size, E = y.dim(1);
  Buffer send = be.gather_rows(y, mb.received_from_natural);  // source-rank-major: peer p's tokens
  Buffer recv = be.alloc(y.dtype(), {c * N, E});
  const std::vector<std::int64_t> recv_counts(static_cast<std::size_t>(c), N * E);
  mb.cp->all_to_all_v(send.view(), mb.element_counts(E), recv.mut(), recv_counts);
  return be.gather_rows(recv, mb.from_peer_major).reshaped({N, c * E});
}

Buffer headwise_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx) {
  const MicroBatch& mb = *ctx.mb;
  const Buffer p = in_proj_forward(parts.be, parts.proj, hidden, ctx.in);
  ctx.tap("stage::x_norm", ctx.in.x, StageRows::Proj, StageCols::Hidden);
  ctx.tap("stage::in_proj", p, StageRows::Proj, StageCols::InProj);
  const Buffer p_heads = scatter_heads(parts.be, mb, p);
  const Buffer y_heads = mixer_forward(parts.be, parts.mixer, p_heads, mb.full, {}, {}, ctx.mix).y;
  tap_mixer_forward(ctx.tap, ctx.mix, y_heads);
  ctx.y = gather_heads(parts.be, mb, y_heads);
  return out_proj_forward(parts, ctx.y);
}

LocalGrads headwise_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout) {
  const MicroBatch& mb = *ctx.mb;
  LinearGrads out = parts.be.linear_backward(dout, ctx.y, parts.proj.out_proj);
  const Buffer dy_heads = scatter_heads(parts.be, mb, out.dx);
  MixerGrads mixer = mixer_backward(parts.be, parts.mixer, ctx.mix, dy_heads, {}, ctx.tap);
  const Buffer dp = gather_heads(parts.be, mb, mixer.dp);
  InProjGrads in = in_proj_backward(parts.be, parts.proj, ctx.in, dp, parts.tp, ctx.tap);
  return {in.dhidden, in.d_ln_w, in.d_in_proj, out.dw, mixer};
}

}  // namespace gdnv::cp
