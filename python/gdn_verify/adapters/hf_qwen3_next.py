"""Hugging Face Qwen3-Next's GatedDeltaNet (transformers' `Qwen3NextGatedDeltaNet`) under Megatron's names.

The layer Megatron calls GatedDeltaNet is, in Qwen3-Next, the decoder layer's `input_layernorm` followed
by `linear_attn`; `build_module` composes exactly those two real modules (without the residual and the
MLP, which are not the layer's), named as in a Qwen3-Next checkpoint's decoder layer.

The parameter mapping (Megatron <-> Hugging Face) is gdn_verify.adapters.hf_qwen3_next_params.

The pure-PyTorch path of transformers (`torch_chunk_gated_delta_rule`, `causal_conv1d_fn`) has no varlen
support: it ignores `cu_seqlens` and its conv would read across packed sequences. A THD case therefore
runs one sequence at a time (batch 1 each), which meta.json records. On a CPU the layer is built from
transformers' modeling module imported afresh with the kernel packages it dispatches to hidden, so by
transformers' own fallback order (hub kernel if requested, else the original package, else PyTorch)
every function runs its PyTorch code; nothing reaches into transformers' wrappers, whose form changes
between releases (5.25 wraps them in kernel-hub modules). On a GPU it lets transformers pick its kernels.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gdn_verify import names
from gdn_verify.adapters import hf_qwen3_next_params
from gdn_verify.adapters.base import Adapter, AdapterError, DecayClass, Run
from gdn_verify.cases import Case
from gdn_verify.names import Geometry
from gdn_verify.stages import StageRecorder, l2_normalised

if TYPE_CHECKING:
    from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig

NAME = "hf-qwen3-next"
MODELING = "transformers.models.qwen3_next.modeling_qwen3_next"

# The core-op forms `run` offers, by the name of transformers' function: the layer calls the chunked one on
# a sequence (decays from fp32 chunk-local cumsums: the cumsum-decay class, docs/DESIGN.md §4); the
# recurrent one (its decode path, a product of per-token decays) is offered as `core`.
CORES = {"chunk": "torch_chunk_gated_delta_rule", "recurrent": "torch_recurrent_gated_delta_rule"}
DECAY_CLASSES: dict[str, DecayClass] = {"chunk": "cumsum-decay", "recurrent": "product-of-decays"}
# The packages transformers' Qwen3-Next dispatches its functions to when they are importable.
KERNEL_PACKAGES = ("fla", "causal_conv1d")


def hf_modeling() -> ModuleType:
    """transformers' modeling_qwen3_next, imported on first use (the adapter class needs no library)."""
    try:
        with warnings.catch_warnings():  # FLA warns on import that Triton has no CPU driver; meta.json says the path
            warnings.filterwarnings("ignore", message="Triton is not supported")
            return importlib.import_module(MODELING)
    except ImportError as e:
        raise AdapterError(f"adapter '{NAME}' needs a transformers with Qwen3-Next ({e}): "
                           "pip install -U transformers") from e


def _torch_only_transformers() -> ModuleType:
    """transformers' modeling_qwen3_next, executed afresh while KERNEL_PACKAGES cannot be imported: each
    decorated function then binds its own PyTorch implementation (transformers' documented fallback)."""
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in KERNEL_PACKAGES}
    for name in saved:
        del sys.modules[name]
    sys.modules.update({name: None for name in KERNEL_PACKAGES})  # type: ignore[misc]  # None: `import name` raises
    try:
        spec = importlib.util.find_spec(MODELING)
        assert spec is not None and spec.loader is not None, MODELING
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        for name in KERNEL_PACKAGES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


_TORCH_ONLY: list[ModuleType] = []


def transformers_module(device: str) -> ModuleType:
    """The modeling module a layer on `device` is built from: the torch-only one on a CPU (FLA's Triton
    kernels have no CPU driver), transformers' own elsewhere."""
    if torch.device(device).type != "cpu":
        return hf_modeling()
    if not _TORCH_ONLY:
        _TORCH_ONLY.append(_torch_only_transformers())
    return _TORCH_ONLY[0]


class Qwen3NextGdnLayer(nn.Module):
    """Megatron's GatedDeltaNet layer in Qwen3-Next: the decoder layer's pre-norm and linear attention, from
    the modeling module `transformers` (transformers_module)."""

    def __init__(self, config: Qwen3NextConfig, transformers: ModuleType) -> None:
        super().__init__()
        self.transformers = transformers
        self.input_layernorm = transformers.Qwen3NextRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.linear_attn = transformers.Qwen3NextGatedDeltaNet(config, layer_idx=0)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, hidden] -> [B, T, hidden], one sequence per batch row."""
        return self.linear_attn(self.input_layernorm(hidden_states))


def hf_config(geometry: Geometry) -> Qwen3NextConfig:
    """A one-layer Qwen3-Next config whose layer 0 is linear attention with the case's geometry."""
    if geometry.conv_bias:
        raise AdapterError("conv_bias=true: Qwen3NextGatedDeltaNet's conv1d has no bias; use a case without it")
    return hf_modeling().Qwen3NextConfig(
        hidden_size=geometry.hidden_size, num_hidden_layers=1, layer_types=["linear_attention"],
        linear_num_key_heads=geometry.Hk, linear_num_value_heads=geometry.Hv,
        linear_key_head_dim=geometry.dk, linear_value_head_dim=geometry.dv,
        linear_conv_kernel_dim=geometry.linear_conv_kernel_dim, rms_norm_eps=geometry.layernorm_epsilon,
        hidden_act="silu")


def geometry_of(module: Qwen3NextGdnLayer) -> Geometry:
    a = module.linear_attn
    return Geometry(a.hidden_size, a.num_k_heads, a.num_v_heads, a.head_k_dim, a.head_v_dim, a.conv_kernel_size,
                    a.layer_norm_epsilon)


def path(module: Qwen3NextGdnLayer) -> str:
    """'torch' for the torch-only module (a CPU) or where FLA is not installed, else 'fla-triton': the
    package transformers dispatches the core op to first when no hub kernel is requested."""
    torch_only = module.transformers is not hf_modeling() or importlib.util.find_spec("fla") is None
    return "torch" if torch_only else "fla-triton"


def _rows(case: Case, begin: int, end: int) -> list[int]:
    """Micro-batch rows of the tokens of one module call (docs/DESIGN.md §8): THD the packed tokens of the
    sequence, SBHD every b S + s of the [B, S] batch in flattened order."""
    return list(range(begin, end) if case.cu_seqlens is not None else range(case.spec.batch * case.spec.seq_len))


@contextlib.contextmanager
def _instrumented(module: Qwen3NextGdnLayer, recorder: StageRecorder | None, rows: list[list[int]],
                  core_name: str) -> Iterator[None]:
    """While active: the layer's chunked core calls the `core_name` one and, with a recorder, every stage of each
    call is recorded at rows[-1] (the current call's token rows)."""
    geo = geometry_of(module)
    mod: Any = module.transformers  # transformers' modeling module, its functions swapped while active
    core, conv = getattr(mod, CORES[core_name]), mod.causal_conv1d_fn
    attn = module.linear_attn
    split = attn.fix_query_key_value_ordering

    def conv_fn(*args, **kwargs):
        y = conv(*args, **kwargs).transpose(1, 2)  # [B, T, conv_dim], after SiLU
        if recorder:
            recorder.record("conv", y, rows[-1], range(geo.conv_dim))
        return y.transpose(1, 2)  # what HF reads, through y, so y's gradient is the stage's

    def core_fn(query, key, value, g=None, beta=None, **kwargs):
        out = core(query, key, value, g=g, beta=beta, **kwargs)
        if recorder:
            r = rows[-1]
            recorder.record("q", query, r, range(geo.qk_dim), value=l2_normalised(query))
            recorder.record("k", key, r, range(geo.qk_dim), value=l2_normalised(key))
            recorder.record("v", value, r, range(geo.v_dim))
            recorder.record("g", g, r, range(geo.Hv))
            recorder.record("beta", beta, r, range(geo.Hv))
            recorder.record("core", out[0], r, range(geo.v_dim))
        return out

    def split_fn(mixed_qkvz, mixed_ba):
        parts = split(mixed_qkvz, mixed_ba)  # q, k, v, z, b, a as HF uses them
        if recorder:
            for section, t in zip(names.IN_PROJ_SECTIONS, parts):
                recorder.record("in_proj", t, rows[-1], geo.section(section))
        return parts

    hooks = []
    if recorder:
        hooks.append(module.input_layernorm.register_forward_hook(
            lambda _m, _i, y: recorder.record("x_norm", y, rows[-1], range(geo.hidden_size))))
        hooks.append(attn.norm.register_forward_hook(
            lambda _m, _i, y: recorder.record("gated_norm", y, rows[-1], range(geo.v_dim))))
    saved = mod.torch_chunk_gated_delta_rule, mod.causal_conv1d_fn
    mod.torch_chunk_gated_delta_rule, mod.causal_conv1d_fn = core_fn, conv_fn
    attn.fix_query_key_value_ordering = split_fn
    try:
        yield
    finally:
        mod.torch_chunk_gated_delta_rule, mod.causal_conv1d_fn = saved
        del attn.fix_query_key_value_ordering
        for h in hooks:
            h.remove()


class HfQwen3NextAdapter(Adapter):
    """transformers' Qwen3-Next layer (the module docstring's mapping)."""

    name = NAME
    package = "transformers"
    import_name = "transformers"
    gdn_sources = ("transformers/models/qwen3_next/modeling_qwen3_next.py",)
    cores = CORES
    decay_classes = DECAY_CLASSES

    def build_module(self, geometry: Geometry, dtype: torch.dtype, device: str = "cpu",
                     core: str | None = None) -> Qwen3NextGdnLayer:
        """The layer from transformers_module(device); both core forms run on it."""
        return Qwen3NextGdnLayer(hf_config(geometry), transformers_module(device)).to(device=device, dtype=dtype)

    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
        """Megatron-named parameters as this module's state_dict."""
        return hf_qwen3_next_params.from_megatron(params, geometry)

    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """This module's parameters (or, with `gradients`, their gradients) under Megatron's names."""
        return hf_qwen3_next_params.to_megatron(state, geometry, gradients)

    def load_megatron_params(self, module: nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        ref = next(module.parameters())
        state = self.from_megatron(params, geometry_of(module))
        state = {n: t.to(device=ref.device, dtype=ref.dtype) for n, t in state.items()}
        module.load_state_dict(state, strict=True)

    def run(self, module: nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """Forward and backward of the case: THD one sequence at a time, SBHD as one [B, S] batch; the
        layer's core op is transformers' `core` form ("chunk", what the layer runs on a sequence, or
        "recurrent")."""
        form = self.core(core)
        ref = next(module.parameters())
        hidden = case.hidden_states.to(device=ref.device, dtype=ref.dtype).requires_grad_()
        recorder = StageRecorder() if stages else None
        rows: list[list[int]] = []
        outs = []
        with _instrumented(module, recorder, rows, form):
            if case.cu_seqlens is not None:
                for begin, end in case.sequences():
                    rows.append(_rows(case, begin, end))
                    outs.append(module(hidden[begin:end].transpose(0, 1)).transpose(0, 1))  # [L, 1, hidden]
            else:
                rows.append(_rows(case, 0, 0))
                outs.append(module(hidden.transpose(0, 1)).transpose(0, 1))  # [S, B, hidden]
        out = torch.cat(outs, dim=0)
        out.backward(case.grad_output.to(device=ref.device, dtype=ref.dtype))
        grads = self.to_megatron({n: p.grad for n, p in module.named_parameters()}, geometry_of(module),
                                 gradients=True)
        thd = "one sequence per call (transformers' PyTorch path has no varlen)" if case.cu_seqlens is not None else ""
        notes = {"core": form} | ({"thd": thd} if thd else {})
        return Run(out=out.detach(), grad_hidden=hidden.grad, grads=grads,
                   stages=recorder.stages() if recorder else None, path=path(module), decay_class=DECAY_CLASSES[form],
                   notes=notes)
