"""python -m gdn_verify.fla_gate: the pre-merge gate for flash-linear-attention itself (docs/fla.md).

    python -m gdn_verify.fla_gate [--quick] [--dtypes fp32,bf16] [--junit FILE] [--keep DIR] [--gdn-verify PATH]
    PYTHONPATH=~/src/flash-linear-attention python -m gdn_verify.fla_gate     # a checkout of FLA

Runs the FLA matrix against whatever `fla` this interpreter imports (a checkout first on PYTHONPATH
included; the gate prints which), its Triton kernels under Triton's interpreter, on local gloo processes:

- `FLA layer cp1`: FLA's own GatedDeltaNet.forward (the path users run) on each case, `probe oracle`; in
  the full gate at fp32 also its twin on inputs nudged by 2 ulps, each tensor within 20 x that spread
  (gdn_verify.noise);
- `FLA KCP layer`: that forward under FLA's context parallelism (KCP) at W = 2 and 4, the CP context handed
  to its two kernel calls, `probe oracle` and `probe cross-mode` against the layer step's image;
- `FLA KCP steps`: the layer's steps one by one at cp1, W = 2 and 4, every stage and the state each rank
  receives recorded, so a failure names its stage and rank; the same two readers;
- `FLA kernels` (fp32): chunk_gated_delta_rule with initial and final states and their gradients,
  fused_recurrent and causal_conv1d with states, varlen over three chunks, `gdn-verify compare` against
  the oracle's kernel reference.

Cases (fp32): fla-spans (a sequence through every rank, spans longer than a chunk, unequal sequences, GVA,
a conv bias, weak gates), fla-strong (the same under the default gates), fla-quick (dk != dv, three value
heads per key head, a middle chunk, a sequence over three ranks) and fla-wide (dk = dv = 128); bf16:
fla-quick. --quick: fla-quick at W = 4 (both forms at fp32, the layer's at bf16). One
world of processes serves every CP size. Output, JUnit and exit codes are `gdn-verify gate`'s
(gdn_verify.gatekit): a line per step as it ends, under it each failing case's first-divergence line and
the command that reproduces it, then the step table (step, cases, result, time) and PASS or FAIL; exit 0
when every step passes, 1 on any failure, 3 on bad input.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gdn_verify import cases, cli, gatekit, kernel, noise
from gdn_verify.adapters import Request, runner
from gdn_verify.adapters.fla import FlaAdapter
from gdn_verify.names import Geometry
from gdn_verify.world import World

SUITE = gatekit.Suite("fla_gate", "gdn-verify fla_gate")

# The spans case: at W = 4 the 264-token sequence runs through all four 80-token spans (more than one
# 64-token chunk each), between a 40- and a 16-token one; GVA (Hv = 2 Hk) and a conv bias. Every length
# is divisible by 2W = 8 (the image's zigzag shards). Weak gates (g ~ 0) keep the state alive across
# every rank boundary, so a state carried wrongly moves every later token; fla-strong is the same packing
# under the default gates (per-token decays down to e^-50): the production decay regime, where FLA's
# chunk-local cumsums set its grad::A_log and grad::dt_bias errors (the cumsum-decay class, docs/DESIGN.md
# §4), and where the carried state fades within a few tokens.
_SMALL = Geometry(32, 1, 2, 16, 16, conv_bias=True)
SPANS = cases.CaseSpec("fla-spans", "THD 40, 264, 16; hidden 32, Hk 1, Hv 2, dk = dv = 16, conv bias, weak gates",
                       _SMALL, "thd", (40, 264, 16), gates="weak")
STRONG = cases.CaseSpec("fla-strong", "THD 40, 264, 16; as fla-spans, default gates", _SMALL, "thd", (40, 264, 16))
# THD 24, 136, the packing of every dtype's matrix, --quick's included: at cp1 the 136-token sequence has a
# middle chunk (64-token chunks on both sides of it), and at W = 4 (40-token spans) it runs through all
# four ranks, three of them whole. fla-quick has dk != dv and three value heads per key head; fla-wide the
# production head dims, dk = dv = 128, so the state kernels' second K and V blocks run.
QUICK = cases.CaseSpec("fla-quick", "THD 24, 136; hidden 32, Hk 1, Hv 3, dk 16, dv 32, conv bias, weak gates",
                       Geometry(32, 1, 3, 16, 32, conv_bias=True), "thd", (24, 136), gates="weak")
WIDE = cases.CaseSpec("fla-wide", "THD 24, 136; hidden 32, Hk 1, Hv 2, dk = dv = 128, conv bias, weak gates",
                      Geometry(32, 1, 2, 128, 128, conv_bias=True), "thd", (24, 136), gates="weak")


@dataclass(frozen=True)
class DtypePlan:
    """What the gate runs at one dtype: the cases of each KCP form (gdn_verify.adapters.fla.kcp: `layer`, FLA's
    GatedDeltaNet.forward, what users run, no stages; `steps`, its steps one by one with every stage, where a
    failure is localised), and whether FLA's kernels and its own spread are judged."""

    dtype: str
    layer: tuple[cases.CaseSpec, ...]
    steps: tuple[cases.CaseSpec, ...]
    kernels: bool = False
    own_spread: bool = False  # the layer's cp1 also judged against FLA's own spread (gdn_verify.noise)

    def specs(self, form: str) -> tuple[cases.CaseSpec, ...]:
        return self.layer if form == "layer" else self.steps


# FLA's kernels are judged at fp32 only: in bf16 FLA keeps its chunk states and intermediates in bf16, and its
# chunk kernel's errors (rel_rms ~4e-3, docs/fla.md) exceed the contract's 2e-3 kernel gate, which the bf16
# layer images' class gates (docs/DESIGN.md §4) do not share.
# FLA's own spread gates fp32 only: in bf16 one storage ulp moves the layer more than FLA's roundings do, so
# its spread exceeds the class gates (docs/fla.md).
FULL = {"fp32": DtypePlan("fp32", (SPANS, STRONG, QUICK, WIDE), (SPANS, STRONG, QUICK), kernels=True,
                          own_spread=True),
        "bf16": DtypePlan("bf16", (QUICK,), (QUICK,))}
# --quick (<= 60 CPU-s): fla-quick at W = 4, in both forms at fp32 (the negative controls' run), the layer's
# form at bf16.
QUICK_PLAN = {"fp32": DtypePlan("fp32", (QUICK,), (QUICK,)), "bf16": DtypePlan("bf16", (QUICK,), ())}


def reproduce(spec: cases.CaseSpec, dtype: str, form: str, world: int, judge: str) -> str:
    out = f"/tmp/{spec.name}-{dtype}-{form}-w{world}"
    dumps = [f"--adapter fla --world {w} --core {form} {cases.geometry_case_name(spec)} --dtype {dtype}"
             for w in sorted({1, world})]
    return "reproduce: " + " && ".join([f"rm -rf {out}", *gatekit.reproduce(dumps, judge, out)])


def reproduce_spread(spec: cases.CaseSpec, dtype: str) -> str:
    """The commands that rebuild a layer image and its nudged twin: `probe oracle --json` gives each tensor's
    error, `compare IMAGE TWIN --json` its spread (rel_rms)."""
    out = f"/tmp/{spec.name}-{dtype}-layer-w1"
    dump = (f"python -m gdn_verify.dump --adapter fla --world 1 --core layer {cases.geometry_case_name(spec)} "
            f"--dtype {dtype}")
    return "reproduce: " + noise.reproduce_twin(out, dump)


def dump(world: World, directory: Path, case: cases.Case, form: str, cp: int) -> None:
    """The gate's one call into FLA's layer: `case`'s image in KCP form `form` at CP = cp (cp1 at 1)."""
    plan = FlaAdapter.plan(Request(world=cp, core=form))
    assert plan is not None
    runner.dump_in(world, FlaAdapter(), case, plan, directory, "fla")


class Matrix:
    """The gate's images: each case's cp1 once per dtype and form, each CP size in a directory holding a copy
    of it."""

    def __init__(self, world: World, root: Path, binary: str) -> None:
        self.world, self.root, self.binary = world, root, binary
        self.made: dict[tuple[str, str, str], Path] = {}  # (case, dtype, form): its cp1 image

    def cp1(self, spec: cases.CaseSpec, dtype: str, form: str) -> Path:
        directory = self.root / f"{spec.name}-{dtype}-{form}-w1"
        dump(self.world, directory, cases.make_case_from_geometry(spec, 0, dtype), form, 1)
        self.made[spec.name, dtype, form] = directory
        return directory

    def chunkwise(self, spec: cases.CaseSpec, dtype: str, form: str, world: int) -> Path:
        directory = self.root / f"{spec.name}-{dtype}-{form}-w{world}"
        shutil.copytree(self.made[spec.name, dtype, form], directory)
        dump(self.world, directory, cases.make_case_from_geometry(spec, 0, dtype), form, world)
        return directory


def layer_step(matrix: Matrix, plan: DtypePlan, step: gatekit.Step) -> None:
    """FLA's GatedDeltaNet.forward at CP = 1 (its Triton kernels) against the oracle, per case, and with
    `own_spread` against FLA's own spread too; the first names the FLA."""
    for spec in plan.layer:
        first = not matrix.made
        directory = matrix.cp1(spec, plan.dtype, "layer")
        if first:
            step.notes.append(f"fla: {_fla_of(directory)}")
        v, report = gatekit.judge_report(matrix.binary, "oracle", directory)
        step.record(spec.name, None if v.passed else v.line, reproduce(spec, plan.dtype, "layer", 1, "oracle"))
        if plan.own_spread and report is not None:
            step.record(f"{spec.name} own spread", own_spread(matrix, spec, plan.dtype, directory, report),
                        reproduce_spread(spec, plan.dtype))


def own_spread(matrix: Matrix, spec: cases.CaseSpec, dtype: str, directory: Path, report: dict) -> str | None:
    """The layer rerun on the case's inputs nudged by noise.ULPS ulps (its twin image beside `directory`):
    None when every tensor's error is within min(class gate, M x FLA's own spread), else the first that is not."""
    twin = directory.with_name(directory.name + "-twin")
    dump(matrix.world, twin, noise.perturbed(cases.make_case_from_geometry(spec, 0, dtype), 0), "layer", 1)
    return noise.twin_verdict(report, directory, twin)


def kcp_step(matrix: Matrix, plan: DtypePlan, form: str, worlds: list[int], step: gatekit.Step) -> None:
    """FLA's KCP in `form` at each W: the oracle (with stages: every stage and boundary_state per rank) and
    cross-mode against the same form's cp1 (for the layer form, the image of the layer step)."""
    for spec in plan.specs(form):
        if form == "steps":
            directory = matrix.cp1(spec, plan.dtype, form)
            v = gatekit.judge(matrix.binary, "oracle", directory)
            step.record(f"{spec.name} cp1 oracle", None if v.passed else v.line,
                        reproduce(spec, plan.dtype, form, 1, "oracle"))
        for w in worlds:
            directory = matrix.chunkwise(spec, plan.dtype, form, w)
            for what in ("oracle", "cross-mode"):
                v = gatekit.judge(matrix.binary, what, directory)
                step.record(f"{spec.name} W={w} {what}", None if v.passed else v.line,
                            reproduce(spec, plan.dtype, form, w, what))


KERNEL_OPS = ("chunk", "fused_recurrent", "conv1d")


def kernels_step(world: World, root: Path, binary: str, dtype: str, step: gatekit.Step,
                 ops: tuple[str, ...] = KERNEL_OPS) -> None:
    """FLA's chunk_gated_delta_rule, fused_recurrent_gated_delta_rule and causal_conv1d (`ops`) against the
    oracle's kernel reference (`gdn-verify reference` + `compare`, the kernel policy of docs/DESIGN.md §4)."""
    world.run(kernel.rank_dumps, str(root), dtype, ops)
    for op in ops:
        out = root / f"kernel-{op}"
        again = (f"reproduce: python -m gdn_verify.kernel --op {op} --dtype {dtype} --no-slot0-grad "
                 f"--out /tmp/fla-kernel-{op}")
        step.record(op, kernel_verdict(binary, out), again)


def kernel_verdict(binary: str, out: Path) -> str | None:
    """None when FLA's kernel files in `out` pass `compare` against the oracle's reference, else why: each
    tensor outside its gate with its rel_rms, or the reader's refusal."""
    ref = kernel.reference(binary, out)
    if ref.returncode != 0:
        return (ref.stderr.strip().splitlines() or [f"gdn-verify reference: exit {ref.returncode}"])[-1]
    report = out / "compare.json"
    r = subprocess.run([binary, "compare", out / "reference.safetensors", out / "outputs.safetensors", "--policy",
                        out / "policy.json", "--json", report], capture_output=True, text=True)
    text = report.read_text() if report.is_file() else None
    v = gatekit.read_verdict(r.returncode, text, r.stderr)
    if v.passed:
        return None
    failing = [f"{t['name']} rel_rms {t['rel_rms']:.3e}" for t in json.loads(text)["tensors"]
               if t["result"] != "pass"] if text else []
    return "; ".join([v.line, *failing])


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.fla_gate", description=__doc__.split("\n\n")[0])
    gatekit.add_options(p, quick="fla-quick at W = 4, each of --dtypes (the negative controls' run)")
    p.add_argument("--dtypes", default="fp32,bf16", help="fp32 | bf16 | fp32,bf16 (default fp32,bf16)")
    return p


def plan(quick: bool, dtypes: str) -> tuple[list[DtypePlan], list[int]]:
    """The plan of each dtype and the CP sizes the gate runs; BadInput naming the fix for --dtypes."""
    wanted = dtypes.split(",")
    if not wanted or any(d not in FULL for d in wanted):
        raise cli.BadInput(f"--dtypes {dtypes}: give a comma-separated list of {', '.join(FULL)}")
    if quick:
        return [QUICK_PLAN[d] for d in wanted], [4]
    return [FULL[d] for d in wanted], [2, 4]


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    plans, worlds = plan(args.quick, args.dtypes)
    binary = gatekit.find_binary(args.binary)
    started = time.monotonic()
    w = ",".join(map(str, worlds))
    with gatekit.scratch(args.keep, "gdnv-fla-gate-") as root, World(max(worlds), env=FlaAdapter.rank_env) as world:
        matrix = Matrix(world, root, binary)
        work: list[tuple[str, gatekit.Work]] = []
        for p in plans:
            d = p.dtype
            work += [(f"FLA layer cp1 ({d})", functools.partial(layer_step, matrix, p)),
                     (f"FLA KCP layer W={w} ({d})", functools.partial(kcp_step, matrix, p, "layer", worlds))]
            if p.steps:
                work.append((f"FLA KCP steps W={w} ({d})", functools.partial(kcp_step, matrix, p, "steps", worlds)))
            if p.kernels:
                work.append((f"FLA kernels ({d})", functools.partial(kernels_step, world, root, binary, d)))
        steps = gatekit.run_steps(work, out)
    return gatekit.finish(SUITE, args, steps, started, out)


def _fla_of(directory: Path) -> str:
    v = json.loads((directory / "meta.json").read_text()).get("versions", {})
    fla = f"{v.get('fla', '?')} from {v.get('fla_path', '?')}"
    return f"{fla} (triton {v.get('triton', '?')}, torch {v.get('torch', '?')})"


def main(argv: list[str] | None = None) -> int:
    return gatekit.main(parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
