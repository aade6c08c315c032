"""Megatron-LM's context_parallel_layout asked token by token (docs/DESIGN.md §2): which global token each CP rank
holds under zigzag and contiguous, and which tokens its one all-to-all sends to each peer, from a snapshot's own code.

Two forms, told apart by what the snapshot holds: 5139086e's module (`get_thd_context_parallel_rank_indices`,
`zigzag_to_contiguous_chunks`, `contiguous_to_zigzag_chunks`) and the dev branch's package (`routes`'
`_build_thd_layout_segments`, `conversion`'s `_local_sbhd_segment_ids` and `convert_cp_partition_mode`).

A conversion runs Megatron's own public function on a tensor whose rows carry their global token, and records its
all-to-all (the rows sent to and received from each peer, and the result): on a world's gloo ranks (`layouts`, W
dividing the world), and in one process for every W (`simulate`): each rank's call gets a group that answers only
size() and rank(), and its all_to_all is answered as all_to_all_single's contract says (rank r receives, from each
peer in turn, the rows that peer's split sizes address to r) from the send buffers every rank's first call recorded.
The gloo records must equal the simulated ones, so the simulation is the collective Megatron makes.

A case is (format, key, W): ("thd", cu_seqlens, W) or ("sbhd", S, W). Token lists are plain ints, local order.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gdn_verify.megatron_upstream import install
from gdn_verify.world import Rank

Case = tuple[str, Any, int]
Record = dict[str, Any]  # {"send": [tokens per peer], "recv": [tokens per peer], "out": tokens}
DIRECTIONS = {"z2c": ("zigzag", "contiguous"), "c2z": ("contiguous", "zigzag")}


def _layout_module() -> Any:
    import megatron.core.context_parallel_layout as cpl

    return cpl


def _is_module_form(cpl: Any) -> bool:
    return hasattr(cpl, "get_thd_context_parallel_rank_indices")


def partition(case: Case, rank: int, layout: str) -> list[int] | None:
    """The global tokens CP rank `rank` holds under `layout`, in local order, from Megatron's own index function;
    None where the snapshot has none (5139086e keeps its SBHD chunks inside the conversion)."""
    import torch

    fmt, key, W = case
    cpl = _layout_module()
    if _is_module_form(cpl):
        if fmt == "sbhd":
            return None
        return [int(t) for t in cpl.get_thd_context_parallel_rank_indices(torch.tensor(key), W, rank, layout)]
    if fmt == "sbhd":
        from megatron.core.context_parallel_layout.conversion import _local_sbhd_segment_ids

        segment = key // (2 * W)
        return [s * segment + i for s in _local_sbhd_segment_ids(layout, W, rank) for i in range(segment)]
    from megatron.core.context_parallel_layout import routes

    cu = routes._compact_thd_cu_seqlens_to_list(torch.tensor(key))
    routes._validate_thd_route_partitioning(cu, W)
    segments, _ = routes._build_thd_layout_segments(cu, W, rank, layout)
    return [t for start, length, _ in sorted(segments, key=lambda s: s[2]) for t in range(start, start + length)]


def batch_zigzag(key: int, group: Any) -> list[int]:
    """SBHD: the tokens Megatron's data path (`get_batch_on_this_cp_rank`, no cu_seqlens) gives this rank of `group`."""
    import torch
    from megatron.core.utils import get_batch_on_this_cp_rank

    batch = get_batch_on_this_cp_rank({"tokens": torch.arange(key)[None, :], "cu_seqlens": None}, cp_group=group)
    return [int(t) for t in batch["tokens"][0]]


def _rows(tokens: Sequence[int]) -> Any:
    """[n, 1, 2] int64: each row holds its token twice (a row torn apart by a conversion shows)."""
    import torch

    return torch.tensor(list(tokens), dtype=torch.int64).view(-1, 1, 1).repeat(1, 1, 2)


def _tokens(x: Any) -> list[int]:
    flat = x.reshape(x.shape[0], -1)
    if not bool((flat == flat[:, :1]).all()):
        raise AssertionError("a conversion tore rows apart: columns of one row hold different tokens")
    return [int(t) for t in flat[:, 0]]


def _split(tokens: list[int], sizes: Sequence[int] | None, peers: int) -> list[list[int]]:
    sizes = list(sizes) if sizes is not None else [len(tokens) // peers] * peers
    out, at = [], 0
    for n in sizes:
        out.append(tokens[at:at + n])
        at += n
    return out


@contextlib.contextmanager
def _all_to_all_answered_by(answer: Any) -> Iterator[None]:
    """Megatron's conversion calls `answer(group, input_, output_split_sizes, input_split_sizes)` for its
    all_to_all while inside."""
    cpl = _layout_module()
    owner: Any = cpl if _is_module_form(cpl) else importlib.import_module(cpl.__name__ + ".conversion")
    real = owner.all_to_all
    owner.all_to_all = lambda group, input_, output_split_sizes_=None, input_split_sizes=None: answer(
        real, group, input_, output_split_sizes_, input_split_sizes)
    try:
        yield
    finally:
        owner.all_to_all = real


def convert(case: Case, group: Any, tokens: Sequence[int], direction: str, answer: Any) -> list[int]:
    """Megatron's own conversion of this rank's rows (`tokens`, the source layout's order) in `direction`,
    its all_to_all answered by `answer`; the tokens of the result in order."""
    import torch

    fmt, key, _ = case
    source, target = DIRECTIONS[direction]
    cu = torch.tensor(key) if fmt == "thd" else None
    cpl = _layout_module()
    with _all_to_all_answered_by(answer):
        if _is_module_form(cpl):
            fn = cpl.zigzag_to_contiguous_chunks if direction == "z2c" else cpl.contiguous_to_zigzag_chunks
            out = fn(_rows(tokens), group, seq_dim=0, cu_seqlens=cu)
        else:
            from megatron.core.context_parallel_layout.conversion import convert_cp_partition_mode

            out = convert_cp_partition_mode(_rows(tokens), source_partition_mode=source,
                                            target_partition_mode=target, seq_dim=0, cu_seqlens=cu, cp_group=group)
    return _tokens(out)


class FakeGroup:
    """A CP group of `size` that only knows its size and this rank (as Megatron's own route tests use one)."""

    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def simulate(case: Case, inputs: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, list[Record]]:
    """Every rank's conversion in both directions in this process; `inputs[layout][r]` is rank r's source tokens."""
    W = case[2]
    result: dict[str, list[Record]] = {}
    for direction, (source, _) in DIRECTIONS.items():
        sent: list[list[list[int]]] = [[] for _ in range(W)]
        records: list[Record] = [{} for _ in range(W)]
        for r in range(W):  # first pass: what each rank sends
            def record_send(real: Any, group: Any, x: Any, out_sizes: Any, in_sizes: Any, r: int = r) -> Any:
                sent[r] = _split(_tokens(x), in_sizes, W)
                return x.new_zeros((sum(out_sizes),) + tuple(x.shape[1:]))
            convert(case, FakeGroup(W, r), inputs[source][r], direction, record_send)
        for r in range(W):  # second pass: each rank receives its peers' rows for it, in peer order
            def deliver(real: Any, group: Any, x: Any, out_sizes: Any, in_sizes: Any, r: int = r) -> Any:
                got = [sent[p][r] for p in range(W)]
                if [len(g) for g in got] != list(out_sizes):
                    raise AssertionError(f"rank {r} expects {list(out_sizes)} rows from its peers, they send "
                                         f"{[len(g) for g in got]}")
                records[r]["send"], records[r]["recv"] = sent[r], got
                return _rows([t for g in got for t in g])
            records[r]["out"] = convert(case, FakeGroup(W, r), inputs[source][r], direction, deliver)
        result[direction] = records
    return result


def _record_real(real: Any, group: Any, x: Any, out_sizes: Any, in_sizes: Any, into: Record, peers: int) -> Any:
    y = real(group, x, out_sizes, in_sizes)
    into["send"], into["recv"] = _split(_tokens(x), in_sizes, peers), _split(_tokens(y), out_sizes, peers)
    return y


def layouts(rank: Rank, tree: str, cases: Sequence[Case], inputs: Mapping[Case, Mapping[str, Sequence[Sequence[int]]]],
            vector_cases: Sequence[Case] = ()) -> dict[str, Any]:
    """A world's rank function, Megatron from `tree`. Every rank: each case whose W divides the world on gloo (the
    world cut into groups of W consecutive ranks), both directions recorded, and SBHD's data-path zigzag. Rank 0
    also: Megatron's own partitions of every case and of `vector_cases`, and every case simulated."""
    import torch.distributed as dist

    install(tree)
    gloo: dict[Case, dict[str, Any]] = {}
    groups: dict[int, Any] = {}
    for case in cases:
        W = case[2]
        if rank.world % W:
            continue
        if W not in groups:  # every rank makes every group of W, in the same order
            made = [dist.new_group(list(range(g * W, (g + 1) * W))) for g in range(rank.world // W)]
            groups[W] = made[rank.rank // W]
        r = rank.rank % W
        here: dict[str, Any] = {}
        for direction, (source, _) in DIRECTIONS.items():
            rec: Record = {}
            rec["out"] = convert(case, groups[W], inputs[case][source][r], direction,
                                 lambda real, g, x, o, i, rec=rec: _record_real(real, g, x, o, i, rec, W))
            here[direction] = rec
        if case[0] == "sbhd":
            here["batch_zigzag"] = batch_zigzag(case[1], groups[W])
        gloo[case] = here
    answer: dict[str, Any] = {"rank": rank.rank, "gloo": gloo}
    if rank.rank == 0:
        answer["partitions"] = {case: {layout: [partition(case, r, layout) for r in range(case[2])]
                                       for layout in ("zigzag", "contiguous")} for case in [*cases, *vector_cases]}
        answer["simulated"] = {case: simulate(case, inputs[case]) for case in cases}
    return answer
