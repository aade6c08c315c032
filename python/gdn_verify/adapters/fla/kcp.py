"""flash-linear-attention's context parallelism (KCP, `fla.ops.cp`) across local gloo ranks (docs/fla.md).

    python -m gdn_verify.dump --adapter fla --world 4 --case thd-gva --out DIR

Each rank of a `world.World` runs FLA's GatedDeltaNet layer on its contiguous span of the packed
tokens (docs/DESIGN.md §2, THD contiguous: `[r T/W, (r+1) T/W)`, FLA's `build_cp_context` cut) under
Triton's interpreter (`triton_cpu.enable_fla_cp`), with FLA's CP context handed to its Triton
`causal_conv1d` (the conv halo) and `chunk_gated_delta_rule` (the state carried across ranks), forward
and backward. The parent then puts the spans back in natural order and cuts each rank's zigzag shard of
`out` and `grad_hidden` (docs/DESIGN.md §8; the route of a chunkwise mode, as a permutation), sums the
parameter gradients over the ranks in rank order in fp32; the image is written once, by the caller.

Two core forms (`--core`). `layer` is what users run: FLA's block norm and its own `GatedDeltaNet.forward`
(in 0.6.0 `state_v_first`, the gate and beta's sigmoid inside the chunk kernel), with FLA's CP context
handed to the two kernel calls that take one, since that forward takes none (`kcp_layer.cp_entry`); it
records no stages, as FLA's triton core in one process does not. At `--world 1` it is that forward
unchanged, the cp1 `probe cross-mode` compares its CP images with. `steps` (the default) runs
`GatedDeltaNet.forward`'s steps on FLA's own modules, so that every stage is observable:
`attn_norm`, the six projections, the three `ShortConvolution`s, FLA's Triton gate `fused_gdn_gate`
(`g = -exp(A_log) softplus(alpha + dt_bias)`; in FLA 0.4.2 its layer's torch expression: `kcp_layer`),
`beta = sigmoid(b)`, `chunk_gated_delta_rule` with the in-kernel L2 norm, `FusedRMSNormGated` and `o_proj`. g and beta
are computed outside the chunk kernel, as Megatron-Core calls it, rather than inside (`use_gate_in_kernel`),
so that every named stage of docs/DESIGN.md §1.3 is observable (`kcp_layer`); `--world 1` writes the same
forward's cp1, the reference `probe cross-mode` compares the CP run with. Stages: each rank records its span's
rows, and `stage::boundary_state` row r is the state FLA's KCP hands rank r's first sequence (the return of
`chunk_gated_delta_rule_fwd_h_pre_process`), `stage_grad::boundary_state` row r+1 the gradient rank r's
backward fold computes for the next rank's (`chunk_gated_delta_rule_bwd_dhu_pre_process`), so `probe oracle`
names the rank whose carried state is wrong.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from gdn_verify import images
from gdn_verify.adapters.base import AdapterError, ImageRun, Request, WorldPlan
from gdn_verify.adapters.fla.kcp_layer import boundary_taps, layer_call, layer_forward
from gdn_verify.cases import Case
from gdn_verify.layouts import contiguous_rows, zigzag_rows
from gdn_verify.stages import StageRecorder
from gdn_verify.world import Rank, World

ENV = {"TRITON_INTERPRET": "1"}  # set before the rank imports triton (triton_cpu.enable checks it)
PATH = "fla-triton-interpreter"
DECAY_CORE = "triton"  # both KCP forms run FLA's Triton kernels: FlaAdapter's triton decay class
CORES = {"steps": "FLA's GatedDeltaNet modules step by step with fla.ops.cp's context (contiguous spans): Triton "
                  "causal_conv1d, fused_gdn_gate (torch's gate where FLA has none), chunk_gated_delta_rule (in-kernel "
                  "L2 norm), FusedRMSNormGated, under Triton's interpreter on the CPU",
         "layer": "FLA's GatedDeltaNet.forward with fla.ops.cp's context handed to its causal_conv1d and "
                  "chunk_gated_delta_rule calls (contiguous spans), under Triton's interpreter on the CPU"}


@dataclass
class SpanRun:
    """One rank's answer: its natural rows and what it computed on them (module dtype), its partial
    parameter gradients under Megatron's names, its stages, and the shims in force."""

    rows: list[int]
    out: torch.Tensor
    grad_hidden: torch.Tensor
    grads: dict[str, torch.Tensor]
    stages: list[images.Stage] | None
    shims: list[str]
    versions: dict[str, str]  # gdn_verify, torch, triton, fla and where fla was imported from
    library: dict  # meta.json's "library": the FLA this rank imported (gdn_verify.provenance)
    cpu_s: float  # this rank's CPU seconds for the forward and backward


_groups: dict[int, object] = {}


def cp_groups(rank: Rank) -> dict[int, object]:
    """The process group of ranks 0..n-1 for every n in 2..W (the whole world at n == W). Every rank
    creates each group once, in the same order, as torch.distributed requires, so one world serves every
    smaller CP size."""
    import torch.distributed as dist

    if not _groups and rank.world > 1:
        for n in range(2, rank.world):
            _groups[n] = dist.new_group(list(range(n)))
        _groups[rank.world] = dist.group.WORLD
    return _groups


def cp_context(case: Case, rank: Rank, cp: int):
    """FLA's CP context for the case's packing on this rank of the CP group of ranks 0..cp-1 (contiguous
    layout); None at cp == 1 (FLA's layer without CP)."""
    groups = cp_groups(rank)
    if cp == 1 or rank.rank >= cp:
        return None
    from fla.ops.cp import build_cp_context

    return build_cp_context(cu_seqlens(case), group=groups[cp], conv1d_kernel_size=case.geometry.linear_conv_kernel_dim)


def cu_seqlens(case: Case) -> torch.Tensor:
    """The packed sequences' boundaries (SBHD B = 1: one sequence of S tokens)."""
    return torch.tensor([0] + [e for _, e in case.sequences()], dtype=torch.int32)


def rank_run(rank: Rank, case: Case, stages: bool, cp: int, core: str = "steps") -> SpanRun | None:
    """Rank r < cp's span through FLA's layer in the `core` form, forward and backward, under FLA's KCP over
    ranks 0..cp-1 (a World rank function; cp == 1: the whole case on rank 0, no CP); None on the ranks left
    out. `stages` only with the steps form (`plan` clears it for the layer form)."""
    from gdn_verify import triton_cpu

    shims = triton_cpu.enable_fla_cp()
    context = cp_context(case, rank, cp)
    if rank.rank >= cp:
        return None
    from gdn_verify.adapters.fla import FlaAdapter

    adapter, start = FlaAdapter(), time.process_time()
    model = adapter.build_module(case.geometry, case.torch_dtype, "cpu")
    adapter.load_megatron_params(model, case.params)
    rows = list(contiguous_rows(tokens(case), cp, rank.rank))
    flat = case.hidden_states.reshape(-1, case.geometry.hidden_size)
    hidden = flat[rows].to(case.torch_dtype).requires_grad_()
    recorder = StageRecorder() if stages else None
    g = case.geometry
    with boundary_taps(recorder, Rank(rank.rank, cp), range(g.Hv), g.dk, g.dv):
        if core == "layer":
            out = layer_call(model, hidden, context, cu_seqlens(case))
        else:
            out = layer_forward(model, hidden, context, cu_seqlens(case), recorder, rows)
        out.backward(case.grad_output.reshape(flat.shape)[rows].to(out.dtype))
    grads = adapter.to_megatron({n: p.grad for n, p in model.named_parameters()}, case.geometry, gradients=True)
    return SpanRun(rows, out.detach(), hidden.grad, {n: g.detach() for n, g in grads.items()},
                   recorder.stages() if recorder else None, shims, versions(), FlaAdapter.library(),
                   time.process_time() - start)


def versions() -> dict[str, str]:
    """What computed the image (meta.json `versions`), fla's path included: a user's checkout or a planted copy
    on PYTHONPATH is told apart from the installed package."""
    import fla
    import triton

    import gdn_verify

    return {"gdn_verify": gdn_verify.__version__, "torch": torch.__version__, "triton": triton.__version__,
            "fla": str(getattr(fla, "__version__", "unknown")), "fla_path": str(Path(fla.__file__).parent)}


def tokens(case: Case) -> int:
    return case.hidden_states.shape[0] * case.hidden_states.shape[1]


def check_world(case: Case, cp: int) -> None:
    """ValueError naming the fix when the case cannot run at CP size `cp`: FLA's contiguous cut needs
    T % W == 0, the image's zigzag shards every sequence divisible by 2W (docs/DESIGN.md §2)."""
    if cp < 1:
        raise ValueError(f"--world {cp}: give a CP size of at least 1")
    contiguous_rows(tokens(case), cp, 0)
    zigzag_rows(case, cp, 0)


def rank_dumps(case: Case, runs: list[SpanRun]) -> list[images.RankDump]:
    """Each rank's RankDump from the spans: out and grad_hidden back in natural order, then cut into the
    rank's zigzag shard (docs/DESIGN.md §8); the parameter gradients summed in rank order in fp32. One
    span is the cp1 dump, several the chunkwise one."""
    W = len(runs)
    mode = "cp1" if W == 1 else "chunkwise"
    out = torch.empty(tokens(case), case.geometry.hidden_size, dtype=runs[0].out.dtype)
    grad_hidden = torch.empty_like(out)
    for run in runs:
        out[run.rows], grad_hidden[run.rows] = run.out, run.grad_hidden
    grads = {n: functools.reduce(lambda a, b: a + b, [run.grads[n].float() for run in runs]) for n in runs[0].grads}
    dumps = []
    for r, run in enumerate(runs):
        shard = zigzag_rows(case, W, r)
        dumps.append(images.RankDump(mode, r, W, out[shard], grad_hidden[shard], grads, run.stages))
    return dumps


def plan(request: Request) -> WorldPlan:
    """--world N: chunkwise at N > 1, cp1 at N = 1, on the CPU; AdapterError naming the fix otherwise."""
    if request.world is None or request.world < 1:
        raise AdapterError(f"--world {request.world}: give the number of CP ranks, at least 1")
    want = "cp1" if request.world == 1 else "chunkwise"
    if (request.mode or want) != want:
        raise AdapterError(f"--mode {request.mode} with --world {request.world}: FLA's KCP is the chunkwise mode at "
                           "--world > 1, cp1 at --world 1")
    if request.device != "cpu":
        raise AdapterError("--world runs FLA's Triton kernels on the CPU under the interpreter: drop --device")
    core = request.core or "steps"
    if core not in CORES:
        raise AdapterError(f"--core {core} with --world: FLA's KCP runs --core steps (the default: every stage) or "
                           "--core layer (GatedDeltaNet.forward itself, no stages)")
    return WorldPlan(want, request.world, 1, core, request.stages and core == "steps")


def run(world: World, case: Case, plan: WorldPlan, decay_class: str) -> ImageRun:
    """The case at CP size `plan.size` on the first that many ranks of `world` (a World under ENV): the
    cp1 (size 1) or chunkwise image, for the caller to write."""
    check_world(case, plan.size)
    runs = [r for r in world.run(rank_run, case, plan.stages, plan.size, plan.core) if r is not None]
    meta = {"adapter": "fla", "path": PATH, "device": "cpu", "shims": runs[0].shims, "versions": runs[0].versions,
            "library": runs[0].library, "decay_class": decay_class, "notes": {"fla_path": CORES[plan.core]}}
    processes = f"{plan.size} gloo process{'es' if plan.size > 1 else ''}"
    return ImageRun(rank_dumps(case, runs), "gloo" if plan.size > 1 else "inproc", meta,
                    f"fla ({PATH}, {plan.core}, {processes})")
