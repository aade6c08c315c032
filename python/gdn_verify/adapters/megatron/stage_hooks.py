"""The named stages of a Megatron run: hooks and wrappers recording them on this rank's rows and columns,
and the TP ranks' columns merged into one CP rank's stages."""

from __future__ import annotations

import torch

from gdn_verify import names
from gdn_verify.adapters.megatron.groups import cp_size_and_rank, tp_size_and_rank
from gdn_verify.adapters.megatron.layer import module_geometry
from gdn_verify.names import Geometry


def _section_cols(geometry: Geometry, tp: int, rank: int) -> list[int]:
    """The full-layer in_proj columns of TP rank `rank`'s output: each section's rank-th slice."""
    cols: list[int] = []
    for s in names.IN_PROJ_SECTIONS:
        section, width = geometry.section(s), geometry.section_widths()[s] // tp
        cols.extend(range(section.start + rank * width, section.start + (rank + 1) * width))
    return cols


def _mixer_cols(geometry: Geometry) -> dict[str, list[int]]:
    """The full-layer columns of each mixer stage this (TP, CP) rank computes: after Megatron's head
    permutation and all-to-all, CP rank c of TP rank t holds the c-th of cp equal head blocks of each of
    t's sections (`_build_head_perm_for_split_sections`)."""
    g = geometry
    (tp, t), (cp, c) = tp_size_and_rank(), cp_size_and_rank()

    def heads(n: int) -> range:
        per = n // (tp * cp)
        return range(t * n // tp + c * per, t * n // tp + (c + 1) * per)

    def flat(hs: range, width: int, offset: int = 0) -> list[int]:
        return [offset + h * width + i for h in hs for i in range(width)]

    qk, v = flat(heads(g.Hk), g.dk), flat(heads(g.Hv), g.dv)
    return {"conv": qk + [g.qk_dim + i for i in qk] + [2 * g.qk_dim + i for i in v], "q": qk, "k": qk, "v": v,
            "g": list(heads(g.Hv)), "beta": list(heads(g.Hv)), "core": v}


def record_stages(module: torch.nn.Module, recorder, rows: list[int], tokens: int):
    """Hooks and method wrappers putting every named stage into `recorder`; a function removing them.
    x_norm, in_proj and gated_norm (out_proj's input) on this rank's `rows`; the mixer's stages on every
    token (Megatron's all-to-all has put them in natural order) and this rank's heads. The wrappers pass
    values through unchanged (q, k, v are cut from conv and put back together so that each piece's
    gradient is seen)."""
    from gdn_verify.stages import l2_normalised

    g = module_geometry(module)
    tp, t = tp_size_and_rank()
    v = g.v_dim // tp
    every = range(tokens)
    cols = _mixer_cols(g)
    prepare, gates, rule = (module._prepare_input_for_gated_delta_rule, module._compute_g_and_beta,
                            module.gated_delta_rule)

    def prepare_recorded(qkv, gate, batch, seq_len, *feats):
        recorder.record("conv", qkv, every, cols["conv"])
        q, k, vv = torch.split(qkv, [len(cols["q"]), len(cols["k"]), len(cols["v"])], dim=-1)
        for name, x in (("q", q), ("k", k)):
            recorder.record(name, x, every, cols[name], l2_normalised(x.reshape(*x.shape[:-1], -1, g.dk)))
        recorder.record("v", vv, every, cols["v"])
        return prepare(torch.cat([q, k, vv], dim=-1), gate, batch, seq_len, *feats)

    def gates_recorded(*args):
        decay, beta = gates(*args)
        recorder.record("g", decay, every, cols["g"])
        recorder.record("beta", beta, every, cols["beta"])
        return decay, beta

    def rule_recorded(*args, **kwargs):
        core, state = rule(*args, **kwargs)
        recorder.record("core", core, every, cols["core"])
        return core, state

    module._prepare_input_for_gated_delta_rule = prepare_recorded
    module._compute_g_and_beta = gates_recorded
    module.gated_delta_rule = rule_recorded
    module.in_proj.x_norm_hook = lambda x: recorder.record("x_norm", x, rows, range(g.hidden_size))
    handles = [
        module.in_proj.register_forward_hook(
            lambda m, i, out: recorder.record("in_proj", out[0], rows, _section_cols(g, tp, t))),
        module.out_proj.register_forward_pre_hook(
            lambda m, i: recorder.record("gated_norm", i[0], rows, range(t * v, (t + 1) * v))),
    ]

    def undo() -> None:
        for h in handles:
            h.remove()
        del module._prepare_input_for_gated_delta_rule, module._compute_g_and_beta  # the class's methods again
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
