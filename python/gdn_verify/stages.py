"""Capture of the named stages (docs/DESIGN.md §1.3) from a running PyTorch module.

An adapter hands each intermediate tensor it intercepts (forward hooks, wrapped functions) to a
StageRecorder with the micro-batch rows of its tokens and the full-layer columns of its features; the
recorder keeps the value as `stage::<s>` and, through a tensor hook, the loss's gradient w.r.t. it as
`stage_grad::<s>`. Pieces of one stage (several sequences, several column sections) are merged into the
one [rows, cols] block per rank that the image holds (docs/DESIGN.md §8), so `gdn-verify probe oracle`
names the first stage where a PyTorch layer leaves the oracle.
"""

from __future__ import annotations

from typing import Sequence

import torch

from gdn_verify import names
from gdn_verify.images import Stage

L2NORM_EPS = 1e-6  # the core's in-kernel q/k L2 norm (docs/DESIGN.md §1.1, `ref::kL2NormEps`)


def l2_normalised(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(sum x^2 + 1e-6) over the last dim in fp64: stage::q and stage::k as the core normalises
    them in-kernel (the C++ dump writes its buffers normalised the same way, docs/DESIGN.md §8)."""
    x = x.detach().to(torch.float64)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2NORM_EPS)


class StageRecorder:
    """Collects stage pieces: forward values now, their gradients when the backward reaches them."""

    def __init__(self) -> None:
        self._blocks: dict[str, list[tuple[tuple[int, ...], list[int], torch.Tensor]]] = {}

    def record(self, stage: str, t: torch.Tensor, rows: Sequence[int], cols: Sequence[int],
               value: torch.Tensor | None = None) -> None:
        """stage::<stage> is `value` (default `t`) viewed as [len(rows), len(cols)]; when `t` is in the
        autograd graph, the gradient reaching `t`, viewed the same way, is stage_grad::<stage>, or for q
        and k (`t` the conv's section, `value` its L2 norm) stage_grad::conv_q / conv_k (names.GRAD_STAGE)."""
        rows, cols = tuple(rows), list(cols)
        self._add("stage::" + stage, t if value is None else value, rows, cols)
        if t.requires_grad:
            grad_name = "stage_grad::" + names.GRAD_STAGE.get(stage, stage)
            t.register_hook(lambda grad: self._add(grad_name, grad, rows, cols))

    def _add(self, name: str, t: torch.Tensor, rows: tuple[int, ...], cols: list[int]) -> None:
        data = t.detach().to(torch.float64).reshape(len(rows), len(cols)).clone()
        self._blocks.setdefault(name, []).append((rows, cols, data))

    def stages(self) -> list[Stage]:
        """One Stage per recorded name: column pieces of the same rows side by side (ordered by their first
        column), then row pieces stacked by first row, so the order hooks fire in does not matter and a
        cp1 dump's rows are in natural order like the C++ dump's (`probe compare` reads rank files as
        written)."""
        return [self._merged(name, blocks) for name, blocks in sorted(self._blocks.items())]

    @staticmethod
    def _merged(name: str, blocks: list[tuple[tuple[int, ...], list[int], torch.Tensor]]) -> Stage:
        by_rows: dict[tuple[int, ...], list[tuple[list[int], torch.Tensor]]] = {}
        for rows, cols, data in blocks:
            by_rows.setdefault(rows, []).append((cols, data))
        rows_out: list[int] = []
        cols_out: list[int] | None = None
        pieces = []
        for rows, parts in sorted(by_rows.items()):  # ascending rows: a cp1 dump's natural order
            parts.sort(key=lambda p: p[0][0])
            cols = [c for part_cols, _ in parts for c in part_cols]
            if cols_out is not None and cols != cols_out:
                raise ValueError(f"{name}: pieces of different rows cover different columns; record every "
                                 "sequence with the same column sections")
            cols_out = cols
            rows_out.extend(rows)
            pieces.append(torch.cat([d for _, d in parts], dim=1))
        return Stage(name, torch.cat(pieces, dim=0), rows_out, cols_out or [])
