// chunkwise (FLA KCP, docs/DESIGN.md §3): hidden_states swap zigzag -> contiguous through the micro-batch's
// route (one all-to-all), each rank runs the layer on its contiguous span, and out swaps back. Two
// things cross span boundaries:
//   conv  the W_conv - 1 tokens before the span, possibly held by several earlier ranks: every rank's
//         tail rows of the conv input are all-gathered; backward reduce-scatters the halo's gradient
//         back to the owners.
//   core  the state entering the first local sequence: every rank's span map (M, h_ext) of its last
//         local sequence is all-gathered (state dtype: fp32, fp64 in fp64) and folded S = M_j S + h_j
//         over the ranks the first local sequence continues from. Backward mirrors it with the backward
//         span maps of the first local sequences, folded from later ranks into the last local sequence's
//         dht.
// Swapping hidden_states rather than the projection output moves 2 x hidden values per token instead
// of the projection width. The fold's arithmetic, per backend and in the oracle: cp/README.md.
#include "cp/exchanges.hpp"
#include "cp/modes.hpp"
#include "faults/seams.hpp"

namespace gdnv::cp {

namespace {

// The rows to_zigzag sends: contiguous row index[k] as send row k, or under the planted fault row k
// placed at index[k] (the forward's placement, not inverted).
Buffer route_send_rows(Backend& be, const ChunkwisePlan& plan, const Buffer& x) {
  if (!faults::route_return_uninverted()) return be.gather_rows(x, plan.route_index);
  Buffer send = be.alloc(x.dtype(), x.shape());
  be.scatter_rows(x, plan.route_index, send);
  return send;
}

// The halo gradient to return: all of it, or under the planted fault only its last T/W rows, the most
// the previous rank's span holds (rows read from ranks further back get no gradient).
Buffer returned_dhalo(Backend& be, const MicroBatch& mb, const Buffer& dhalo) {
  const std::int64_t rows = dhalo.dim(0), returned = faults::dhalo_rows_returned(rows, mb.cu.back() / mb.cp_size);
  if (returned == rows) return dhalo;
  std::vector<std::int64_t> last;
  for (std::int64_t i = rows - returned; i < rows; ++i) last.push_back(i);
  const Buffer index = upload_index(be, last);
  Buffer kept = be.alloc(dhalo.dtype(), dhalo.shape());
  be.scatter_rows(be.gather_rows(dhalo, index), index, kept);
  return kept;
}

}  // namespace

// Zigzag rows [N_loc, D] -> the contiguous span's rows [T/W, D].
Buffer to_contiguous(Backend& be, const MicroBatch& mb, const Buffer& x) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  const std::int64_t D = x.dim(1), n = plan.span.tokens();
  Buffer recv = be.alloc(x.dtype(), {n, D});
  mb.cp->all_to_all_v(x.view(), scaled_counts(plan.send_counts, D), recv.mut(), scaled_counts(plan.recv_counts, D));
  Buffer out = be.alloc(x.dtype(), {n, D});
  be.scatter_rows(recv, plan.route_index, out);
  return out;
}

// The mirror: the same route, send and receive counts swapped.
Buffer to_zigzag(Backend& be, const MicroBatch& mb, const Buffer& x) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  const std::int64_t D = x.dim(1);
  const Buffer send = route_send_rows(be, plan, x);
  Buffer out = be.alloc(x.dtype(), {mb.local_tokens, D});
  mb.cp->all_to_all_v(send.view(), scaled_counts(plan.recv_counts, D), out.mut(), scaled_counts(plan.send_counts, D));
  return out;
}

// The conv input's halo [W_conv - 1, D] before the first local sequence; empty when it starts here.
Buffer exchange_halo(Backend& be, const MicroBatch& mb, const MixerParams& mp, const Buffer& p) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  if (!plan.halo_exchange) return {};
  const Buffer tail = be.gather_columns(be.gather_rows(p, plan.tail_rows), mp.cols_qkv);
  const std::int64_t D = tail.dim(1);
  Buffer tails = be.alloc(tail.dtype(), {mb.cp_size * plan.tail, D});
  mb.cp->all_gather(tail.view(), tails.mut());
  if (plan.halo_from.empty()) return {};
  Buffer halo = be.alloc(tail.dtype(), {mp.geo.W - 1, D});
  be.scatter_rows(be.gather_rows(tails, plan.halo_from), plan.halo_rows, halo);
  return halo;
}

// Each rank's halo gradient goes to the tails it was read from; reduce-scatter sums every rank's
// contributions to this rank's tail, which are added to dp's conv-input columns.
void return_halo_grad(Backend& be, const MicroBatch& mb, const MixerParams& mp, const Buffer& dhalo, Buffer& dp) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  if (!plan.halo_exchange) return;
  const std::int64_t D = mp.geo.conv_dim();
  Buffer send = be.alloc(dp.dtype(), {mb.cp_size * plan.tail, D});
  if (!plan.halo_from.empty())
    be.scatter_rows(be.gather_rows(returned_dhalo(be, mb, dhalo), plan.halo_rows), plan.halo_from, send);
  Buffer dtail = be.alloc(dp.dtype(), {plan.tail, D});
  mb.cp->reduce_scatter(send.view(), dtail.mut());
  Buffer rows = be.gather_rows(dp, plan.tail_rows);
  Buffer add = be.alloc(dp.dtype(), rows.shape());
  be.scatter_columns(dtail, mp.cols_qkv, add);
  be.accumulate(rows, add);
  be.scatter_rows(rows, plan.tail_rows, dp);
}

namespace {

// A span map or folded state as exchanged: unchanged, or rounded to bf16 under the planted fault.
Buffer as_exchanged(Backend& be, const Buffer& x) {
  const DType exchanged = faults::state_exchange_dtype(be.state_dtype());
  if (exchanged == be.state_dtype() || x.empty()) return x;
  return be.upload(be.download(x).to(exchanged), be.state_dtype());
}

// Every rank's span map [Hv, dk, dv+dk] (zeros where no other rank reads it) -> [cp, Hv, dk, dv+dk].
Buffer exchange_maps(Backend& be, const MicroBatch& mb, const Buffer& local) {
  Shape shape = local.shape();
  shape.insert(shape.begin(), mb.cp_size);
  Buffer maps = be.alloc(local.dtype(), shape);
  mb.cp->all_gather(as_exchanged(be, local).view(), maps.mut());
  return maps;
}

Buffer zero_map(Backend& be, const MixerParams& mp) {
  return be.alloc(be.state_dtype(), {mp.geo.Hv, mp.geo.dk, mp.geo.dv + mp.geo.dk});
}

Buffer zero_state(Backend& be, const MixerParams& mp) {
  return be.alloc(be.state_dtype(), {mp.geo.Hv, mp.geo.dk, mp.geo.dv});
}

// The state entering the first local sequence (empty: it starts on this rank).
Buffer fold_initial_state(Backend& be, const MicroBatch& mb, const MixerParams& mp, const MixerSaved& saved) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  if (!plan.state_exchange) return {};
  const bool read_by_later = plan.context.post_num_ranks > 0;
  const Buffer local = read_by_later ? be.gdr_last_span_map(core_args(mp, saved)) : zero_map(be, mp);
  const Buffer maps = exchange_maps(be, mb, local);
  const int r = mb.cp_rank, pre = plan.context.pre_num_ranks;
  if (pre == 0) return {};
  return as_exchanged(be, be.fold_span_maps(maps, r - pre, r, FoldDirection::Forward));
}

// The gradient of the last local sequence's final state (empty: it ends on this rank).
Buffer fold_final_state_grad(Backend& be, const MicroBatch& mb, const MixerParams& mp, const MixerSaved& saved,
                             const Buffer& d_o) {
  const ChunkwisePlan& plan = *mb.chunkwise;
  if (!plan.state_exchange) return {};
  const bool read_by_earlier = plan.context.pre_num_ranks > 0;
  const Buffer local = read_by_earlier ? be.gdr_first_backward_span_map(core_args(mp, saved), d_o) : zero_map(be, mp);
  const Buffer maps = exchange_maps(be, mb, local);
  const int r = mb.cp_rank, post = plan.context.post_num_ranks;
  if (post == 0) return {};
  return as_exchanged(be, be.fold_span_maps(maps, r + 1, r + 1 + post, FoldDirection::Backward));
}

}  // namespace

Buffer chunkwise_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx) {
  const MicroBatch& mb = *ctx.mb;
  Backend& be = parts.be;
  const Buffer hidden_span = to_contiguous(be, mb, hidden);
  const Buffer p = in_proj_forward(be, parts.proj, hidden_span, ctx.in);
  ctx.tap("stage::x_norm", ctx.in.x, StageRows::Proj, StageCols::Hidden);
  ctx.tap("stage::in_proj", p, StageRows::Proj, StageCols::InProj);
  const Buffer halo = exchange_halo(be, mb, parts.mixer, p);
  mixer_core_inputs(be, parts.mixer, p, mb.chunkwise->span, halo, ctx.mix);
  const Buffer h0 = fold_initial_state(be, mb, parts.mixer, ctx.mix);
  if (ctx.tap)  // the state entering this rank's first sequence: zero where it starts here
    ctx.tap("stage::boundary_state", h0.empty() ? zero_state(be, parts.mixer) : h0, StageRows::Boundary,
            StageCols::State, mb.cp_rank);
  ctx.y = mixer_core(be, parts.mixer, h0, ctx.mix).y;
  tap_mixer_forward(ctx.tap, ctx.mix, ctx.y);
  const Buffer out_span = out_proj_forward(parts, ctx.y);
  return to_zigzag(be, mb, out_span);
}

LocalGrads chunkwise_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout) {
  const MicroBatch& mb = *ctx.mb;
  Backend& be = parts.be;
  const Buffer dout_span = to_contiguous(be, mb, dout);
  LinearGrads out = be.linear_backward(dout_span, ctx.y, parts.proj.out_proj);
  const GatedNormGrads norm = mixer_norm_backward(be, parts.mixer, ctx.mix, out.dx, ctx.tap);
  const Buffer dht = fold_final_state_grad(be, mb, parts.mixer, ctx.mix, norm.d_o);
  if (ctx.tap && mb.cp_rank + 1 < mb.cp_size)  // the gradient of the state entering the next rank's span
    ctx.tap("stage_grad::boundary_state", dht.empty() ? zero_state(be, parts.mixer) : dht, StageRows::Boundary,
            StageCols::State, mb.cp_rank + 1);
  MixerGrads mixer = mixer_core_backward(be, parts.mixer, ctx.mix, norm, dht, ctx.tap);
  return_halo_grad(be, mb, parts.mixer, mixer.dhalo, mixer.dp);
  InProjGrads in = in_proj_backward(be, parts.proj, ctx.in, mixer.dp, parts.tp, ctx.tap);
  const Buffer dhidden = to_zigzag(be, mb, in.dhidden);
  return {dhidden, in.d_ln_w, in.d_in_proj, out.dw, mixer};
}

}  // namespace gdnv::cp
