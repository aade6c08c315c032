"""FLA's layer on its torch core (`--core torch`): the layer's own torch submodules and FLA's pure-torch
references, one packed sequence at a time, in GatedDeltaNet's forward order (the package docstring)."""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F
from torch import nn

from gdn_verify import names
from gdn_verify.adapters.fla.mapping import CONV, PROJ, FlaGdn
from gdn_verify.fla_kernels import fla_torch_kernel
from gdn_verify.stages import l2_normalised


def _rms_norm_ref_module() -> str:
    """Where the installed FLA keeps its pure-torch gated RMSNorm (0.6.0: `fla.modules.norm`; 0.4.2: `fla.modules`)."""
    return "fla.modules.norm.layernorm_gated" if importlib.util.find_spec("fla.modules.norm") else \
        "fla.modules.layernorm_gated"


def forward(module: FlaGdn, hidden: torch.Tensor, sequences: list[tuple[int, int]], recorder,
             core: str) -> torch.Tensor:
    """`out` [T, hidden] from FLA's own forward (triton) or the torch path, sequence by sequence."""
    if core == "triton":
        cu = torch.tensor([0] + [e for _, e in sequences], dtype=torch.int32, device=hidden.device)
        out, _, _ = module.attn(module.attn_norm(hidden).unsqueeze(0), cu_seqlens=cu)
        return out.squeeze(0)
    outs = []
    for b, e in sequences:
        s = _one_sequence(module, hidden[b:e])
        if recorder is not None:
            for name in names.FORWARD_STAGES:
                t, value = s[name]
                recorder.record(name, t, range(b, e), range(t[0].numel()), value)
        outs.append(s["out"][0])
    return torch.cat(outs, dim=0)


def _conv(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """A ShortConvolution as the nn.Conv1d it subclasses (causal: padding W-1, the first T outputs), SiLU."""
    y = nn.Conv1d.forward(conv, x.t().unsqueeze(0))[..., : x.shape[0]]
    return F.silu(y.squeeze(0).t())


def _one_sequence(model: FlaGdn, h: torch.Tensor) -> dict[str, torch.Tensor]:
    """GatedDeltaNet.forward's steps on one sequence [L, hidden], keeping each named stage."""
    rms_norm_ref = importlib.import_module(_rms_norm_ref_module()).rms_norm_ref

    layer = model.attn
    L, Hk, Hv, dk, dv = h.shape[0], layer.num_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    x = model.attn_norm(h)
    proj = {k: getattr(layer, p)(x) for k, p in PROJ.items()}
    in_proj = torch.cat([proj[k] for k in names.IN_PROJ_SECTIONS], dim=-1)
    conv = _conv_sections(layer, in_proj, proj)
    q, k, v = conv[:, :Hk * dk].view(L, Hk, dk), conv[:, Hk * dk:2 * Hk * dk].view(L, Hk, dk), \
        conv[:, 2 * Hk * dk:].view(L, Hv, dv)
    gate_in = in_proj[:, -Hv:].float() + layer.dt_bias.float()  # FLA's gate kernel works in fp32
    g = -layer.A_log.float().exp() * F.softplus(gate_in)
    beta = in_proj[:, -2 * Hv:-Hv].float().sigmoid()
    core, _ = fla_torch_kernel("recurrent")(q[None], k[None], v[None], g[None], beta[None],
                                            use_qk_l2norm_in_kernel=True)
    core = core[0].to(h.dtype)
    z = in_proj[:, 2 * Hk * dk + Hv * dv:2 * Hk * dk + 2 * Hv * dv].view(L, Hv, dv)
    gated = rms_norm_ref(core, layer.o_norm.weight, None, z=z, eps=layer.o_norm.eps)
    out = layer.o_proj(gated.reshape(L, Hv * dv))
    stage = {"x_norm": (x, None), "in_proj": (in_proj, None), "conv": (conv, None), "q": (q, l2_normalised(q)),
             "k": (k, l2_normalised(k)), "v": (v, None), "g": (g, None), "beta": (beta, None), "core": (core, None),
             "gated_norm": (gated, None), "out": (out, None)}
    return stage


def _conv_sections(layer: nn.Module, in_proj: torch.Tensor, proj: dict[str, torch.Tensor]) -> torch.Tensor:
    """The q, k, v convolutions (each FLA ShortConvolution on its projection), side by side as Megatron's
    conv channels; they read the projections through `in_proj` so stage_grad::in_proj sees every path."""
    widths = [proj[k].shape[-1] for k in names.CONV_SECTIONS]
    parts = torch.split(in_proj[:, :sum(widths)], widths, dim=-1)
    return torch.cat([_conv(getattr(layer, CONV[k]), p) for k, p in zip(names.CONV_SECTIONS, parts)], dim=-1)

