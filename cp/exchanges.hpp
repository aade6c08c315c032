#pragma once
// The modes' hand-written data exchanges as linear maps, each beside the map its backward applies (its
// adjoint): declared here so the gate's "adjoint dot-products" step (docs/DESIGN.md §11) can check
// <A x, y> = <x, A^T y> for each pair on an in-process world. Collective over mb.cp.
#include "cp/micro_batch.hpp"
#include "cp/stages.hpp"

namespace gdnv::cp {

// chunkwise (cp/chunkwise.cpp). The route: zigzag rows [N_loc, D] -> the contiguous span's rows [T/W, D],
// and back.
Buffer to_contiguous(Backend& be, const MicroBatch& mb, const Buffer& x);
Buffer to_zigzag(Backend& be, const MicroBatch& mb, const Buffer& x);
// The conv halo [W_conv - 1, conv_dim] read from every rank's tail rows of p [N, in_dim] (empty when no
// rank needs one), and its gradient dhalo returned to those rows of dp, added to what dp holds.
Buffer exchange_halo(Backend& be, const MicroBatch& mb, const MixerParams& mp, const Buffer& p);
void return_halo_grad(Backend& be, const MicroBatch& mb, const MixerParams& mp, const Buffer& dhalo, Buffer& dp);

// headwise (cp/headwise.cpp): x [N_loc, cp*E] (block j for rank j) -> this rank's block of every token,
// natural order [T, E]; gather_heads is its inverse (a permutation, so also its adjoint).
Buffer scatter_heads(Backend& be, const MicroBatch& mb, const Buffer& x);
Buffer gather_heads(Backend& be, const MicroBatch& mb, const Buffer& y);

// all_gather (cp/all_gather.cpp): every rank's zigzag shard [N_loc, D] -> every token in natural order
// [T, D] on every rank; its adjoint sums every rank's gradient of those tokens back to the shards' owners.
Buffer gather_shards(Backend& be, const MicroBatch& mb, const Buffer& hidden);
Buffer reduce_scatter_shards(Backend& be, const MicroBatch& mb, const Buffer& dgathered);

}  // namespace gdnv::cp
