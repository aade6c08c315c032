"""The layer's parameters under the image's names (the package docstring's table): the name check, TP
sharding and gathering, and a run's full gradients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from gdn_verify import names
from gdn_verify.adapters.base import AdapterError
from gdn_verify.adapters.megatron.groups import cp_size_and_rank, tp_size_and_rank
from gdn_verify.adapters.megatron.layer import module_geometry
from gdn_verify.exits import Mismatch
from gdn_verify.names import Geometry

# Replicated parameters whose gradient is a partial over TP ranks: out_norm acts on each rank's own heads
# (in_proj's norm sees the full input, its gradient arrives TP-reduced through ColumnParallelLinear).
TP_PARTIAL = (names.OUT_NORM,)


class MegatronAdapterError(AdapterError):
    """A state dict that does not fit the geometry; the message names the tensor and the fix."""


def _sections(geometry: Geometry, name: str, tp: int) -> list[int]:
    """The per-rank section widths along dim 0 of a sectioned parameter (in_proj rows, conv channels)."""
    widths = geometry.section_widths()
    keys = names.IN_PROJ_SECTIONS if name == names.IN_PROJ else names.CONV_SECTIONS
    return [widths[k] // tp for k in keys]


def check_tp(geometry: Geometry, tp: int) -> None:
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
    check_tp(geometry, tp)
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
    check_tp(geometry, tp)
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


class GradientNotReached(Mismatch):
    """A parameter whose gradient the library left empty on this rank: a tensor on the oracle's side only."""


def check_reached(module: torch.nn.Module) -> None:
    """GradientNotReached naming the first parameter whose `grad` is None here (a CP-local slice cut from
    autograd leaves it so on the ranks that use the slice) and this rank, before any sum over ranks."""
    missing = [n for n, p in module.named_parameters() if p.grad is None]
    if missing:
        (cp, cp_rank), (tp, tp_rank) = cp_size_and_rank(), tp_size_and_rank()
        where = f"CP rank {cp_rank} of {cp}" + (f", TP rank {tp_rank} of {tp}" if tp > 1 else "")
        raise GradientNotReached(f"grad of {missing[0]} is None on {where} (not reached by autograd on this rank)")


def full_grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layer's parameter gradients, full: summed over CP (each rank holds a partial), TP-partial ones
    summed over TP, then the TP shards gathered (`gather_tp`)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    check_reached(module)
    # In the state dtype before any sum (Megatron reduces fp32 main grads), so a bf16 layer's CP partials
    # are not rounded to bf16 again on the way.
    grads = {n: p.grad.detach().to(torch.float64 if p.dtype == torch.float64 else torch.float32)
             for n, p in module.named_parameters()}
    for n, g in grads.items():
        dist.all_reduce(g, group=parallel_state.get_context_parallel_group())
        if n in TP_PARTIAL:
            dist.all_reduce(g, group=parallel_state.get_tensor_model_parallel_group())
    tp, _ = tp_size_and_rank()
    if tp == 1:
        return grads
    shards: list = [None] * tp
    dist.all_gather_object(shards, grads, group=parallel_state.get_tensor_model_parallel_group())
    return gather_tp(shards, module_geometry(module))
