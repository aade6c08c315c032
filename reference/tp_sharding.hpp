#pragma once
// Tensor parallelism of the GatedDeltaNet layer (docs/DESIGN.md §1.3). TP rank r of t owns key heads
// [r*Hk/t, (r+1)*Hk/t) and value heads [r*Hv/t, (r+1)*Hv/t):
//   in_proj.weight   column-parallel, each section q,k,v,z,beta,alpha cut by head (rows)
//   conv1d.*         each channel section q,k,v cut by head
//   A_log, dt_bias   cut by value head
//   out_proj.weight  row-parallel: cut by input column, each rank's output is a partial sum
//   in_proj.layer_norm_weight, out_norm.weight  replicated
// A rank's shard with tp_local_config() is an ordinary layer: layer_forward on it gives the rank's
// out_proj partial, and layer_backward the rank's grad_hidden partial and parameter gradients.
// The full layout is section-major (q of all heads, then k, ...), like Megatron's sharded checkpoint
// (in_proj.weight.query, ...), not the rank-major concatenation of the rank-local weights.
#include <cstdint>
#include <vector>

#include "reference/layer_config.hpp"
#include "reference/layer_params.hpp"

namespace gdnv::ref {

// Hk/t key heads and Hv/t value heads. ConfigError when t < 1 or t does not divide Hk and Hv.
LayerConfig tp_local_config(const LayerConfig& config, std::int64_t tp_size);

// Rank `tp_rank`'s slice of every parameter (params validated against `config`, the full layer).
LayerParams tp_shard(const LayerConfig& config, const LayerParams& params, std::int64_t tp_size, std::int64_t tp_rank);

// Writes rank `tp_rank`'s shard of the sharded parameter `name` (or of its gradient) into its place in
// `full`, the whole tensor: tp_unshard for one rank and one parameter.
void tp_place(const LayerConfig& config, const std::string& name, const Tensor& shard, std::int64_t tp_size,
              std::int64_t tp_rank, Tensor& full);

// Inverse of tp_shard over all ranks (shards[r] from rank r). Replicated parameters must agree
// bit for bit across ranks.
LayerParams tp_unshard(const LayerConfig& config, const std::vector<LayerParams>& shards);

// Full parameter gradients from the ranks' gradients: sharded ones are assembled as by tp_unshard,
// replicated ones summed over ranks (each rank's is the partial from its own heads; Megatron's TP
// all-reduce).
LayerParams tp_reduce_grads(const LayerConfig& config, const std::vector<LayerParams>& grad_shards);

// Sum of the ranks' partial tensors in rank order: the all-reduce of out (row-parallel out_proj)
// and of grad_hidden (column-parallel in_proj).
Tensor tp_sum(const std::vector<Tensor>& partials);

}  // namespace gdnv::ref
