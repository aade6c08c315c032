"""Adapter for Megatron-Core's `GatedDeltaNet` (megatron.core.ssm.gated_delta_net).

Megatron's parameter names are the image's names (docs/DESIGN.md §1.3), so a TP = 1 state dict maps as
is. A TP-sharded module (TP size t) holds on rank r, as Megatron's forward splits it:

| name | rank r's shard | full tensor |
|---|---|---|
| `in_proj.weight` | rows `[q_r, k_r, v_r, z_r, beta_r, alpha_r]`, each section / t | per section, the ranks' pieces in rank order |
| `conv1d.weight`, `conv1d.bias` | channels `[q_r, k_r, v_r]` | the same, over q, k, v |
| `A_log`, `dt_bias` | value heads `[r Hv/t, (r+1) Hv/t)` | concatenated |
| `out_proj.weight` | columns `[r Hv dv/t, ...)` (row-parallel) | concatenated along columns |
| `in_proj.layer_norm_weight`, `out_norm.weight` | replicated | rank 0's (all must be equal) |

so gathering is section-major, like Megatron's sharded checkpoint (`sharded_state_dict` splits
in_proj into query, key, value, z, beta, alpha). Transformer Engine's `_extra_state` entries carry no
parameter and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from gdn_verify import names
from gdn_verify.names import Geometry


class MegatronAdapterError(ValueError):
    """A state dict that does not fit the geometry; the message names the tensor and the fix."""


def _sections(geometry: Geometry, name: str, tp: int) -> list[int]:
    """The per-rank section widths along dim 0 of a sectioned parameter (in_proj rows, conv channels)."""
    widths = geometry.section_widths()
    keys = names.IN_PROJ_SECTIONS if name == names.IN_PROJ else names.CONV_SECTIONS
    return [widths[k] // tp for k in keys]


def _check_tp(geometry: Geometry, tp: int) -> None:
    """TP must divide both head counts (docs/DESIGN.md §1.3, §3.1)."""
    if tp < 1 or geometry.Hk % tp or geometry.Hv % tp:
        raise MegatronAdapterError(f"TP size {tp} does not divide Hk = {geometry.Hk} and Hv = {geometry.Hv}: "
                                   "use a TP size that divides both head counts")


def _parameters(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict without Transformer Engine's `_extra_state` entries."""
    return {n: t for n, t in state.items() if not n.endswith("_extra_state")}


def _check_names(state: Mapping[str, torch.Tensor], geometry: Geometry, where: str) -> None:
    """Exactly the parameters of §1.3 for this geometry: an unknown or missing name is an error."""
    expected, got = set(names.param_names(geometry)), set(state)
    if got != expected:
        raise MegatronAdapterError(f"{where}: unknown {sorted(got - expected)}, missing {sorted(expected - got)}: "
                                   "pass a GatedDeltaNet state dict (conv1d.bias exactly when conv_bias)")


def gather_tp(shards: Sequence[Mapping[str, torch.Tensor]], geometry: Geometry) -> dict[str, torch.Tensor]:
    """The full-layer parameters from the state dicts of TP ranks 0 .. t-1, section by section."""
    tp = len(shards)
    _check_tp(geometry, tp)
    states = [_parameters(s) for s in shards]
    for r, s in enumerate(states):
        _check_names(s, geometry, f"TP rank {r}")
    full = {}
    for name in names.param_names(geometry):
        pieces = [s[name] for s in states]
        if name in (names.IN_PROJ, names.CONV_WEIGHT, names.CONV_BIAS):
            split = [torch.split(p, _sections(geometry, name, tp), dim=0) for p in pieces]
            full[name] = torch.cat([rank[i] for i in range(len(split[0])) for rank in split], dim=0)
        elif name in (names.A_LOG, names.DT_BIAS):
            full[name] = torch.cat(pieces, dim=0)
        elif name == names.OUT_PROJ:
            full[name] = torch.cat(pieces, dim=1)
        else:
            if any(not torch.equal(p, pieces[0]) for p in pieces):
                raise MegatronAdapterError(f"'{name}' differs between TP ranks: a replicated weight must be equal "
                                           "on every rank")
            full[name] = pieces[0]
        if tuple(full[name].shape) != names.param_shape(geometry, name):
            raise MegatronAdapterError(f"'{name}' gathers to {tuple(full[name].shape)}, not "
                                       f"{names.param_shape(geometry, name)}: check the geometry and TP size")
    return full


def shard_tp(full: Mapping[str, torch.Tensor], geometry: Geometry, tp: int) -> list[dict[str, torch.Tensor]]:
    """The inverse of `gather_tp`: each TP rank's state dict, as Megatron's TP-local module holds it."""
    _check_tp(geometry, tp)
    full = _parameters(full)
    _check_names(full, geometry, "full state dict")
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(tp)]
    for name, t in full.items():
        if name in (names.IN_PROJ, names.CONV_WEIGHT, names.CONV_BIAS):
            sections = [s.chunk(tp, dim=0) for s in torch.split(t, [w * tp for w in _sections(geometry, name, tp)])]
            pieces = [torch.cat([s[r] for s in sections], dim=0) for r in range(tp)]
        elif name in (names.A_LOG, names.DT_BIAS):
            pieces = list(t.chunk(tp, dim=0))
        elif name == names.OUT_PROJ:
            pieces = list(t.chunk(tp, dim=1))
        else:
            pieces = [t] * tp
        for r in range(tp):
            shards[r][name] = pieces[r].clone()
    return shards


def to_megatron(state: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """A TP = 1 Megatron state dict under the image's names: the same names, checked."""
    return gather_tp([state], geometry)


def from_megatron(params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
    """The image's parameters as a TP = 1 Megatron state dict."""
    return shard_tp(params, geometry, 1)[0]


NAME = "megatron"
# Megatron-Core runs FLA's chunked kernels: decays from chunk-local cumsums of g (docs/DESIGN.md §4).
DECAY_CLASS = "cumsum-decay"

CPU_REFUSAL = ("megatron: Megatron-Core's GatedDeltaNet needs a CUDA device: its constructor allocates conv1d, "
               "A_log and dt_bias on torch.cuda.current_device(), its fused norm + in_proj exists only as "
               "Transformer Engine's TELayerNormColumnParallelLinear, and its L2 norm is FLA's Triton kernel; "
               "run on a GPU with transformer-engine installed")


def build_module(geometry: Geometry, dtype: torch.dtype, device: str = "cpu", cp_mode: str | None = None,
                 ) -> torch.nn.Module:
    """Megatron-Core's GatedDeltaNet with the geometry on a CUDA device (TE spec, TP = 1 on the default group);
    on a CPU an AdapterError naming why it cannot be built there."""
    from gdn_verify.adapters import AdapterError

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        raise AdapterError(CPU_REFUSAL)
    import torch.nn.functional as F
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import get_gated_delta_net_module_spec
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet
    from megatron.core.transformer import TransformerConfig

    g = geometry
    config = TransformerConfig(num_layers=1, hidden_size=g.hidden_size, num_attention_heads=g.Hk,
                               linear_num_key_heads=g.Hk, linear_num_value_heads=g.Hv, linear_key_head_dim=g.dk,
                               linear_value_head_dim=g.dv, linear_conv_kernel_dim=g.linear_conv_kernel_dim,
                               layernorm_epsilon=g.layernorm_epsilon, normalization="RMSNorm",
                               activation_func=F.silu, params_dtype=dtype, perform_initialization=False)
    spec = get_gated_delta_net_module_spec(config)
    # Megatron's parallel_state must be initialised (torchrun: initialize_model_parallel); cp_mode is the
    # caller's CP configuration, which Megatron-Core 0.16.1's GatedDeltaNet does not implement yet.
    pg = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])
    return GatedDeltaNet(config, spec.submodules, conv_bias=g.conv_bias, pg_collection=pg).to(device)


def load_megatron_params(module: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
    """The image's parameters into a TP = 1 module, names as is (TE's _extra_state left untouched)."""
    dtype = next(module.parameters()).dtype
    module.load_state_dict({n: t.to(dtype) for n, t in params.items()}, strict=False)


def path(module: torch.nn.Module) -> str:
    """Megatron's forward runs FLA's Triton chunk_gated_delta_rule (deterministic_mode: its torch chunk form)."""
    return "megatron-torch-core" if module.config.deterministic_mode else "megatron-fla-triton"
