// all_gather (THD, docs/DESIGN.md §3): all-gather the zigzag shards, reorder to whole sequences, compute the
// layer redundantly on every rank, keep this rank's rows. Backward: every rank back-propagates its own
// rows' gradient through the whole layer; the gradient of the gathered input is reduce-scattered (sum)
// back to the shards' owners. Without that reduce-scatter input gradients are wrong.
#include "core/faults.hpp"
#include "cp/modes.hpp"

namespace gdnv::cp {
Buffer all_gather_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx) {
  const MicroBatch& mb = *ctx.mb;
  const std::int64_t D = hidden.dim(1);
  Buffer gathered = parts.be.alloc(hidden.dtype(), {mb.full.tokens(), D});
  mb.cp->all_gather_v(hidden.view(), gathered.mut(), mb.element_counts(D));
  const Buffer hidden_full = parts.be.gather_rows(gathered, mb.natural_from_received);
  const Buffer out_full = plain_forward(parts, mb.full, hidden_full, ctx);
  return parts.be.gather_rows(out_full, mb.own_positions);
}

LocalGrads all_gather_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout) {
  const MicroBatch& mb = *ctx.mb;
  const std::int64_t D = dout.dim(1);
  Buffer dout_full = parts.be.alloc(dout.dtype(), {mb.full.tokens(), D});
  parts.be.scatter_rows(dout, mb.own_positions, dout_full);
  LocalGrads grads = plain_backward(parts, ctx, dout_full);
  const Buffer dhidden_received = parts.be.gather_rows(grads.dhidden, mb.received_from_natural);
  if (fault_active(Fault::AllGatherNoReduceScatter)) {
    grads.dhidden = parts.be.gather_rows(grads.dhidden, mb.own_positions);  // this rank's own contribution only
    return grads;
  }
  grads.dhidden = parts.be.alloc(dout.dtype(), {mb.local_tokens, D});
  mb.cp->reduce_scatter_v(dhidden_received.view(), grads.dhidden.mut(), mb.element_counts(D));
  return grads;
}

}  // namespace gdnv::cp
