"""FLA's layer behind its block's pre-norm, and its names mapped to Megatron's (the package's table)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from gdn_verify import names
from gdn_verify.adapters.base import AdapterError
from gdn_verify.names import Geometry

PROJ = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "z": "g_proj", "beta": "b_proj", "alpha": "a_proj"}
CONV = {"q": "q_conv1d", "k": "k_conv1d", "v": "v_conv1d"}
RENAMED = {names.IN_PROJ_NORM: "attn_norm.weight", names.A_LOG: "attn.A_log", names.DT_BIAS: "attn.dt_bias",
           names.OUT_NORM: "attn.o_norm.weight", names.OUT_PROJ: "attn.o_proj.weight"}


class FlaAdapterError(AdapterError):
    """A configuration or state dict that does not map; the message names the option or tensor."""


class FlaGdn(nn.Module):
    """FLA's GatedDeltaNet behind its block's pre-norm, named as in FLA's GatedDeltaNetBlock."""

    def __init__(self, attn_norm: nn.Module, attn: nn.Module) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.attn = attn


def unmappable(layer: nn.Module) -> str | None:
    """The first option of FLA's layer whose math differs from Megatron's GatedDeltaNet, as one line."""
    checks = [
        (not layer.use_gate, "use_gate=False: Megatron's layer always gates its output norm with silu(z); "
                             "build FLA's layer with use_gate=True"),
        (not layer.use_short_conv, "use_short_conv=False: Megatron's layer always runs the causal conv1d over q, k, v; "
                                   "build FLA's layer with use_short_conv=True"),
        (layer.allow_neg_eigval, "allow_neg_eigval=True: FLA then takes beta = 2 sigmoid(b), Megatron sigmoid(b); "
                                 "build FLA's layer with allow_neg_eigval=False"),
        (getattr(layer.o_norm, "activation", "swish") not in ("swish", "silu"),
         f"output_gate_activation='{getattr(layer.o_norm, 'activation', '')}': Megatron gates with silu(z); "
         "use output_gate_activation='swish'"),
        (layer.num_v_heads % layer.num_heads != 0,
         f"num_v_heads={layer.num_v_heads} with num_heads={layer.num_heads}: Megatron needs Hv % Hk == 0 "
         "(value heads grouped over key heads)"),
    ]
    return next((why for bad, why in checks if bad), None)


def geometry_of(model: FlaGdn) -> Geometry:
    """The Megatron config of the pair; refuses what does not map (one line naming the option)."""
    layer = model.attn
    why = unmappable(layer)
    if why:
        raise FlaAdapterError(why)
    if not _same_eps(model.attn_norm.eps, layer.o_norm.eps):
        raise FlaAdapterError(f"attn_norm eps {model.attn_norm.eps} != o_norm eps {layer.o_norm.eps}: Megatron uses "
                              "one layernorm_epsilon for both norms; build both with the same norm_eps")
    return Geometry(hidden_size=layer.hidden_size, linear_num_key_heads=layer.num_heads,
                    linear_num_value_heads=layer.num_v_heads, linear_key_head_dim=layer.head_k_dim,
                    linear_value_head_dim=layer.head_v_dim, linear_conv_kernel_dim=layer.conv_size,
                    layernorm_epsilon=model.attn_norm.eps, conv_bias=layer.conv_bias)


def _same_eps(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and float(a) == float(b)


def _check_keys(state: Mapping[str, torch.Tensor], geometry: Geometry) -> None:
    """Exactly FlaGdn's parameters for this geometry (FLA's block keys less the MLP)."""
    expected = set(RENAMED.values()) | {f"attn.{p}.weight" for p in PROJ.values()}
    expected |= {f"attn.{c}.weight" for c in CONV.values()}
    if geometry.conv_bias:
        expected |= {f"attn.{c}.bias" for c in CONV.values()}
    if set(state) != expected:
        raise FlaAdapterError(f"unknown {sorted(set(state) - expected)}, missing {sorted(expected - set(state))}: "
                              "pass FlaGdn's state dict (FLA's GatedDeltaNetBlock keys without the MLP)")



def to_megatron(state: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """FlaGdn's state dict (or its gradients: the mapping shifts nothing) under Megatron's names."""
    _check_keys(state, geometry)
    out = {m: state[f] for m, f in RENAMED.items()}
    out[names.IN_PROJ] = torch.cat([state[f"attn.{PROJ[s]}.weight"] for s in names.IN_PROJ_SECTIONS], dim=0)
    out[names.CONV_WEIGHT] = torch.cat([state[f"attn.{CONV[s]}.weight"] for s in names.CONV_SECTIONS], dim=0)
    if geometry.conv_bias:
        out[names.CONV_BIAS] = torch.cat([state[f"attn.{CONV[s]}.bias"] for s in names.CONV_SECTIONS], dim=0)
    return {n: out[n] for n in names.param_names(geometry)}


def from_megatron(params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """Megatron's parameters as FlaGdn's state dict: in_proj and conv1d cut at their sections."""
    missing = set(names.param_names(geometry)) - set(params)
    if missing:
        raise FlaAdapterError(f"missing Megatron parameters {sorted(missing)}: pass every parameter of §1.3")
    out = {f: params[m] for m, f in RENAMED.items()}
    for s in names.IN_PROJ_SECTIONS:
        rows = geometry.section(s)
        out[f"attn.{PROJ[s]}.weight"] = params[names.IN_PROJ][rows.start:rows.stop]
    for s in names.CONV_SECTIONS:
        rows = geometry.section(s)
        out[f"attn.{CONV[s]}.weight"] = params[names.CONV_WEIGHT][rows.start:rows.stop]
        if geometry.conv_bias:
            out[f"attn.{CONV[s]}.bias"] = params[names.CONV_BIAS][rows.start:rows.stop]
    return out
