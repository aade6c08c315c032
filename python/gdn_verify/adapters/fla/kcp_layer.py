"""FLA's layer on one rank's span under KCP, in either of two forms (`kcp`'s docstring says why two):
`layer_call`, FLA's own GatedDeltaNet.forward with the CP context handed to its two kernel calls, and
`layer_forward`, its steps one by one with the stages and the boundary-state taps.

Where FLA releases differ, the steps follow what the installed FLA has, found by capability (docs/fla.md,
"FLA 0.4.2"): the gate is FLA's Triton `fused_gdn_gate` where FLA has one, else the torch expression of its
GatedDeltaNet.forward; the key heads go to the chunk kernel as it takes them (`fla_kernels.heads_for_chunk`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from gdn_verify import names
from gdn_verify.adapters.fla.mapping import CONV, PROJ, geometry_of
from gdn_verify.fla_kernels import heads_for_chunk
from gdn_verify.stages import StageRecorder, l2_normalised
from gdn_verify.world import Rank


def layer_call(model, hidden: torch.Tensor, context, cu: torch.Tensor) -> torch.Tensor:
    """`out` [L, hidden] of FLA's block norm and GatedDeltaNet.forward on the rank's span: the path users run
    (in 0.6.0 `state_v_first`, the gate and beta's sigmoid inside the chunk kernel), under KCP by `cp_entry`."""
    local_cu = context.cu_seqlens if context is not None else cu
    with cp_entry(model.attn, context):
        out, _, _ = model.attn(model.attn_norm(hidden).unsqueeze(0), cu_seqlens=local_cu)
    return out.squeeze(0)


@contextlib.contextmanager
def cp_entry(layer, context) -> Iterator[None]:
    """While active, `layer`'s own forward runs under FLA's KCP: FLA's layer takes no CP context, so it is handed
    to the two calls that take one, its ShortConvolutions' `causal_conv1d` (the halo) and the module's
    `chunk_gated_delta_rule` (the carried state), as Megatron's chunkwise mode hands it; nothing else changes."""
    if context is None:
        yield
        return
    import fla.layers.gated_deltanet as module

    chunk = module.chunk_gated_delta_rule
    convs = [getattr(layer, CONV[s]) for s in names.CONV_SECTIONS]
    module.chunk_gated_delta_rule = functools.partial(chunk, cp_context=context)
    for conv in convs:
        conv.forward = functools.partial(type(conv).forward, conv, cp_context=context)
    try:
        yield
    finally:
        module.chunk_gated_delta_rule = chunk
        for conv in convs:
            del conv.forward


def layer_forward(model, hidden: torch.Tensor, context, cu: torch.Tensor, recorder: StageRecorder | None,
                  rows: list[int]) -> torch.Tensor:
    """`out` [L, hidden] of FLA's layer on the rank's span (module docstring), recording the stages."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    layer = model.attn
    geo = geometry_of(model)
    L = hidden.shape[0]
    local_cu = context.cu_seqlens if context is not None else cu

    def record(stage: str, t: torch.Tensor, value: torch.Tensor | None = None) -> None:
        if recorder is not None:
            recorder.record(stage, t, rows, range(t[0].numel()), value)

    x = model.attn_norm(hidden)
    record("x_norm", x)

    in_proj = torch.cat([getattr(layer, PROJ[s])(x) for s in names.IN_PROJ_SECTIONS], dim=-1)
    record("in_proj", in_proj)
    sections = dict(zip(names.IN_PROJ_SECTIONS, torch.split(in_proj, list(geo.section_widths().values()), dim=-1)))
    conv = torch.cat([getattr(layer, CONV[s])(x=sections[s].unsqueeze(0), cu_seqlens=local_cu, cp_context=context)[0][0]
                      for s in names.CONV_SECTIONS], dim=-1)
    record("conv", conv)
    q, k, v = torch.split(conv, [geo.qk_dim, geo.qk_dim, geo.v_dim], dim=-1)
    q, k, v = q.reshape(L, geo.Hk, geo.dk), k.reshape(L, geo.Hk, geo.dk), v.reshape(L, geo.Hv, geo.dv)
    record("q", q, l2_normalised(q))
    record("k", k, l2_normalised(k))
    record("v", v)
    g = gate(layer, sections["alpha"])
    beta = sections["beta"].float().sigmoid()
    record("g", g)
    record("beta", beta)
    q, k = heads_for_chunk(q, k, v)
    core, _ = chunk_gated_delta_rule(q[None], k[None], v[None], g=g[None], beta=beta[None],
                                     use_qk_l2norm_in_kernel=True, cu_seqlens=local_cu, cp_context=context)
    core = core[0]
    record("core", core)
    gated = layer.o_norm(core, sections["z"].reshape(L, geo.Hv, geo.dv))
    record("gated_norm", gated)
    return layer.o_proj(gated.reshape(L, geo.v_dim))


def gate(layer, alpha: torch.Tensor) -> torch.Tensor:
    """g = -exp(A_log) softplus(alpha + dt_bias): FLA's Triton `fused_gdn_gate` where the installed FLA has it,
    else as that FLA's GatedDeltaNet.forward forms it in torch (0.4.2)."""
    if importlib.util.find_spec("fla.ops.gated_delta_rule.gate") is None:
        return -layer.A_log.float().exp() * F.softplus(alpha.float() + layer.dt_bias)
    from fla.ops.gated_delta_rule.gate import fused_gdn_gate

    return fused_gdn_gate(alpha, layer.A_log, layer.dt_bias)


class boundary_taps:
    """While active, records the state FLA's KCP carries into this rank's span (stage::boundary_state row
    r) and the gradient its backward fold sends to the next rank's (stage_grad::boundary_state row r+1)
    by wrapping the two `fla.ops.cp` steps the chunk op calls; the values are returned unchanged."""

    def __init__(self, recorder: StageRecorder | None, rank: Rank, heads: range, dk: int, dv: int) -> None:
        """`rank` in the CP group; `heads`, the value heads this process holds (a TP rank's, or all)."""
        self.recorder, self.rank, self.heads, self.dk, self.dv = recorder, rank, heads, dk, dv
        self.undo: list = []

    def __enter__(self) -> boundary_taps:
        recorder = self.recorder
        if recorder is None or self.rank.world == 1:
            return self
        from fla.ops.gated_delta_rule import chunk

        size = self.dk * self.dv
        cols = range(self.heads.start * size, self.heads.stop * size)
        r = self.rank.rank

        def tap(name: str, row: int, state: torch.Tensor | None) -> None:
            value = torch.zeros(len(self.heads), self.dk, self.dv) if state is None else state.detach()
            recorder._add(name, value, (row,), list(cols))

        def wrap(attr: str, pick):
            original = getattr(chunk, attr)

            @functools.wraps(original)
            def wrapped(*args, **kwargs):
                result = original(*args, **kwargs)
                pick(result)
                return result

            setattr(chunk, attr, wrapped)
            self.undo.append(lambda: setattr(chunk, attr, original))

        wrap("chunk_gated_delta_rule_fwd_h_pre_process",
             lambda h0: tap("stage::boundary_state", r, None if h0 is None else h0[0]))
        if r + 1 < self.rank.world:
            wrap("chunk_gated_delta_rule_bwd_dhu_pre_process",
                 lambda res: tap("stage_grad::boundary_state", r + 1, None if res[0] is None else res[0][-1]))
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self.undo):
            undo()

