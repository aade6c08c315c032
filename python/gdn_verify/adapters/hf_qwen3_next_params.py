"""Hugging Face Qwen3-Next's GatedDeltaNet parameters under Megatron's names, both ways (docs/DESIGN.md §1.3).

Mapping (Megatron <-> Hugging Face), r = Hv / Hk value heads per key head:

    in_proj.layer_norm_weight  <-> input_layernorm.weight + 1   (Qwen3NextRMSNorm is zero-centred: x (1 + w))
    in_proj.weight rows, sectioned q | k | v | z | beta | alpha (docs/DESIGN.md §1.3)
        q, k, v, z  <-> linear_attn.in_proj_qkvz.weight, grouped per key head g:
                        q_g (dk rows), k_g (dk), v of value heads g r .. g r + r - 1 (r dv), z of them (r dv)
        beta, alpha <-> linear_attn.in_proj_ba.weight, grouped per key head g: b (r rows), a (r rows)
    conv1d.weight              <-> linear_attn.conv1d.weight (channels q | k | v in both; no bias in HF)
    A_log, dt_bias             <-> linear_attn.A_log, linear_attn.dt_bias
    out_norm.weight            <-> linear_attn.norm.weight (Qwen3NextRMSNormGated: plain weight)
    out_proj.weight            <-> linear_attn.out_proj.weight

The +1 is exact for weights in [0.5, 2] (Sterbenz), so both directions are lossless there, which holds
the cases' weights (in [0.5, 1.5), docs/DESIGN.md §1.3); gradients are not shifted.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gdn_verify import names
from gdn_verify.names import Geometry

NORM = "input_layernorm.weight"
QKVZ = "linear_attn.in_proj_qkvz.weight"
BA = "linear_attn.in_proj_ba.weight"
DIRECT = {  # Megatron name -> Hugging Face name, same tensor
    names.CONV_WEIGHT: "linear_attn.conv1d.weight",
    names.A_LOG: "linear_attn.A_log",
    names.DT_BIAS: "linear_attn.dt_bias",
    names.OUT_NORM: "linear_attn.norm.weight",
    names.OUT_PROJ: "linear_attn.out_proj.weight",
}


def qkvz_rows(geometry: Geometry) -> list[int]:
    """Megatron in_proj rows of in_proj_qkvz's rows, in Hugging Face's per-key-head grouping."""
    g, r = geometry, geometry.Hv // geometry.Hk
    q, k, v, z = (g.section(s).start for s in ("q", "k", "v", "z"))
    rows: list[int] = []
    for head in range(g.Hk):
        rows += range(q + head * g.dk, q + (head + 1) * g.dk)
        rows += range(k + head * g.dk, k + (head + 1) * g.dk)
        rows += range(v + head * r * g.dv, v + (head + 1) * r * g.dv)
        rows += range(z + head * r * g.dv, z + (head + 1) * r * g.dv)
    return rows


def ba_rows(geometry: Geometry) -> list[int]:
    """Megatron in_proj rows of in_proj_ba's rows: per key head its r beta rows, then its r alpha rows."""
    r = geometry.Hv // geometry.Hk
    beta, alpha = geometry.section("beta").start, geometry.section("alpha").start
    rows: list[int] = []
    for head in range(geometry.Hk):
        rows += range(beta + head * r, beta + (head + 1) * r)
        rows += range(alpha + head * r, alpha + (head + 1) * r)
    return rows


def from_megatron(params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """Megatron-named parameters as the Qwen3-Next layer's state_dict."""
    w = params[names.IN_PROJ]
    state = {NORM: params[names.IN_PROJ_NORM] - 1, QKVZ: w[qkvz_rows(geometry)], BA: w[ba_rows(geometry)]}
    state.update({hf_name: params[meg] for meg, hf_name in DIRECT.items()})
    return state


def to_megatron(state: Mapping[str, torch.Tensor], geometry: Geometry,
                gradients: bool = False) -> dict[str, torch.Tensor]:
    """The layer's parameters (or, with `gradients`, their gradients: the norm's +1 does not shift a
    gradient) under Megatron's names."""
    qkvz, ba = state[QKVZ], state[BA]
    w = qkvz.new_empty(geometry.in_proj_dim, geometry.hidden_size)
    w[qkvz_rows(geometry)] = qkvz
    w[ba_rows(geometry)] = ba
    params = {names.IN_PROJ_NORM: state[NORM] if gradients else state[NORM] + 1, names.IN_PROJ: w}
    params.update({meg: state[hf_name] for meg, hf_name in DIRECT.items()})
    return params
