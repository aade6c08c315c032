"""Adapter for flash-linear-attention's `GatedDeltaNet` layer (fla.layers.gated_deltanet).

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

Triton has no CPU driver, and every compute part of FLA's layer forward is a Triton kernel (the short
convolutions' `causal_conv1d`, the in-kernel L2 norm, `chunk_gated_delta_rule`, `FusedRMSNormGated`).
On a CPU `torch_forward` therefore runs the layer's own torch submodules (`attn_norm`, the projections,
each `ShortConvolution` as the `nn.Conv1d` it is) and FLA's pure-torch references
(`naive_recurrent_gated_delta_rule`, `rms_norm_ref`), one packed sequence at a time, in GatedDeltaNet's
forward order; `path` says which ran. FLA's references compute in fp32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gdn_verify import names
from gdn_verify.kernel import fla_torch_kernel
from gdn_verify.names import Geometry

PROJ = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "z": "g_proj", "beta": "b_proj", "alpha": "a_proj"}
CONV = {"q": "q_conv1d", "k": "k_conv1d", "v": "v_conv1d"}
RENAMED = {names.IN_PROJ_NORM: "attn_norm.weight", names.A_LOG: "attn.A_log", names.DT_BIAS: "attn.dt_bias",
           names.OUT_NORM: "attn.o_norm.weight", names.OUT_PROJ: "attn.o_proj.weight"}


class FlaAdapterError(ValueError):
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


def build(geometry: Geometry, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> FlaGdn:
    """FLA's layer (and its block's RMSNorm) with the geometry; fails on a geometry FLA cannot express."""
    from fla.layers.gated_deltanet import GatedDeltaNet

    g = geometry
    layer = GatedDeltaNet(hidden_size=g.hidden_size, head_dim=g.dk, expand_v=g.dv / g.dk, num_heads=g.Hk,
                          num_v_heads=g.Hv, use_gate=True, use_short_conv=True, conv_size=g.linear_conv_kernel_dim,
                          conv_bias=g.conv_bias, norm_eps=g.layernorm_epsilon)
    model = FlaGdn(nn.RMSNorm(g.hidden_size, eps=g.layernorm_epsilon), layer)
    if layer.head_v_dim != g.dv:
        raise FlaAdapterError(f"dv = {g.dv} is not head_dim * expand_v for head_dim = {g.dk}: FLA cannot build it")
    return model.to(device=device, dtype=dtype)


def to_megatron(state: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """FlaGdn's state dict under Megatron's names (the table above)."""
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


def _check_keys(state: Mapping[str, torch.Tensor], geometry: Geometry) -> None:
    """Exactly FlaGdn's parameters for this geometry (FLA's block keys less the MLP)."""
    expected = set(RENAMED.values()) | {f"attn.{p}.weight" for p in PROJ.values()}
    expected |= {f"attn.{c}.weight" for c in CONV.values()}
    if geometry.conv_bias:
        expected |= {f"attn.{c}.bias" for c in CONV.values()}
    if set(state) != expected:
        raise FlaAdapterError(f"unknown {sorted(set(state) - expected)}, missing {sorted(expected - set(state))}: "
                              "pass FlaGdn's state dict (FLA's GatedDeltaNetBlock keys without the MLP)")


@dataclass
class Forward:
    """A forward's output and its named stages (docs/DESIGN.md §1.3), token rows in the order of `out`."""

    out: torch.Tensor
    stages: dict[str, torch.Tensor]
    path: str


def torch_forward(model: FlaGdn, hidden: torch.Tensor, cu_seqlens: list[int]) -> Forward:
    """The layer on CPU (see the module docstring): `hidden` [T, hidden], packed by `cu_seqlens`."""
    pieces = [_one_sequence(model, hidden[b:e]) for b, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    stages = {n: torch.cat([p[n] for p in pieces], dim=0) for n in pieces[0]}
    return Forward(out=stages.pop("out"), stages=stages, path="torch")


def triton_forward(model: FlaGdn, hidden: torch.Tensor, cu_seqlens: list[int]) -> Forward:
    """FLA's own layer forward (Triton kernels, a CUDA device); no stages."""
    cu = torch.tensor(cu_seqlens, dtype=torch.int32, device=hidden.device)
    out, _, _ = model.attn(model.attn_norm(hidden).unsqueeze(0), cu_seqlens=cu)
    return Forward(out=out.squeeze(0), stages={}, path="triton")


def _conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A ShortConvolution as the nn.Conv1d it subclasses (causal: padding W-1, the first T outputs), SiLU."""
    y = nn.Conv1d.forward(conv, x.t().unsqueeze(0))[..., : x.shape[0]]
    return F.silu(y.squeeze(0).t())


def _one_sequence(model: FlaGdn, h: torch.Tensor) -> dict[str, torch.Tensor]:
    """GatedDeltaNet.forward's steps on one sequence [L, hidden], keeping each named stage."""
    from fla.modules.norm.layernorm_gated import rms_norm_ref

    layer = model.attn
    L, Hk, Hv, dk, dv = h.shape[0], layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    s: dict[str, torch.Tensor] = {"x_norm": model.attn_norm(h)}
    x = s["x_norm"]
    proj = {k: getattr(layer, p)(x) for k, p in PROJ.items()}
    s["in_proj"] = torch.cat([proj[k] for k in names.IN_PROJ_SECTIONS], dim=-1)
    conv = {k: _conv(getattr(layer, c), proj[k]) for k, c in CONV.items()}
    s["conv"] = torch.cat([conv[k] for k in names.CONV_SECTIONS], dim=-1)
    q, k, v = conv["q"].view(L, Hk, dk), conv["k"].view(L, Hk, dk), conv["v"].view(L, Hv, dv)
    gate_in = proj["alpha"].float() + layer.dt_bias.float()  # FLA's gate kernel works in fp32
    s["g"] = -layer.A_log.float().exp() * F.softplus(gate_in)
    s["beta"] = proj["beta"].float().sigmoid()
    core, _ = fla_torch_kernel("recurrent")(q[None], k[None], v[None], s["g"][None], s["beta"][None],
                                            use_qk_l2norm_in_kernel=True)
    s["q"], s["k"], s["v"] = _l2(q), _l2(k), v
    s["core"] = core[0].to(h.dtype)
    z = proj["z"].view(L, Hv, dv)
    s["gated_norm"] = rms_norm_ref(s["core"], layer.o_norm.weight, None, z=z, eps=layer.o_norm.eps)
    s["out"] = layer.o_proj(s["gated_norm"].reshape(L, Hv * dv))
    return s


def _l2(x: torch.Tensor) -> torch.Tensor:
    """q, k after the core's L2 norm, as the stage is defined (docs/DESIGN.md §1.3)."""
    from gdn_verify.kernel import l2norm

    return l2norm(x)
