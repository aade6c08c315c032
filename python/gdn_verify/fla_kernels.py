"""FLA's gated delta rule behind `chunk_gated_delta_rule`'s signature, the kernels gdn_verify.kernel_dump runs.

`fla_triton_kernel` is FLA's Triton `chunk_gated_delta_rule` (or `fused_recurrent_gated_delta_rule`),
`fla_torch_kernel` FLA's own pure-torch references with what the Triton kernel does around them (GVA,
packed sequences, the in-kernel L2 norm). `default_kernel` picks the Triton one where Triton can run.
Each kernel's `path` and `source` name it in the dump's metadata.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]

L2NORM_EPS = 1e-6  # the core's in-kernel L2 norm epsilon (docs/DESIGN.md §1.1)


class KernelDumpError(ValueError):
    """A kernel or a call that cannot be dumped; the message names the argument and the fix."""


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """`x / sqrt(sum x^2 + 1e-6)` over the head dim, as the core's in-kernel L2 norm (docs/DESIGN.md §1.1).

    FLA's own l2norm is a Triton kernel only, so the torch path needs this one formula.
    """
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2NORM_EPS)


def _sequences(T: int, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int]]:
    """The packed sequences' [begin, end) token ranges; the whole T when not packed."""
    if cu_seqlens is None:
        return [(0, T)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:]))


def fla_torch_kernel(form: str = "recurrent") -> Kernel:
    """FLA's pure-torch reference (`naive_recurrent_gated_delta_rule`, or `naive_chunk_gated_delta_rule`
    with form "chunk") behind `chunk_gated_delta_rule`'s signature.

    The references take one sequence batch with as many key as value heads, no in-kernel L2 norm and
    beta before g; this wrapper adds what the Triton kernel does around them: GVA (value head h reads key
    head h / (Hv / Hk), by repeating key heads), packed sequences (one call per sequence) and the L2 norm.
    The references compute in fp32 whatever the input dtype.
    """
    from fla.ops.gated_delta_rule import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

    if form not in ("recurrent", "chunk"):
        raise KernelDumpError(f"fla_torch_kernel: form '{form}' is not one of recurrent, chunk")

    def one_sequence(q, k, v, g, beta, scale, h0, chunk_size):
        if form == "chunk":
            return naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, scale=scale,
                                                initial_state=h0, output_final_state=True)
        return naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale, initial_state=h0,
                                                output_final_state=True)

    def kernel(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, **unused):
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        group = v.shape[2] // q.shape[2]
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        outs, states = [], []
        for n, (b, e) in enumerate(_sequences(q.shape[1], cu_seqlens)):
            rows = slice(b, e)
            if cu_seqlens is None:
                h0 = initial_state
            else:
                h0 = None if initial_state is None else initial_state[n:n + 1]
            o, state = one_sequence(q[:, rows], k[:, rows], v[:, rows], g[:, rows], beta[:, rows], scale, h0,
                                    chunk_size)
            outs.append(o)
            states.append(state)
        return torch.cat(outs, dim=1), (torch.cat(states, dim=0) if output_final_state else None)

    kernel.path = "torch"  # type: ignore[attr-defined]
    kernel.source = f"flash-linear-attention naive_{form}_gated_delta_rule"  # type: ignore[attr-defined]
    return kernel


@functools.cache
def chunk_groups_heads() -> bool:
    """Whether the installed `chunk_gated_delta_rule` takes fewer key heads than value heads (GVA: value head h
    reads key head h // (Hv / Hk)), as FLA 0.6.0's does. FLA 0.4.2's takes one key head per value head (its
    layer repeats them first) and, given fewer, keeps one state per key head and leaves the other value heads'
    output unwritten: one small call tells the two apart by its final state's heads (0.4 CPU s under the
    interpreter)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    qk, v = torch.ones(1, 16, 1, 16), torch.ones(1, 16, 2, 16)
    with torch.no_grad():
        _, state = chunk_gated_delta_rule(qk, qk, v, g=-torch.ones(1, 16, 2), beta=torch.full((1, 16, 2), 0.5),
                                          output_final_state=True)
    return state.shape[1] == v.shape[2]


def heads_for_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k [..., Hk, d] as the installed `chunk_gated_delta_rule` takes them for v's Hv heads: as they are
    where it groups value heads over key heads, else each key head repeated Hv / Hk times, as FLA 0.4.2's layer
    does (their gradients then sum over the group, through autograd)."""
    group = v.shape[-2] // q.shape[-2]
    if group == 1 or chunk_groups_heads():
        return q, k
    return q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)


def fla_triton_kernel(op: str = "chunk") -> Kernel:
    """FLA's Triton `chunk_gated_delta_rule`, or `fused_recurrent_gated_delta_rule` (op "fused_recurrent",
    forward only in FLA) behind `chunk_gated_delta_rule`'s signature (GVA included: `heads_for_chunk`)."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule

    if op not in ("chunk", "fused_recurrent"):
        raise KernelDumpError(f"fla_triton_kernel: op '{op}' is not one of chunk, fused_recurrent")

    def kernel(q, k, v, g, beta, chunk_size=64, **options):
        if op == "chunk":
            q, k = heads_for_chunk(q, k, v)
            return chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk_size, **options)
        return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, **options)

    kernel.path = "triton"  # type: ignore[attr-defined]
    kernel.source = f"flash-linear-attention {op}_gated_delta_rule"  # type: ignore[attr-defined]
    return kernel


def default_kernel(device: torch.device) -> Kernel:
    """FLA's Triton kernel where Triton can run (a CUDA device, or its interpreter), else FLA's pure-torch
    reference."""
    if device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return fla_triton_kernel("chunk")
    return fla_torch_kernel("recurrent")
