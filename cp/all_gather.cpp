// all_gather (THD, docs/DESIGN.md §3): all-gather the zigzag shards, reorder to whole sequences, compute the
// layer redundantly on every rank, keep this rank's rows. Backward: every rank back-propagates its own
// rows' gradient through the whole layer; the gradient of the gathered input is reduce-scattered (sum)
// back to the shards' owners. Without that reduce-scatter input gradients are wrong.
#include "cp/exchanges.hpp"
#include "cp/modes.hpp"
#include "faults/seams.hpp"

namespace gdnv::cp {

Buffer gather_shards(Backend& be, const MicroBatch& mb, const Buffer& hidden) {
  const std::int64_t D = hidden.dim(1);
  Buffer gathered = be.alloc(hidden.dtype(), {mb.full.tokens(), D});
  mb.cp->all_gather_v(hidden.view(), gathered.mut(), mb.element_counts(D));
  return be.gather_rows(gathered, mb.natural_from_received);
}

namespace {

// The rows the reduce-scatter reads: source-rank-major, undoing the forward's reorder to natural order
// (under the planted fault: natural order, the reorder not undone).
Buffer received_order(Backend& be, const MicroBatch& mb, const Buffer& dgathered) {
  if (faults::all_gather_grad_unreordered()) return dgathered;
  return be.gather_rows(dgathered, mb.received_from_natural);
}

}  // namespace

Buffer reduce_scatter_shards(Backend& be, const MicroBatch& mb, const Buffer& dgathered) {
  if (faults::all_gather_grad_unreduced())
    return be.gather_rows(dgathered, mb.own_positions);  // this rank's own contribution only
  const std::int64_t D = dgathered.dim(1);
  Buffer dhidden = be.alloc(dgathered.dtype(), {mb.local_tokens, D});
  mb.cp->reduce_scatter_v(received_order(be, mb, dgathered).view(), dhidden.mut(), mb.element_counts(D));
  return dhidden;
}

Buffer all_gather_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx) {
  const MicroBatch& mb = *ctx.mb;
  const Buffer hidden_full = gather_shards(parts.be, mb, hidden);
  const Buffer out_full = plain_forward(parts, mb.full, hidden_full, ctx);
  return parts.be.gather_rows(out_full, mb.own_positions);
}

LocalGrads all_gather_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout) {
  const MicroBatch& mb = *ctx.mb;
  const std::int64_t D = dout.dim(1);
  Buffer dout_full = parts.be.alloc(dout.dtype(), {mb.full.tokens(), D});
  parts.be.scatter_rows(dout, mb.own_positions, dout_full);
  LocalGrads grads = plain_backward(parts, ctx, dout_full);
  grads.dhidden = reduce_scatter_shards(parts.be, mb, grads.dhidden);
  return grads;
}

}  // namespace gdnv::cp
