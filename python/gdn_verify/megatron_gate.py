"""python -m gdn_verify.megatron_gate: the pre-merge gate for a Megatron-Core GatedDeltaNet (docs/DESIGN.md §14).

    python -m gdn_verify.megatron_gate [--quick] [--junit FILE] [--megatron PATH] [--gdnv BIN]

Judges whatever Megatron is importable (a checkout with --megatron PATH, or first on PYTHONPATH) on gloo
ranks started once per world size, as `gdn-verify gate` does for the C++ modes. Steps, in order:

- `oracle`: Megatron's cp1 image of each case, every tensor and stage, `gdn-verify probe oracle`;
- `cp-vs-cp1`: headwise at W = 2, 4 and TP 2 x CP 2 (THD and SBHD, fp32 and bf16) against Megatron's own
  cp1 at the same TP, `gdn-verify probe cross-mode`;
- `chunkwise`: the same for `linear_cp_mode` = chunkwise where the Megatron has it (else skipped, naming
  which Megatron has it);
- `controls`: bugs planted in a copy of the Megatron under test (`PLANTS`) must fail cross-mode with a
  first divergence naming the stage and rank; the step passes when every control is caught.

Prints a line per case, then the step table (step, cases, result, time); each failing case is printed
with its reproduce commands. --junit writes the table as JUnit XML. Exit 0 only when every step passes
(a skipped step does not fail), 1 otherwise, 3 on bad input.
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
from typing import Any
from xml.sax.saxutils import escape, quoteattr

EXIT_BAD_INPUT = 3
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One image: a probe case at a dtype, core form and TP size, its cp1 and (for CP) one CP world."""

    case: str
    dtype: str
    core: str
    tp: int = 1
    world: int = 1  # the CP world's size (TP x CP); 1: cp1 only

    @property
    def label(self) -> str:
        where = f"W{self.world}" + (f"-tp{self.tp}" if self.tp > 1 else "")
        return f"{self.case}-{self.dtype}-{self.core}-{where}"


ORACLE = [Case("thd-gva", "fp32", "fla-triton"), Case("sbhd", "fp32", "torch-chunk"),
          Case("sbhd", "bf16", "fla-triton"), Case("sbhd", "fp32", "torch-chunk", tp=2)]
CP = [Case("thd-gva", "fp32", "fla-triton", world=2), Case("thd-gva", "fp32", "fla-triton", world=4),
      Case("thd-gva", "bf16", "fla-triton", world=2), Case("sbhd", "fp32", "torch-chunk", world=2),
      Case("sbhd", "bf16", "fla-triton", world=4), Case("sbhd", "fp32", "torch-chunk", tp=2, world=4)]
QUICK_ORACLE = [Case("sbhd", "fp32", "torch-chunk")]
QUICK_CP = [Case("sbhd", "fp32", "torch-chunk", world=2), Case("sbhd", "fp32", "torch-chunk", tp=2, world=4)]

# Bugs planted in a copy of Megatron's GDN (megatron/core/ssm/gated_delta_net/common.py): the line, its
# replacement, and a case where it alone acts with the stage it must be caught at.
COMMON = Path("megatron/core/ssm/gated_delta_net/common.py")
PLANTS = {
    # The inverse of the all-to-all's head permutation applied to the gated norm on its way back (identity
    # at CP = 1): head blocks land in the wrong columns of out_proj's input.
    "head_perm_back": (
        "        # CP all to all: HP to CP\n",
        "        # CP all to all: HP to CP\n"
        "        norm_out_hp = norm_out_hp.index_select(-1, torch.argsort(_build_head_perm_for_split_sections(\n"
        "            (norm_out_hp.shape[-1] // 2,) * 2, self.cp_size, norm_out_hp.device)))\n"),
    # The packed (THD) zigzag split off by one chunk (each token's load-balanced chunk id + 1, cyclically):
    # the mixer sees every sequence's chunks rotated.
    "thd_zigzag_off_by_one": (
        "    # In the per-sequence load-balanced layout each rank owns load-balanced\n",
        "    lb_chunk = (lb_chunk + 1) % (2 * cp_size)\n"
        "    # In the per-sequence load-balanced layout each rank owns load-balanced\n"),
}
# (case, the first-divergence text it must produce): SBHD never reaches the THD code, so only the first
# bug acts there; in THD the second acts first (the conv precedes the gated norm).
CONTROLS = [(Case("sbhd", "fp32", "torch-chunk", world=2), "head_perm_back",
             "first divergence: stage::gated_norm (forward, rank 0 of 2"),
            (Case("thd-gva", "fp32", "fla-triton", world=2), "thd_zigzag_off_by_one",
             "first divergence: stage::conv (forward, rank 0 of 2")]


@dataclass
class Step:
    name: str
    cases: int = 0
    failed: list[str] = field(default_factory=list)  # one line per failing case, with its reproduce commands
    skip_reason: str = ""
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return "skip" if self.skip_reason else "FAIL" if self.failed else "pass"


def planted_copy(root: Path, megatron_dir: Path) -> Path:
    """`megatron_dir` (a `megatron` package) copied under root with every PLANTS bug; root."""
    shutil.copytree(megatron_dir, root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    source = (root / COMMON).read_text()
    for name, (right, wrong) in PLANTS.items():
        if source.count(right) != 1:
            raise ValueError(f"{name}: the planted line is not in this Megatron's {COMMON}")
        source = source.replace(right, wrong)
    (root / COMMON).write_text(source)
    return root


class Gate:
    """The worlds (one per size, started on first use), the gdn-verify binary and the scratch directory."""

    def __init__(self, gdnv: Path, megatron_path: str | None, scratch: Path) -> None:
        from gdn_verify.adapters import megatron

        self.gdnv, self.megatron_path, self.scratch = gdnv, megatron_path, scratch
        self.adapter = megatron
        self.worlds: dict[tuple[int, str | None], Any] = {}

    def world(self, size: int, path: str | None = None):
        """A World of `size` ranks importing Megatron from `path` (else the gate's Megatron)."""
        from gdn_verify.world import World

        path = path or self.megatron_path
        if (size, path) not in self.worlds:
            if path:
                sys.path.insert(0, path)  # ranks start with the parent's path: they import this Megatron
            try:
                self.worlds[(size, path)] = World(size, env=self.adapter.MegatronAdapter.rank_env).__enter__()
            finally:
                if path:
                    sys.path.remove(path)
        return self.worlds[(size, path)]

    def close(self) -> None:
        for w in self.worlds.values():
            w.close()

    def dump(self, c: Case, mode: str, directory: Path, path: str | None = None) -> None:
        from gdn_verify.adapters import Request, runner
        from gdn_verify.cases import make_case

        world, adapter = c.tp if mode == "cp1" else c.world, self.adapter.MegatronAdapter()
        plan = adapter.plan(Request(core=c.core, mode=mode, world=world, tp=c.tp, source=path or self.megatron_path))
        runner.dump_in(self.world(world, path), adapter, make_case(c.case, 0, c.dtype), plan, directory, "megatron")

    def judge(self, reader: str, directory: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.gdnv), "probe", reader, "--dir", str(directory)], capture_output=True,
                              text=True, timeout=600)


def reproduce(c: Case, modes: list[str], reader: str, megatron_path: str | None) -> str:
    """The commands that rerun one case from a shell."""
    env = f"PYTHONPATH={megatron_path}:$PYTHONPATH " if megatron_path else ""
    lines = []
    for mode in modes:
        world = c.tp if mode == "cp1" else c.world
        lines.append(f"  {env}python -m gdn_verify.dump --adapter megatron --case {c.case} --dtype {c.dtype} "
                     f"--core {c.core} --mode {mode} --world {world} --tp {c.tp} --out /tmp/{c.label}")
    lines.append(f"  gdn-verify probe {reader} --dir /tmp/{c.label}")
    return "\n".join(lines)


def verdict_line(report: str) -> str:
    """A reader's first-divergence line, else its last line (the counts line follows the verdict)."""
    lines = [line for line in report.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("first divergence")), lines[-1] if lines else "(no report)")


def run_cases(gate: Gate, step: Step, cases: list[Case], mode: str, reader: str) -> None:
    """Dumps each case's cp1 (and, for CP, its `mode` world) into a fresh directory and judges it."""
    for c in cases:
        directory = gate.scratch / step.name / c.label
        modes = ["cp1"] + ([mode] if c.world > 1 else [])
        try:
            for m in modes:
                gate.dump(c, m, directory)
            r = gate.judge(reader, directory)
            ok, why = r.returncode == 0, verdict_line(r.stdout or r.stderr)
        except Exception as e:  # noqa: BLE001 - a case that cannot run is a failing case, named
            ok, why = False, f"{type(e).__name__}: {' '.join(str(e).split())}"
        step.cases += 1
        print(f"  {step.name} {c.label}: {'pass' if ok else 'FAIL'}" + ("" if ok else f": {why}"), flush=True)
        if not ok:
            step.failed.append(f"{c.label}: {why}\n{reproduce(c, modes, reader, gate.megatron_path)}")


def run_controls(gate: Gate, step: Step, megatron_dir: Path) -> None:
    """Each planted bug must make cross-mode FAIL with its first-divergence line."""
    root = str(planted_copy(gate.scratch / "planted", megatron_dir))
    for c, bug, first in CONTROLS:
        directory = gate.scratch / step.name / bug
        gate.dump(c, "cp1", directory)
        gate.dump(c, "headwise", directory, path=root)
        r = gate.judge("cross-mode", directory)
        caught = r.returncode == 1 and first in r.stdout
        step.cases += 1
        print(f"  controls {bug} ({c.label}): {'caught' if caught else 'MISSED'}: {verdict_line(r.stdout)}", flush=True)
        if not caught:
            step.failed.append(f"{bug}: expected '{first}', got: {verdict_line(r.stdout or r.stderr)}")


def table(steps: list[Step]) -> str:
    rows = [f"{'step':<12}{'cases':>6}  {'result':<7}{'time':>9}"]
    rows += [f"{s.name:<12}{s.cases:>6}  {s.verdict:<7}{s.seconds:>8.1f}s" + (f"  ({s.skip_reason})" if s.skip_reason
                                                                              else "") for s in steps]
    return "\n".join(rows)


def junit(steps: list[Step], total: float) -> str:
    failures, skipped = sum(bool(s.failed) for s in steps), sum(bool(s.skip_reason) for s in steps)
    head = f'tests="{len(steps)}" failures="{failures}" skipped="{skipped}" time="{total:.3f}"'
    out = ['<?xml version="1.0" encoding="UTF-8"?>', f'<testsuites name="megatron gate" {head}>',
           f'  <testsuite name="megatron_gate" {head}>']
    for s in steps:
        body = (f"<skipped message={quoteattr(s.skip_reason)}/>" if s.skip_reason else
                f'<failure message="{len(s.failed)} of {s.cases} cases failed">{escape(chr(10).join(s.failed))}'
                "</failure>" if s.failed else "")
        out.append(f'    <testcase classname="megatron_gate" name={quoteattr(s.name)} time="{s.seconds:.3f}">{body}'
                   f"<system-out>{s.cases} cases</system-out></testcase>")
    out += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gdn_verify.megatron_gate", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smaller matrix (SBHD fp32, W 2 and TP 2 x CP 2)")
    p.add_argument("--junit", default=None, help="also write the result as JUnit XML to FILE")
    p.add_argument("--megatron", default=None,
                   help="a Megatron checkout (the directory holding megatron/) to judge instead of the importable one")
    p.add_argument("--gdnv", default=os.environ.get("GDNV_BIN", str(REPO / "build" / "gdn-verify")),
                   help="the gdn-verify binary (default $GDNV_BIN, else build/gdn-verify)")
    p.add_argument("--no-controls", action="store_true", help="skip the planted-bug controls")
    return p


def bad_input(args: argparse.Namespace) -> str | None:
    if not Path(args.gdnv).is_file():
        return f"no gdn-verify binary at {args.gdnv}: build it (./run build) or pass --gdnv BIN"
    if args.megatron and not (Path(args.megatron) / COMMON).is_file():
        return f"--megatron {args.megatron} holds no {COMMON}: pass the directory holding megatron/"
    return None


def megatron_dir(path: str | None) -> Path:
    """The `megatron` package the gate judges (for the controls' copy)."""
    if path:
        return Path(path).resolve() / "megatron"
    import importlib.util

    spec = importlib.util.find_spec("megatron")  # the namespace package: nothing of Megatron is imported
    assert spec is not None and spec.submodule_search_locations is not None, "megatron is not importable"
    return next(Path(p) for p in spec.submodule_search_locations if (Path(p) / "core").is_dir())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    why = bad_input(args)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    path = str(Path(args.megatron).resolve()) if args.megatron else None
    started = time.monotonic()
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="gdnv-megatron-gate-") as scratch:
        gate = Gate(Path(args.gdnv), path, Path(scratch))
        try:
            plan = [("oracle", QUICK_ORACLE if args.quick else ORACLE, "cp1", "oracle"),
                    ("cp-vs-cp1", QUICK_CP if args.quick else CP, "headwise", "cross-mode"),
                    ("chunkwise", QUICK_CP if args.quick else CP, "chunkwise", "cross-mode")]
            for name, cases, mode, reader in plan:
                step, t0 = Step(name), time.monotonic()
                if mode == "chunkwise" and not _has_linear_cp_mode(gate, path):
                    step.skip_reason = "this Megatron has no linear_cp_mode (Megatron-LM's development branch has it)"
                else:
                    run_cases(gate, step, cases, mode, reader)
                step.seconds = time.monotonic() - t0
                steps.append(step)
            step, t0 = Step("controls"), time.monotonic()
            if args.no_controls:
                step.skip_reason = "--no-controls"
            else:
                run_controls(gate, step, megatron_dir(path))
            step.seconds = time.monotonic() - t0
            steps.append(step)
        finally:
            gate.close()
    total = time.monotonic() - started
    print(table(steps))
    for s in steps:
        for f in s.failed:
            print(f"FAIL {s.name} {f}")
    if args.junit:
        from gdn_verify.safetensors_file import write_atomic

        write_atomic(Path(args.junit), junit(steps, total).encode())
    failed = any(s.failed for s in steps)
    print(f"megatron gate: {'FAIL' if failed else 'PASS'} in {total:.1f} s")
    return 1 if failed else 0


def _has_linear_cp_mode(gate: Gate, path: str | None) -> bool:
    """Asked of one rank of the gate's Megatron (the parent may import another)."""
    return gate.world(1, path).run(gate.adapter.rank_has_linear_cp_mode, path)[0]


if __name__ == "__main__":
    sys.exit(main())
