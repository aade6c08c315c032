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

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from gdn_verify import names
from gdn_verify.adapters.base import Adapter, AdapterError, DecayClass, Run
from gdn_verify.cases import Case
from gdn_verify.fla_kernels import fla_torch_kernel
from gdn_verify.names import Geometry
from gdn_verify.stages import l2_normalised

NAME = "fla"

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


CORES = {"triton": "FLA's GatedDeltaNet.forward with cu_seqlens (its Triton kernels; on a CPU under Triton's "
                    "interpreter)",
         "torch": "FLA's layer's torch submodules with FLA's naive_recurrent_gated_delta_rule and rms_norm_ref, "
                  "per sequence"}
DECAY_CLASSES_BY_CORE: dict[str, DecayClass] = {"triton": "cumsum-decay", "torch": "product-of-decays"}


def path(module: FlaGdn, core: str = "triton") -> str:
    """"fla-triton" for FLA's own forward, "torch" for the references (see the module docstring)."""
    return "fla-triton" if core == "triton" else "torch"


def _check_interpreter() -> None:
    """FLA's kernels on a CPU tensor need Triton's interpreter, enabled before FLA was imported."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise FlaAdapterError("fla --core triton on a CPU needs Triton's interpreter: call FlaAdapter().prepare("
                              "device, core) (or gdn_verify.triton_cpu.enable()) before importing fla, or use "
                              "--core torch")


def _recorder():
    from gdn_verify.stages import StageRecorder

    return StageRecorder()


def _forward(module: FlaGdn, hidden: torch.Tensor, sequences: list[tuple[int, int]], recorder,
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
    from fla.modules.norm.layernorm_gated import rms_norm_ref

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


class FlaAdapter(Adapter):
    """flash-linear-attention's GatedDeltaNet behind its block's attn_norm (the module docstring's mapping)."""

    name = NAME
    package = "flash-linear-attention"
    import_name = "fla"
    cores = CORES
    decay_classes = DECAY_CLASSES_BY_CORE
    modes = ("cp1", "chunkwise")  # chunkwise: FLA's own CP on gloo ranks (gdn_verify.fla_cp)

    def build_module(self, geometry: Geometry, dtype: torch.dtype, device: str = "cpu",
                     core: str | None = None) -> FlaGdn:
        """FLA's layer (and its block's RMSNorm) with the geometry, for either core; refuses what FLA cannot
        express, and fp64: FLA's kernels and references compute in fp32, so an fp64 image would be judged at a
        gate it cannot meet."""
        from fla.layers.gated_deltanet import GatedDeltaNet

        if dtype == torch.float64:
            raise FlaAdapterError("fla computes in fp32 (its Triton kernels and torch references alike): use "
                                  "--dtype fp32 or bf16")
        g = geometry
        layer = GatedDeltaNet(hidden_size=g.hidden_size, head_dim=g.dk, expand_v=g.dv / g.dk, num_heads=g.Hk,
                              num_v_heads=g.Hv, use_gate=True, use_short_conv=True,
                              conv_size=g.linear_conv_kernel_dim, conv_bias=g.conv_bias, norm_eps=g.layernorm_epsilon)
        model = FlaGdn(nn.RMSNorm(g.hidden_size, eps=g.layernorm_epsilon), layer)
        if layer.head_v_dim != g.dv:
            raise FlaAdapterError(f"dv = {g.dv} is not head_dim * expand_v for head_dim = {g.dk}: FLA cannot build it")
        return model.to(device=device, dtype=dtype)

    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """FlaGdn's state dict (or its gradients: the mapping shifts nothing) under Megatron's names (the table
        above)."""
        _check_keys(state, geometry)
        out = {m: state[f] for m, f in RENAMED.items()}
        out[names.IN_PROJ] = torch.cat([state[f"attn.{PROJ[s]}.weight"] for s in names.IN_PROJ_SECTIONS], dim=0)
        out[names.CONV_WEIGHT] = torch.cat([state[f"attn.{CONV[s]}.weight"] for s in names.CONV_SECTIONS], dim=0)
        if geometry.conv_bias:
            out[names.CONV_BIAS] = torch.cat([state[f"attn.{CONV[s]}.bias"] for s in names.CONV_SECTIONS], dim=0)
        return {n: out[n] for n in names.param_names(geometry)}

    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
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

    def load_megatron_params(self, module: nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        """Megatron-named parameters into the module, in its dtype."""
        state = self.from_megatron(params, geometry_of(module))
        dtype = module.attn.o_proj.weight.dtype
        module.load_state_dict({n: t.to(dtype) for n, t in state.items()})

    def prepare(self, device: str, core: str | None = None) -> None:
        """Before FLA is imported: on a CPU the triton core needs Triton's interpreter (gdn_verify.triton_cpu)."""
        if (core or "triton") == "triton" and torch.device(device).type == "cpu":
            from gdn_verify import triton_cpu

            try:
                triton_cpu.enable()
            except triton_cpu.TritonCpuError as e:
                raise FlaAdapterError(str(e)) from e

    def run(self, module: nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """Forward and backward of the case: FLA's forward with cu_seqlens (triton), or THD one sequence at a
        time (torch, so the convs never cross sequences)."""
        if case.spec.format != "thd" and case.spec.batch != 1:
            raise AdapterError("fla: SBHD with batch > 1 is not mapped; use a THD case or batch 1")
        core = self.core(core)
        if core == "triton" and module.attn.o_proj.weight.device.type == "cpu":
            _check_interpreter()
        dtype, device = module.attn.o_proj.weight.dtype, module.attn.o_proj.weight.device
        hidden = case.hidden_states.reshape(-1, case.geometry.hidden_size).to(device=device, dtype=dtype)
        hidden.requires_grad_()
        recorder = _recorder() if stages and core == "torch" else None
        module.zero_grad(set_to_none=True)
        out = _forward(module, hidden, case.sequences(), recorder, core)
        out.backward(case.grad_output.reshape(out.shape).to(device=device, dtype=dtype))
        grads = self.to_megatron({n: p.grad for n, p in module.named_parameters()}, geometry_of(module),
                                 gradients=True)
        shape = case.hidden_states.shape
        notes = {"fla_path": CORES[core]}
        if core == "triton" and device.type == "cpu":
            from gdn_verify import triton_cpu

            notes["triton_cpu_shims"] = ", ".join(triton_cpu.applied()) or "none"
        return Run(out=out.detach().reshape(shape), grad_hidden=hidden.grad.reshape(shape), grads=grads,
                   stages=recorder.stages() if recorder else None, path=path(module, core), notes=notes,
                   decay_class=DECAY_CLASSES_BY_CORE[core])
