"""python -m gdn_verify.megatron_gate: the pre-merge gate for a Megatron-Core GatedDeltaNet (docs/DESIGN.md §14).

    python -m gdn_verify.megatron_gate [--quick] [--junit FILE] [--keep DIR] [--gdn-verify PATH] [--megatron PATH]
                                       [--no-controls]

Judges whatever Megatron is importable (a checkout with --megatron PATH, or first on PYTHONPATH) on gloo
ranks started once per world size, as `gdn-verify gate` does for the C++ modes. Steps, in order:

- `oracle`: Megatron's cp1 image of each case, every tensor and stage, `gdn-verify probe oracle`; at fp32
  and TP 1 on FLA's kernels also its twin on inputs nudged by 2 ulps, each tensor within 20 x that spread
  (gdn_verify.noise);
- `cp-vs-cp1`: headwise at W = 2, 4 and TP 2 x CP 2 (THD and SBHD, fp32 and bf16) against Megatron's own
  cp1 at the same TP, `gdn-verify probe cross-mode`;
- `chunkwise`: `linear_cp_mode` = chunkwise (FLA's Triton path, THD and SBHD, W = 2 and 4, TP 2 x CP 2, fp32
  and bf16) where the Megatron has it, else skipped naming which Megatron has it;
- `controls`: each bug class of gdn_verify.megatron_controls the Megatron runs (headwise's three; with
  linear_cp_mode also chunkwise's dropped halo, dropped state and off-by-one conversion), planted alone in
  a copy of the Megatron under test, must fail cross-mode with a first divergence naming its stage and
  the rank that computed it; the step passes when every control is caught.

Besides the probe cases, every step and --quick run the gate's own mgt-prod (PROD): production's head dims,
a conv bias and, at chunkwise W = 4, a sequence through every rank's contiguous span.

Any of Megatron's GDN shapes runs (0.19.2's package, commit 5139086e's single module, the dev branch's
package): the adapter finds what it needs by capability (gdn_verify.adapters.megatron).

Output, JUnit and exit codes are `gdn-verify gate`'s (gdn_verify.gatekit): a line per step as it ends,
under it each failing case with its reproduce commands (and each control caught, with its first
divergence), then the step table (step, cases, result, time) and PASS or FAIL. Exit 0 only when every
step passes (a skipped step does not fail), 1 otherwise, 3 on bad input.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdn_verify import cases, cli, gatekit, megatron_controls, noise
from gdn_verify.names import Geometry

SUITE = gatekit.Suite("megatron_gate", "megatron gate")


@dataclass(frozen=True)
class Case:
    """One image: a probe case at a dtype, core form and TP size, its cp1 and (for CP) one CP world."""

    case: str
    dtype: str
    core: str
    tp: int = 1
    world: int = 1  # the CP world's size (TP x CP); 1: cp1 only
    own_spread: bool = False  # cp1 also judged against Megatron's own spread (gdn_verify.noise)

    @property
    def label(self) -> str:
        where = f"W{self.world}" + (f"-tp{self.tp}" if self.tp > 1 else "")
        return f"{self.case}-{self.dtype}-{self.core}-{where}"


# The production-like case: production GDN's head dims (dk = dv = 128), GVA 2 and a conv bias (whose CP split
# no probe case runs), under weak gates so the state crosses every rank boundary; at chunkwise W = 4 its one
# sequence runs through all four contiguous spans. One sequence is one chunk: under half the time of three
# under Triton's interpreter. 64 is divisible by 2W = 8 (the zigzag shards).
PROD = cases.CaseSpec("mgt-prod", "THD, one 64-token sequence; hidden 64, Hk 2, Hv 4, dk = dv = 128, conv bias, "
                      "weak gates", Geometry(64, 2, 4, 128, 128, conv_bias=True), "thd", (64,), gates="weak")
GATE_CASES = {PROD.name: PROD}


def case_spec(name: str) -> cases.CaseSpec:
    """A gate case (GATE_CASES) or a probe case (gdn_verify.cases)."""
    return GATE_CASES.get(name) or cases.case_spec(name)


def case_options(name: str) -> str:
    """The dump options that rebuild the case: `--case` for a probe case, the geometry options for a gate case."""
    return cases.geometry_case_name(GATE_CASES[name]) if name in GATE_CASES else f"--case {name}"


# fp32 cp1 at TP 1 on FLA's kernels also meets Megatron's own spread (docs/DESIGN.md §4). Not on
# torch_chunk_gated_delta_rule: its decay gradients' error is smooth in the inputs (a cumsum of g, then exp of
# differences), so a nudge shows a small part of it: error/spread up to 32 over 20 seeds, one of them past 20 x.
# bf16 keeps its class gates (docs/fla.md).
ORACLE = [Case("thd-gva", "fp32", "fla-triton", own_spread=True), Case("sbhd", "fp32", "torch-chunk"),
          Case("sbhd", "bf16", "fla-triton"), Case("sbhd", "fp32", "torch-chunk", tp=2),
          Case("mgt-prod", "fp32", "fla-triton", own_spread=True)]
CP = [Case("thd-gva", "fp32", "fla-triton", world=2), Case("thd-gva", "fp32", "fla-triton", world=4),
      Case("mgt-prod", "fp32", "fla-triton", world=2), Case("mgt-prod", "bf16", "fla-triton", world=2),
      Case("sbhd", "fp32", "torch-chunk", world=2), Case("sbhd", "bf16", "fla-triton", world=4),
      Case("sbhd", "fp32", "torch-chunk", tp=2, world=4)]
# chunkwise hands FLA's cp_context to its kernels: FLA's Triton path only (Megatron's torch chunk form refuses it)
# mgt-prod at W = 4 carries one sequence's state across three boundaries (thd-gva's W = 4 across two)
CHUNKWISE = [Case("thd-gva", "fp32", "fla-triton", world=2), Case("mgt-prod", "fp32", "fla-triton", world=4),
             Case("mgt-prod", "bf16", "fla-triton", world=2), Case("sbhd", "fp32", "fla-triton", world=2),
             Case("sbhd", "bf16", "fla-triton", world=4), Case("thd-gva", "fp32", "fla-triton", tp=2, world=4)]
QUICK_ORACLE = [Case("sbhd", "fp32", "torch-chunk")]
# mgt-prod's headwise: the conv bias's CP split, whose cp1 the conv_bias_split control shares
QUICK_CP = [Case("sbhd", "fp32", "torch-chunk", world=2), Case("sbhd", "fp32", "torch-chunk", tp=2, world=4),
            Case("mgt-prod", "fp32", "fla-triton", world=2)]
QUICK_CHUNKWISE = [Case("thd-gva", "fp32", "fla-triton", world=2), Case("sbhd", "fp32", "fla-triton", world=2)]
NO_LINEAR_CP_MODE = "this Megatron has no linear_cp_mode (Megatron-LM's development branch and commit 5139086e have it)"


class Gate:
    """The worlds (one per size, started on first use), the gdn-verify binary and the scratch directory."""

    def __init__(self, binary: str, megatron_path: str | None, scratch: Path) -> None:
        from gdn_verify.adapters import megatron

        self.binary, self.megatron_path, self.scratch = binary, megatron_path, scratch
        self.adapter = megatron
        # this process checks each plan's rules on the Megatron under test before its ranks run it
        megatron.import_from(megatron_path)
        self.worlds: dict[tuple[int, str | None], Any] = {}

    def world(self, size: int, path: str | None = None):
        """A World of `size` ranks importing Megatron from `path` (else the gate's Megatron)."""
        from gdn_verify.world import World

        path = path or self.megatron_path
        if (size, path) not in self.worlds:
            self.worlds[(size, path)] = World(size, env=self.adapter.MegatronAdapter.rank_env,
                                              path=[path] if path else []).__enter__()
        return self.worlds[(size, path)]

    def close(self) -> None:
        for w in self.worlds.values():
            w.close()

    def dump(self, c: Case, mode: str, directory: Path, path: str | None = None) -> None:
        """Case `c`'s `mode` dump into `directory`. The gate's Megatron computes each cp1 (a case at a dtype,
        core form and TP size) once, into scratch/cp1/; a fresh directory's cp1 is a copy of it, the files
        the dump would write (cp1 is deterministic), so the steps and controls sharing a case share its cp1."""
        if mode == "cp1" and path is None and not directory.exists():
            cached = self.scratch / "cp1" / f"{c.case}-{c.dtype}-{c.core}-tp{c.tp}"
            if not cached.exists():
                try:
                    self.megatron_dump(c, mode, cached)
                except BaseException:
                    shutil.rmtree(cached, ignore_errors=True)  # a failed cp1 is never copied
                    raise
            shutil.copytree(cached, directory)
        else:
            self.megatron_dump(c, mode, directory, path)

    def megatron_dump(self, c: Case, mode: str, directory: Path, path: str | None = None,
                      nudged: bool = False) -> None:
        """The gate's one call into Megatron: case `c`'s `mode` dump into `directory` (its inputs `nudged` by
        noise.ULPS ulps: the twin of the own-spread check)."""
        from gdn_verify.adapters import Request, runner

        world, adapter = c.tp if mode == "cp1" else c.world, self.adapter.MegatronAdapter()
        plan = adapter.plan(Request(core=c.core, mode=mode, world=world, tp=c.tp, source=path or self.megatron_path))
        case = cases.make_case_from_geometry(case_spec(c.case), 0, c.dtype)
        if nudged:
            case = noise.perturbed(case, 0)
        runner.dump_in(self.world(world, path), adapter, case, plan, directory, "megatron")

    def judge(self, reader: str, directory: Path) -> gatekit.Verdict:
        return gatekit.judge(self.binary, reader, directory)


def dump_options(c: Case, mode: str) -> str:
    return (f"--adapter megatron {case_options(c.case)} --dtype {c.dtype} --core {c.core} --mode {mode} "
            f"--world {c.tp if mode == 'cp1' else c.world} --tp {c.tp}")


def reproduce(c: Case, modes: list[str], reader: str, megatron_path: str | None) -> str:
    """The commands that rerun one case from a shell."""
    env = f"PYTHONPATH={megatron_path}:$PYTHONPATH " if megatron_path else ""
    dumps = [dump_options(c, mode) for mode in modes]
    return "\n".join("  " + line for line in gatekit.reproduce(dumps, reader, f"/tmp/{c.label}", env))


def reproduce_spread(c: Case, megatron_path: str | None) -> str:
    """The commands that rebuild a cp1 image and its nudged twin: `probe oracle` gives each tensor's error,
    `compare IMAGE TWIN` its spread."""
    env = f"PYTHONPATH={megatron_path}:$PYTHONPATH " if megatron_path else ""
    out, dump = f"/tmp/{c.label}", f"{env}python -m gdn_verify.dump {dump_options(c, 'cp1')}"
    return "  " + noise.reproduce_twin(out, dump)


def run_cases(gate: Gate, cases: list[Case], mode: str, reader: str, step: gatekit.Step) -> None:
    """Dumps each case's cp1 (and, for CP, its `mode` world) into a fresh directory and judges it."""
    for c in cases:
        directory = gate.scratch / step.name / c.label
        modes = ["cp1"] + ([mode] if c.world > 1 else [])
        report = None
        try:
            for m in modes:
                gate.dump(c, m, directory)
            v, report = gatekit.judge_report(gate.binary, reader, directory)
            why = None if v.passed else v.line
        except Exception as e:  # noqa: BLE001 - a case that cannot run is a failing case, named
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
        step.record(c.label, why, reproduce(c, modes, reader, gate.megatron_path))
        if c.own_spread and report is not None:
            step.record(f"{c.label} own spread", own_spread(gate, c, directory, report),
                        reproduce_spread(c, gate.megatron_path))


def own_spread(gate: Gate, c: Case, directory: Path, report: dict) -> str | None:
    """Megatron's cp1 rerun on the case's inputs nudged by noise.ULPS ulps (its twin beside `directory`): None
    when every tensor's error is within min(class gate, M x Megatron's own spread), else the first that is not."""
    twin = directory.with_name(directory.name + "-twin")
    gate.megatron_dump(c, "cp1", twin, nudged=True)
    return noise.twin_verdict(report, directory, twin)


def has_linear_cp_mode(gate: Gate) -> bool:
    """Asked of one rank of the gate's Megatron (the parent may import another)."""
    return gate.world(1).run(gate.adapter.rank_has_linear_cp_mode, gate.megatron_path)[0]


def chunkwise(gate: Gate, cases: list[Case], step: gatekit.Step) -> None:
    """The chunkwise cases where the gate's Megatron has `linear_cp_mode`, else skipped naming who has it."""
    if has_linear_cp_mode(gate):
        run_cases(gate, cases, "chunkwise", "cross-mode", step)
    else:
        step.skip = NO_LINEAR_CP_MODE


def run_controls(gate: Gate, checkout: Path, step: gatekit.Step) -> None:
    """Each bug class the Megatron runs, planted alone in a copy of it, must make cross-mode FAIL with its
    first divergence; a class with no plant for this Megatron's sources fails, naming the class."""
    chunkwise_too = has_linear_cp_mode(gate)
    for control in megatron_controls.CONTROLS:
        if control.mode == "chunkwise" and not chunkwise_too:
            continue
        c = Case(*control.case[:3], tp=control.case[3], world=control.case[4])
        plant = megatron_controls.applicable(control, checkout)
        if plant is None:
            step.record(control.name, f"no plant of {control.name} applies to the Megatron at {checkout} (its text "
                                      "is in none of the files gdn_verify.megatron_controls knows): the gate cannot "
                                      "show it catches this bug here")
            continue
        root = megatron_controls.planted_copy(gate.scratch / f"planted-{control.name}", checkout, plant)
        directory = gate.scratch / step.name / control.name
        try:
            gate.dump(c, "cp1", directory)
            gate.dump(c, control.mode, directory, path=str(root))
        except Exception as e:  # noqa: BLE001 - a plant that crashes shows no divergence: the control fails
            step.record(control.name, f"the planted run did not finish: {type(e).__name__}: {' '.join(str(e).split())}")
            continue
        v, first = gate.judge("cross-mode", directory), plant.first or control.first
        if not v.passed and v.line.startswith(first):
            step.notes.append(f"{control.name} ({c.label}, {control.mode}, {plant.file}): caught: {v.line}")
            step.record(control.name, None)
        else:
            step.record(control.name, f"expected '{first}', got: {v.line}")


def controls(gate: Gate, skip: bool, step: gatekit.Step) -> None:
    if skip:
        step.skip = "--no-controls"
    else:
        run_controls(gate, checkout_of(gate.megatron_path), step)


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.megatron_gate", description=__doc__.split("\n\n")[0])
    gatekit.add_options(p, quick="a smaller matrix (SBHD fp32, W 2 and TP 2 x CP 2)")
    p.add_argument("--megatron", default=None, metavar="PATH",
                   help="a Megatron checkout (the directory holding megatron/) to judge instead of the importable one")
    p.add_argument("--no-controls", action="store_true", help="skip the planted-bug controls")
    return p


GDN = ("megatron/core/ssm/gated_delta_net.py", "megatron/core/ssm/gated_delta_net/__init__.py")


def checkout(path: str | None) -> str | None:
    """--megatron's directory, resolved; BadInput when it holds no Megatron GDN (module or package)."""
    if path and not any((Path(path) / gdn).is_file() for gdn in GDN):
        raise cli.BadInput(f"--megatron {path} holds neither {' nor '.join(GDN)}: pass the directory holding megatron/")
    return str(Path(path).resolve()) if path else None


def checkout_of(path: str | None) -> Path:
    """The directory holding the `megatron` package the gate judges (the controls copy it)."""
    if path:
        return Path(path)
    import importlib.util

    spec = importlib.util.find_spec("megatron")  # the namespace package: nothing of Megatron is imported
    if spec is None or spec.submodule_search_locations is None:
        raise cli.BadInput("megatron is not importable: install megatron-core or pass --megatron PATH")
    return next(Path(p).parent for p in spec.submodule_search_locations if (Path(p) / "core").is_dir())


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    binary, path = gatekit.find_binary(args.binary), checkout(args.megatron)
    started = time.monotonic()
    with gatekit.scratch(args.keep, "gdnv-megatron-gate-") as scratch:
        gate = Gate(binary, path, scratch)
        cp = QUICK_CP if args.quick else CP
        try:
            steps = gatekit.run_steps([
                ("oracle", functools.partial(run_cases, gate, QUICK_ORACLE if args.quick else ORACLE, "cp1", "oracle")),
                ("cp-vs-cp1", functools.partial(run_cases, gate, cp, "headwise", "cross-mode")),
                ("chunkwise", functools.partial(chunkwise, gate, QUICK_CHUNKWISE if args.quick else CHUNKWISE)),
                ("controls", functools.partial(controls, gate, args.no_controls))], out)
        finally:
            gate.close()
    return gatekit.finish(SUITE, args, steps, started, out)


def main(argv: list[str] | None = None) -> int:
    return gatekit.main(parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
