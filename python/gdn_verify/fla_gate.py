"""python -m gdn_verify.fla_gate: the pre-merge gate for flash-linear-attention itself (docs/fla.md).

    python -m gdn_verify.fla_gate [--quick] [--dtypes fp32,bf16] [--junit FILE] [--keep DIR] [--gdn-verify PATH]
    PYTHONPATH=~/src/flash-linear-attention python -m gdn_verify.fla_gate     # a checkout of FLA

Runs the FLA matrix against whatever `fla` this interpreter imports (a checkout first on PYTHONPATH
included; the gate prints which): FLA's layer with its Triton kernels under Triton's interpreter at
CP = 1 and FLA's context parallelism (KCP) at W = 2 and 4 over local gloo processes: fp32 on a case with
a sequence spanning every rank, spans longer than a 64-token chunk, unequal sequences, GVA and a conv
bias under weak gates (fla-spans), and again under the default gates (fla-strong); bf16 on a smaller
packing (fla-quick). Each image is
judged by `gdn-verify probe oracle` (every tensor and stage against the fp64 oracle) and each CP image
also by `gdn-verify probe cross-mode` against the same FLA's cp1. One world of processes serves every CP
size. Output, JUnit and exit codes are `gdn-verify gate`'s (gdn_verify.gatekit): a line per step as it
ends, under it each failing case's first-divergence line and the command that reproduces it, then the
step table (step, cases, result, time) and PASS or FAIL; exit 0 when every step passes, 1 on any
failure, 3 on bad input.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import time
from pathlib import Path

from gdn_verify import cases, cli, gatekit
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
# --quick and bf16: one 128-token packing; the 88-token sequence (two chunks) crosses every rank boundary
# at W = 2 and 4.
QUICK = cases.CaseSpec("fla-quick", "THD 40, 88; as fla-spans", _SMALL, "thd", (40, 88), gates="weak")


def geometry_options(spec: cases.CaseSpec) -> str:
    """The dump options that rebuild `spec` (gdn_verify.cases' geometry case name)."""
    return cases.geometry_case_name(spec)


def reproduce(spec: cases.CaseSpec, dtype: str, world: int, judge: str) -> str:
    out = f"/tmp/fla-{dtype}-w{world}"
    dumps = [f"--adapter fla --world {w} {geometry_options(spec)} --dtype {dtype}" for w in sorted({1, world})]
    return "reproduce: " + " && ".join([f"rm -rf {out}", *gatekit.reproduce(dumps, judge, out)])


def dump(world: World, directory: Path, spec: cases.CaseSpec, dtype: str, cp: int) -> None:
    """The gate's one call into FLA: `spec`'s image at `dtype` under FLA's KCP at CP = cp (cp1 at 1)."""
    plan = FlaAdapter.plan(Request(world=cp))
    assert plan is not None
    runner.dump_in(world, FlaAdapter(), cases.make_case_from_geometry(spec, 0, dtype), plan, directory, "fla")


class Matrix:
    """The gate's images: each case's cp1 once per dtype, each CP size in a directory holding a copy of it."""

    def __init__(self, world: World, root: Path, binary: str) -> None:
        self.world, self.root, self.binary = world, root, binary
        self.made: dict[tuple[str, str], Path] = {}  # (case, dtype): its cp1 image

    def cp1(self, spec: cases.CaseSpec, dtype: str) -> Path:
        directory = self.root / f"{spec.name}-{dtype}-w1"
        dump(self.world, directory, spec, dtype, 1)
        self.made[spec.name, dtype] = directory
        return directory

    def chunkwise(self, spec: cases.CaseSpec, dtype: str, world: int) -> Path:
        directory = self.root / f"{spec.name}-{dtype}-w{world}"
        shutil.copytree(self.made[spec.name, dtype], directory)
        dump(self.world, directory, spec, dtype, world)
        return directory


def layer_step(matrix: Matrix, specs: list[cases.CaseSpec], dtype: str, step: gatekit.Step) -> None:
    """FLA's layer at CP = 1 (its Triton kernels) against the oracle, per case; the first names the FLA."""
    for spec in specs:
        first = not matrix.made
        directory = matrix.cp1(spec, dtype)
        if first:
            step.notes.append(f"fla: {_fla_of(directory)}")
        v = gatekit.judge(matrix.binary, "oracle", directory)
        step.record(spec.name, None if v.passed else v.line, reproduce(spec, dtype, 1, "oracle"))


def kcp_step(matrix: Matrix, specs: list[cases.CaseSpec], dtype: str, worlds: list[int], step: gatekit.Step) -> None:
    """FLA's KCP at each W: the oracle (stages, boundary_state per rank) and cross-mode against FLA's cp1."""
    for spec in specs:
        for w in worlds:
            directory = matrix.chunkwise(spec, dtype, w)
            for what in ("oracle", "cross-mode"):
                v = gatekit.judge(matrix.binary, what, directory)
                step.record(f"{spec.name} W={w} {what}", None if v.passed else v.line, reproduce(spec, dtype, w, what))


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.fla_gate", description=__doc__.split("\n\n")[0])
    gatekit.add_options(p, quick="fla-quick at W = 2, each of --dtypes (the negative controls' run)")
    p.add_argument("--dtypes", default="fp32,bf16", help="fp32 | bf16 | fp32,bf16 (default fp32,bf16)")
    return p


DTYPE_CASES = {"fp32": [SPANS, STRONG], "bf16": [QUICK]}


def plan(quick: bool, dtypes: str) -> tuple[list[tuple[list[cases.CaseSpec], str]], list[int]]:
    """The (cases, dtype) pairs and the CP sizes the gate runs; BadInput naming the fix for --dtypes."""
    wanted = dtypes.split(",")
    if not wanted or any(d not in DTYPE_CASES for d in wanted):
        raise cli.BadInput(f"--dtypes {dtypes}: give a comma-separated list of {', '.join(DTYPE_CASES)}")
    if quick:
        return [([QUICK], d) for d in wanted], [2]
    return [(DTYPE_CASES[d], d) for d in wanted], [2, 4]


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    pairs, worlds = plan(args.quick, args.dtypes)
    binary = gatekit.find_binary(args.binary)
    started = time.monotonic()
    with gatekit.scratch(args.keep, "gdnv-fla-gate-") as root, World(max(worlds), env=FlaAdapter.rank_env) as world:
        matrix = Matrix(world, root, binary)
        work: list[tuple[str, gatekit.Work]] = []
        for specs, d in pairs:
            work += [(f"FLA layer cp1 ({d})", functools.partial(layer_step, matrix, specs, d)),
                     (f"FLA KCP W={','.join(map(str, worlds))} ({d})", functools.partial(kcp_step, matrix, specs, d,
                                                                                         worlds))]
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
