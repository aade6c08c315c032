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
size. Prints a progress line per step, the step table (step, cases,
result, time) and, for each failing case, its first-divergence line and the command that reproduces it;
exits 0 when every step passes, 1 on any failure, 3 on bad input. --junit writes JUnit XML like
`gdn-verify gate --junit`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from gdn_verify import cases
from gdn_verify.adapters import Request, runner
from gdn_verify.adapters.fla import FlaAdapter
from gdn_verify.names import Geometry
from gdn_verify.world import RankFailed, World

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 3

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


@dataclass
class Step:
    """One row of the table: `failed` of `cases` cases failed; `detail` the first failure's lines."""

    name: str
    cases: int = 0
    failed: int = 0
    detail: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skip: str = ""

    @property
    def verdict(self) -> str:
        return "skip" if self.skip else ("FAIL" if self.failed else "ok")


def geometry_options(spec: cases.CaseSpec) -> str:
    """The dump options that rebuild `spec` (gdn_verify.cases' geometry case name)."""
    return cases.geometry_case_name(spec)


def reproduce(spec: cases.CaseSpec, dtype: str, world: int, judge: str) -> str:
    out = f"/tmp/fla-{dtype}-w{world}"
    dumps = " && ".join(f"python -m gdn_verify.dump --adapter fla --world {w} {geometry_options(spec)} --dtype {dtype} "
                        f"--out {out}" for w in sorted({1, world}))
    return f"rm -rf {out} && {dumps} && gdn-verify probe {judge} --dir {out}"


def judge(binary: str, what: str, directory: Path) -> tuple[bool, str]:
    """`gdn-verify probe <what> --dir D`: (passed, its first-divergence line or its error)."""
    r = subprocess.run([binary, "probe", what, "--dir", str(directory)], capture_output=True, text=True, timeout=600)
    if r.returncode == 0:
        return True, ""
    lines = (r.stdout + r.stderr).strip().splitlines()
    return False, next((line for line in lines if line.startswith("first divergence")), lines[-1] if lines else
                       f"exit {r.returncode}")


def dump(world: World, directory: Path, case: cases.Case, cp: int) -> None:
    """FLA's layer at CP size `cp` (KCP above 1) on the first `cp` ranks of `world`, written into `directory`."""
    plan = FlaAdapter.plan(Request(world=cp))
    assert plan is not None
    runner.dump_in(world, FlaAdapter(), case, plan, directory, "fla")


class Matrix:
    """The images of one case and dtype: cp1 once, each CP size in a directory holding a copy of it."""

    def __init__(self, world: World, root: Path, binary: str) -> None:
        self.world, self.root, self.binary = world, root, binary

    def cp1(self, spec: cases.CaseSpec, dtype: str) -> Path:
        case = cases.make_case_from_geometry(spec, 0, dtype)
        directory = self.root / f"{spec.name}-{dtype}-w1"
        dump(self.world, directory, case, 1)
        return directory

    def chunkwise(self, spec: cases.CaseSpec, dtype: str, cp1: Path, world: int) -> Path:
        case = cases.make_case_from_geometry(spec, 0, dtype)
        directory = self.root / f"{spec.name}-{dtype}-w{world}"
        shutil.copytree(cp1, directory)
        dump(self.world, directory, case, world)
        return directory


def layer_step(matrix: Matrix, specs: list[cases.CaseSpec], dtype: str, made: dict) -> Step:
    """FLA's layer at CP = 1 (its Triton kernels) against the oracle, per case."""
    step = Step(f"FLA layer cp1 ({dtype})")
    for spec in specs:
        step.cases += 1
        made[spec.name, dtype] = directory = matrix.cp1(spec, dtype)
        ok, line = judge(matrix.binary, "oracle", directory)
        if not ok:
            step.failed += 1
            step.detail += [f"{spec.name}: {line}", "reproduce: " + reproduce(spec, dtype, 1, "oracle")]
    return step


def kcp_step(matrix: Matrix, specs: list[cases.CaseSpec], dtype: str, worlds: list[int], made: dict) -> Step:
    """FLA's KCP at each W: the oracle (stages, boundary_state per rank) and cross-mode against FLA's cp1."""
    step = Step(f"FLA KCP W={','.join(map(str, worlds))} ({dtype})")
    for spec in specs:
        for w in worlds:
            directory = matrix.chunkwise(spec, dtype, made[spec.name, dtype], w)
            for what in ("oracle", "cross-mode"):
                step.cases += 1
                ok, line = judge(matrix.binary, what, directory)
                if not ok:
                    step.failed += 1
                    step.detail += [f"{spec.name} W={w} {what}: {line}",
                                    "reproduce: " + reproduce(spec, dtype, w, what)]
    return step


def find_binary(given: str | None) -> str:
    """--gdn-verify, else $GDNV_BIN, else gdn-verify on PATH, else build/gdn-verify beside python/."""
    candidates = [given, os.environ.get("GDNV_BIN"), shutil.which("gdn-verify"),
                  str(Path(__file__).resolve().parents[2] / "build" / "gdn-verify")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise ValueError("no gdn-verify binary: build it (cmake --build build --target gdn-verify), or pass "
                     "--gdn-verify PATH or set GDNV_BIN")


def junit(steps: list[Step], total: float) -> str:
    """One testsuite, one testcase per step, as `gdn-verify gate --junit` (cli/gate.cpp)."""
    failures, skipped = sum(s.failed > 0 for s in steps), sum(bool(s.skip) for s in steps)
    head = f'tests="{len(steps)}" failures="{failures}" skipped="{skipped}" time="{total:.3f}"'
    rows = ['<?xml version="1.0" encoding="UTF-8"?>', f'<testsuites name="gdn-verify fla_gate" {head}>',
            f'  <testsuite name="fla_gate" {head}>']
    for s in steps:
        body = ""
        if s.skip:
            body = f"<skipped message={quoteattr(s.skip)}/>"
        elif s.failed:
            body = f'<failure message="{s.failed} of {s.cases} cases failed">{escape(chr(10).join(s.detail))}</failure>'
        rows.append(f'    <testcase classname="fla_gate" name={quoteattr(s.name)} time="{s.seconds:.3f}">{body}'
                    f"<system-out>{s.cases} cases</system-out></testcase>")
    return "\n".join(rows + ["  </testsuite>", "</testsuites>", ""])


class Parser(argparse.ArgumentParser):
    """argparse whose errors are the project's one line, exit 3 (docs/DESIGN.md §5)."""

    def error(self, message: str):
        raise ValueError(f"{message}: see python -m gdn_verify.fla_gate --help")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m gdn_verify.fla_gate", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fla-quick at W = 2, fp32 only (the negative controls' run)")
    p.add_argument("--dtypes", default="fp32,bf16", help="fp32 | bf16 | fp32,bf16 (default fp32,bf16)")
    p.add_argument("--junit", default=None, help="also write the result as JUnit XML to FILE")
    p.add_argument("--keep", default=None, help="write the images into DIR (a fresh directory) and keep them")
    p.add_argument("--gdn-verify", dest="binary", default=None, help="the gdn-verify binary (default $GDNV_BIN, PATH)")
    return p


DTYPE_CASES = {"fp32": [SPANS, STRONG], "bf16": [QUICK]}


def plan(quick: bool, dtypes: str) -> tuple[list[tuple[list[cases.CaseSpec], str]], list[int]]:
    """The (cases, dtype) pairs and the CP sizes the gate runs; ValueError naming the fix for --dtypes."""
    wanted = dtypes.split(",")
    if not wanted or any(d not in DTYPE_CASES for d in wanted):
        raise ValueError(f"--dtypes {dtypes}: give a comma-separated list of {', '.join(DTYPE_CASES)}")
    if quick:
        return [([QUICK], d) for d in wanted], [2]
    return [(DTYPE_CASES[d], d) for d in wanted], [2, 4]


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    pairs, worlds = plan(args.quick, args.dtypes)
    binary = find_binary(args.binary)
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        raise ValueError(f"--keep {args.keep} is not empty: give a fresh directory")
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gdnv-fla-gate-"))
    root.mkdir(parents=True, exist_ok=True)
    steps: list[Step] = []
    start = time.monotonic()
    try:
        with World(max(worlds), env=FlaAdapter.rank_env) as world:
            matrix, made = Matrix(world, root, binary), dict[tuple, Path]()
            work = []
            for specs, dtype in pairs:
                work += [lambda s=specs, d=dtype: layer_step(matrix, s, d, made),
                         lambda s=specs, d=dtype: kcp_step(matrix, s, d, worlds, made)]
            for i, job in enumerate(work):
                t0 = time.monotonic()
                step = job()
                step.seconds = time.monotonic() - t0
                steps.append(step)
                if i == 0 and made:
                    print(f"fla: {_fla_of(next(iter(made.values())))}", file=out)
                print(f"[{i + 1}/{len(work)}] {step.name} ... {step.verdict}", file=out, flush=True)
                for line in step.detail:
                    print("    " + line, file=out)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    total = time.monotonic() - start
    print(f"\n{'step':<28}{'cases':>8}{'result':>8}{'time':>10}", file=out)
    for s in steps:
        print(f"{s.name:<28}{s.cases:>8}{s.verdict:>8}{s.seconds:>9.2f}s", file=out)
    failed = sum(s.failed > 0 for s in steps)
    print(f"fla_gate{' --quick' if args.quick else ''}: {len(steps)} steps, {failed} failed, {total:.1f} s\n"
          f"{'FAIL' if failed else 'PASS'}", file=out)
    if args.junit:
        Path(args.junit).write_text(junit(steps, total))
    return EXIT_FAIL if failed else EXIT_PASS


def _fla_of(directory: Path) -> str:
    import json

    v = json.loads((directory / "meta.json").read_text()).get("versions", {})
    fla = f"{v.get('fla', '?')} from {v.get('fla_path', '?')}"
    return f"{fla} (triton {v.get('triton', '?')}, torch {v.get('torch', '?')})"


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parser().parse_args(argv))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RankFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
