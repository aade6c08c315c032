"""The named stages of a Megatron run: hooks and wrappers recording them on this rank's rows and columns,
and the TP ranks' columns merged into one CP rank's stages."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from gdn_verify import names
from gdn_verify.adapters.fla.kcp_layer import boundary_taps
from gdn_verify.adapters.megatron.capability import prepare_method
from gdn_verify.adapters.megatron.groups import cp_size_and_rank, tp_size_and_rank
from gdn_verify.adapters.megatron.layer import module_geometry
from gdn_verify.names import Geometry
from gdn_verify.stages import StageRecorder, l2_normalised
from gdn_verify.world import Rank


def _section_cols(geometry: Geometry, tp: int, rank: int) -> list[int]:
    """The full-layer in_proj columns of TP rank `rank`'s output: each section's rank-th slice."""
    cols: list[int] = []
    for s in names.IN_PROJ_SECTIONS:
        section, width = geometry.section(s), geometry.section_widths()[s] // tp
        cols.extend(range(section.start + rank * width, section.start + (rank + 1) * width))
    return cols


def _mixer_cols(geometry: Geometry, mode: str) -> dict[str, list[int]]:
    """The full-layer columns of each mixer stage this (TP, CP) rank computes. Headwise: after Megatron's
    head permutation and all-to-all, CP rank c of TP rank t holds the c-th of cp equal head blocks of each
    of t's sections (`_build_head_perm_for_split_sections`); cp1 and chunkwise: every head of TP rank t."""
    g = geometry
    (tp, t), (cp, c) = tp_size_and_rank(), cp_size_and_rank()
    if mode != "headwise":
        cp, c = 1, 0

    def heads(n: int) -> range:
        per = n // (tp * cp)
        return range(t * n // tp + c * per, t * n // tp + (c + 1) * per)

    def flat(hs: range, width: int, offset: int = 0) -> list[int]:
        return [offset + h * width + i for h in hs for i in range(width)]

    qk, v = flat(heads(g.Hk), g.dk), flat(heads(g.Hv), g.dv)
    return {"conv": qk + [g.qk_dim + i for i in qk] + [2 * g.qk_dim + i for i in v], "q": qk, "k": qk, "v": v,
            "g": list(heads(g.Hv)), "beta": list(heads(g.Hv)), "core": v}


def record_stages(module: torch.nn.Module, recorder: StageRecorder, rows: list[int], mixer_rows: list[int],
                  mode: str) -> Callable[[], None]:
    """Hooks and method wrappers putting every named stage into `recorder`; a function removing them.
    x_norm, in_proj and (but in chunkwise) gated_norm as out_proj's input on this rank's `rows`; the
    mixer's stages (chunkwise: gated_norm too, as the gated norm returns it) on
    `mixer_rows` (the tokens the mode hands the mixer: every token after headwise's all-to-all, the
    rank's contiguous span in chunkwise) and this rank's heads (`_mixer_cols`); in chunkwise also the
    state carried across CP ranks. The wrappers pass values through unchanged (q, k, v are cut from conv
    and put back together so that each piece's gradient is seen). Megatron's shapes differ in the method
    that takes the conv's output (`capability.prepare_method`); g and beta are read where every shape
    hands them to the gated delta rule."""
    g = module_geometry(module)
    tp, t = tp_size_and_rank()
    v = g.v_dim // tp
    cols = _mixer_cols(g, mode)
    prepare_name = prepare_method(module)
    prepare, rule = getattr(module, prepare_name), module.gated_delta_rule
    signature = inspect.signature(prepare)

    def prepare_recorded(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        qkv = bound.arguments["qkv"]
        recorder.record("conv", qkv, mixer_rows, cols["conv"])
        q, k, vv = torch.split(qkv, [len(cols["q"]), len(cols["k"]), len(cols["v"])], dim=-1)
        for name, x in (("q", q), ("k", k)):
            recorder.record(name, x, mixer_rows, cols[name], l2_normalised(x.reshape(*x.shape[:-1], -1, g.dk)))
        recorder.record("v", vv, mixer_rows, cols["v"])
        bound.arguments["qkv"] = torch.cat([q, k, vv], dim=-1)
        return prepare(*bound.args, **bound.kwargs)

    def rule_recorded(*args, **kwargs):
        recorder.record("g", kwargs["g"], mixer_rows, cols["g"])
        recorder.record("beta", kwargs["beta"], mixer_rows, cols["beta"])
        core, state = rule(*args, **kwargs)
        recorder.record("core", core, mixer_rows, cols["core"])
        return core, state

    norm = module._apply_gated_norm

    def norm_recorded(*args, **kwargs):
        y = norm(*args, **kwargs)
        recorder.record("gated_norm", y, mixer_rows, cols["core"])
        return y

    setattr(module, prepare_name, prepare_recorded)
    module.gated_delta_rule = rule_recorded
    module.in_proj.x_norm_hook = lambda x: recorder.record("x_norm", x, rows, range(g.hidden_size))
    handles = [module.in_proj.register_forward_hook(
        lambda m, i, out: recorder.record("in_proj", out[0], rows, _section_cols(g, tp, t)))]
    if mode == "chunkwise":  # where each rank computed it: its contiguous span, before the layout goes back
        module._apply_gated_norm = norm_recorded
    else:  # out_proj's input: after headwise's all-to-all back, this rank's rows and TP columns
        handles.append(module.out_proj.register_forward_pre_hook(
            lambda m, i: recorder.record("gated_norm", i[0], rows, range(t * v, (t + 1) * v))))
    cp, c = cp_size_and_rank()
    taps = boundary_taps(recorder if mode == "chunkwise" else None, Rank(c, cp),
                         range(t * g.Hv // tp, (t + 1) * g.Hv // tp), g.dk, g.dv).__enter__()

    def undo() -> None:
        for h in handles:
            h.remove()
        taps.__exit__()
        delattr(module, prepare_name)  # the class's methods again
        module.__dict__.pop("_apply_gated_norm", None)
        module.gated_delta_rule = rule
        module.in_proj.x_norm_hook = None

    return undo


def tp_merged(stages: list) -> list | None:
    """This CP rank's stages with every TP rank's columns side by side (TP rank 0's for a stage all hold
    whole, x_norm); None on TP ranks other than 0."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from gdn_verify.images import Stage

    tp, t = tp_size_and_rank()
    if tp == 1:
        return stages
    group = parallel_state.get_tensor_model_parallel_group()
    every: list = [None] * tp
    dist.all_gather_object(every, stages, group=group)
    if t != 0:
        return None
    merged = []
    for pieces in zip(*every):
        if list(pieces[0].cols) == list(pieces[1].cols):
            merged.append(pieces[0])
            continue
        cols = [c for p in pieces for c in p.cols]
        merged.append(Stage(pieces[0].name, torch.cat([p.data for p in pieces], dim=1), pieces[0].rows, cols))
    return merged
