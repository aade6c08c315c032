"""Which rows of a case a CP rank holds, by Megatron's rules, and the packed-sequence parameters of a THD case."""

from __future__ import annotations

import torch

from gdn_verify.adapters.base import AdapterError
from gdn_verify.adapters.megatron.groups import cp_size_and_rank
from gdn_verify.cases import Case
from gdn_verify.layouts import contiguous_rows, zigzag_rows


def cp_rows(case: Case) -> list[int]:
    """The natural rows this process's CP rank holds, in its local (s, b) order, by Megatron's rules: SBHD
    through Megatron's own per-sequence zigzag (`sbhd_partition`); THD the per-document zigzag, chunks r and
    2 cp - 1 - r of every sequence (0.19.2 hands it to Transformer Engine's CUDA-only
    `thd_get_partitioned_indices`; tested token-exact against `context_parallel_layout` where it exists)."""
    cp, rank = cp_size_and_rank()
    if case.cu_seqlens is None:
        from megatron.core import parallel_state

        S, B = case.spec.seq_len, case.spec.batch
        index = torch.arange(B * S).reshape(B, S)
        local = sbhd_partition()({"tokens": index}, cp_group=parallel_state.get_context_parallel_group())["tokens"]
        return local.t().reshape(-1).tolist()
    return zigzag_rows(case, cp, rank)


def sbhd_partition():
    """Megatron's zigzag split of a [B, S] batch over the CP group, by the name this Megatron has it under
    (0.19.2 and the dev branch `_get_batch_on_this_cp_rank_per_sequence_balancing`, commit 5139086e
    `get_pretrain_batch_on_this_cp_rank`)."""
    from megatron.core import utils

    for name in ("_get_batch_on_this_cp_rank_per_sequence_balancing", "get_pretrain_batch_on_this_cp_rank"):
        if hasattr(utils, name):
            return getattr(utils, name)
    raise AdapterError("megatron: megatron.core.utils has no SBHD context-parallel split this adapter knows: teach "
                       "gdn_verify.adapters.megatron.rows this Megatron, or use a THD case")


def mixer_rows(case: Case, mode: str) -> list[int]:
    """The natural rows of the tokens the mode hands the mixer on this CP rank: every token for cp1 and after
    headwise's all-to-all; chunkwise's contiguous span, [r T / cp, (r + 1) T / cp) of the packed tokens
    (`context_parallel_layout`'s "contiguous", docs/DESIGN.md §2)."""
    tokens = case.hidden_states.shape[0] * case.hidden_states.shape[1]
    if mode != "chunkwise":
        return list(range(tokens))
    cp, rank = cp_size_and_rank()
    return list(contiguous_rows(tokens, cp, rank))


def packed_seq_params(case: Case):
    """Megatron's PackedSeqParams for a THD case (cu_seqlens of the whole packed batch); None for SBHD."""
    if case.cu_seqlens is None:
        return None
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = torch.tensor(case.cu_seqlens, dtype=torch.int32)
    longest = max(e - b for b, e in case.sequences())
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                           max_seqlen_kv=longest)
