"""Adapter for flash-linear-attention's `GatedDeltaNet` layer (fla.layers.gated_deltanet).

Files: `mapping` (the pair of modules and the names below), `torch_path` (the torch core), `adapter`
(the `Adapter` class), `kcp` and `kcp_layer` (FLA's context parallelism on gloo ranks, `--world N`).

FLA's layer has separate projections and short convolutions, and no pre-norm: its model block puts
`attn_norm` (a plain RMSNorm, weight w, not zero-centred) before it. `FlaGdn` pairs the two under the
block's own names (`attn_norm`, `attn`), so its state dict keys are those of FLA's `GatedDeltaNetBlock`
less the MLP. The mapping to Megatron's names (docs/DESIGN.md §1.3):

| Megatron | FLA |
|---|---|
| `in_proj.layer_norm_weight` | `attn_norm.weight` |
| `in_proj.weight` rows q, k, v, z, beta, alpha | `attn.q_proj`, `k_proj`, `v_proj`, `g_proj`, `b_proj`, `a_proj` `.weight` |
| `conv1d.weight` channels q, k, v (and `conv1d.bias`) | `attn.q_conv1d`, `k_conv1d`, `v_conv1d` `.weight` (`.bias`) |
| `A_log`, `dt_bias` | `attn.A_log`, `attn.dt_bias` |
| `out_norm.weight` | `attn.o_norm.weight` |
| `out_proj.weight` | `attn.o_proj.weight` |

Geometry: `num_heads` = Hk, `num_v_heads` = Hv, `head_dim` = dk, `head_dim * expand_v` = dv, `conv_size`,
`norm_eps` = `layernorm_epsilon` (both norms). Options whose math differs from Megatron's layer are
refused (`unmappable`).

Every compute part of FLA's layer forward is a Triton kernel (the short convolutions' `causal_conv1d`,
the in-kernel L2 norm, `chunk_gated_delta_rule`, `FusedRMSNormGated`). Two cores (`--core`):

- `triton` (the default): FLA's own `GatedDeltaNet.forward` with `cu_seqlens`, its Triton kernels
  compiled on a CUDA device, or run by Triton's interpreter on a CPU (`gdn_verify.triton_cpu`, enabled by
  `prepare` before FLA is imported); path "fla-triton". FLA forms each chunk's decays from chunk-local
  fp32 cumsums of g, so the image declares the decay class `cumsum-decay` (docs/DESIGN.md §4).
  No stages: g and beta are formed inside the Triton core (`use_gate_in_kernel`,
  `use_beta_sigmoid_in_kernel`), and an image must hold every stage or none.
- `torch`: the layer's own torch submodules (`attn_norm`, the projections, each `ShortConvolution` as
  the `nn.Conv1d` it is) and FLA's pure-torch references (`naive_recurrent_gated_delta_rule`,
  `rms_norm_ref`), one packed sequence at a time, in GatedDeltaNet's forward order; path "torch",
  decay class `product-of-decays` (the recurrent form multiplies one decay per token).

FLA computes in fp32 on either core.
"""  # noqa: E501 (a Markdown table, one row a line)

from gdn_verify.adapters.fla.adapter import FlaAdapter
from gdn_verify.adapters.fla.mapping import FlaAdapterError, FlaGdn, geometry_of

__all__ = ["FlaAdapter", "FlaAdapterError", "FlaGdn", "geometry_of"]
