"""One rank's run: forward and backward of its CP shard, gathered into the CP rank's RankDump."""

from __future__ import annotations

import torch

from gdn_verify.adapters.megatron.capability import converts_at_input
from gdn_verify.adapters.megatron.groups import cp_size_and_rank, tp_size_and_rank
from gdn_verify.adapters.megatron.params import full_grads
from gdn_verify.adapters.megatron.rows import cp_rows, mixer_rows, packed_seq_params
from gdn_verify.adapters.megatron.stage_hooks import record_stages, tp_merged
from gdn_verify.cases import Case


def rank_run(module: torch.nn.Module, case: Case, mode: str, stages: bool = True):
    """Forward and backward of this process's CP shard of the case (`cp_rows`); the CP rank's RankDump
    (out and grad_hidden its rows, the layer's full parameter gradients, the stages with every TP rank's
    columns) on TP rank 0, None on the other TP ranks."""
    from gdn_verify.images import RankDump
    from gdn_verify.stages import StageRecorder

    rows = cp_rows(case)
    B, H = case.spec.batch if case.cu_seqlens is None else 1, case.geometry.hidden_size
    dtype = next(module.parameters()).dtype
    shape = (len(rows) // B, B, H)
    hidden = case.hidden_states.reshape(-1, H)[rows].reshape(shape).to(dtype).requires_grad_()
    grad_out = case.grad_output.reshape(-1, H)[rows].reshape(shape).to(dtype)
    recorder = StageRecorder() if stages else None
    mixer = mixer_rows(case, mode)
    layer_rows = mixer if mode == "chunkwise" and converts_at_input(module) else rows
    undo = record_stages(module, recorder, layer_rows, mixer, mode) if recorder is not None else None
    try:
        module.zero_grad(set_to_none=True)
        out, _ = module(hidden, attention_mask=None, packed_seq_params=packed_seq_params(case))
        out.backward(grad_out)
    finally:
        if undo:
            undo()
    grads = full_grads(module)
    merged = tp_merged(recorder.stages()) if recorder is not None else None
    if tp_size_and_rank()[1] != 0:
        return None
    cp, cp_rank = cp_size_and_rank()
    return RankDump(mode, cp_rank, cp, out.detach(), hidden.grad, grads, merged)
