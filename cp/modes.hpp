#pragma once
// The CP modes (docs/DESIGN.md §3), each in its own file, written once against a Backend and a Communicator:
//   cp/plain.cpp       CP=1: the layer on whole sequences
//   cp/headwise.cpp    Ulysses: all-to-all tokens <-> heads, full sequences for 1/cp of the heads
//   cp/chunkwise.cpp   FLA KCP: contiguous spans, conv halo and (M, h_ext) state fold across ranks
//   cp/all_gather.cpp  THD: all-gather the shards, compute everything, keep this rank's shard
// Inputs and outputs are this rank's zigzag rows [N_loc, hidden] (batch-major for SBHD).
#include "cp/micro_batch.hpp"
#include "cp/stages.hpp"

namespace gdnv::cp {

struct LayerParts {
  Backend& be;
  const ProjParams& proj;
  const MixerParams& mixer;  // this rank's mixer slice (headwise: its CP head block)
  comm::Communicator* tp;    // TP group (nullptr: no TP)
};

// What a forward keeps for its backward (autograd's ctx): owned by the caller, never by the layer.
struct Context {
  std::shared_ptr<const MicroBatch> mb;
  InProjSaved in;
  MixerSaved mix;
  Buffer y;  // out_proj input [N, Hv*dv]
  // Stage recording (cp/stage_record.hpp): the caller sets tap.recorder before forward to record; off
  // by default.
  StageTap tap;
};

struct LocalGrads {
  Buffer dhidden;                        // [N_loc, hidden]
  Buffer d_ln_w, d_in_proj, d_out_proj;  // this rank's partial gradients of ProjParams
  MixerGrads mixer;                      // and of its MixerParams slice
};

// out = y W_out^T, partial sums all-reduced over TP (row-parallel out_proj).
Buffer out_proj_forward(const LayerParts& parts, const Buffer& y);

Buffer plain_forward(const LayerParts& parts, const Varlen& seqs, const Buffer& hidden, Context& ctx);
LocalGrads plain_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout);

Buffer headwise_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx);
LocalGrads headwise_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout);

Buffer chunkwise_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx);
LocalGrads chunkwise_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout);

Buffer all_gather_forward(const LayerParts& parts, const Buffer& hidden, Context& ctx);
LocalGrads all_gather_backward(const LayerParts& parts, const Context& ctx, const Buffer& dout);

}  // namespace gdnv::cp
