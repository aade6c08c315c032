"""Which rows of a case a CP rank holds, by Megatron's rules, and the packed-sequence parameters of a THD case."""

from __future__ import annotations

import torch

from gdn_verify.adapters.base import AdapterError
from gdn_verify.adapters.megatron.groups import cp_size_and_rank
from gdn_verify.cases import Case


def cp_rows(case: Case) -> list[int]:
    """The natural rows this process's CP rank holds, in its local (s, b) order, by Megatron's rules: SBHD
    through Megatron's own per-sequence zigzag (`_get_batch_on_this_cp_rank_per_sequence_balancing` on the
    CP group); THD the per-document zigzag, chunks r and 2 cp - 1 - r of every sequence (Megatron hands it to
    Transformer Engine's `thd_get_partitioned_indices`, which is CUDA only)."""
    cp, rank = cp_size_and_rank()
    for begin, end in case.sequences():
        if (end - begin) % (2 * cp) and cp > 1:
            raise AdapterError(f"megatron: a sequence of {end - begin} tokens does not split into 2 CP = {2 * cp} "
                               "chunks (Megatron's zigzag): pick a case whose lengths are multiples of 2 CP")
    if case.cu_seqlens is None:
        from megatron.core import parallel_state
        from megatron.core.utils import _get_batch_on_this_cp_rank_per_sequence_balancing

        S, B = case.spec.seq_len, case.spec.batch
        index = torch.arange(B * S).reshape(B, S)
        local = _get_batch_on_this_cp_rank_per_sequence_balancing(
            {"tokens": index}, cp_group=parallel_state.get_context_parallel_group())["tokens"]
        return local.t().reshape(-1).tolist()
    from gdn_verify.layouts import zigzag_rows

    return zigzag_rows(case, cp, rank)


def packed_seq_params(case: Case):
    """Megatron's PackedSeqParams for a THD case (cu_seqlens of the whole packed batch); None for SBHD."""
    if case.cu_seqlens is None:
        return None
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = torch.tensor(case.cu_seqlens, dtype=torch.int32)
    longest = max(e - b for b, e in case.sequences())
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                           max_seqlen_kv=longest)
