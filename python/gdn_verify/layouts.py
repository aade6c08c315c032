"""The token layouts of docs/DESIGN.md §2 as row lists: which natural rows a CP rank holds."""

from __future__ import annotations

from gdn_verify.cases import Case


def zigzag_rows(case: Case, world: int, rank: int) -> list[int]:
    """The natural rows rank `rank` holds in the zigzag layout (docs/DESIGN.md §2): chunks r and 2W-1-r of
    every sequence (THD packed tokens; SBHD the S positions of batch column 0), each ascending."""
    rows: list[int] = []
    for begin, end in case.sequences():
        length = end - begin
        if world == 1:
            rows.extend(range(begin, end))
            continue
        if length % (2 * world):
            raise ValueError(f"sequence of {length} tokens is not divisible by 2W = {2 * world}: pick a case whose "
                             "lengths are")
        chunk = length // (2 * world)
        for c in (rank, 2 * world - 1 - rank):
            rows.extend(range(begin + c * chunk, begin + (c + 1) * chunk))
    return rows


def contiguous_rows(total: int, world: int, rank: int) -> range:
    """The natural rows of rank `rank`'s contiguous span (docs/DESIGN.md §2 THD contiguous, FLA's
    `build_cp_context`): [r T/W, (r+1) T/W) whatever the sequence boundaries; T % W == 0."""
    if total % world:
        raise ValueError(f"{total} tokens are not divisible by W = {world}: the contiguous layout cuts T into W "
                         "equal spans; pick lengths whose sum is")
    span = total // world
    return range(rank * span, (rank + 1) * span)
