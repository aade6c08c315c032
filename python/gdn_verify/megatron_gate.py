"""python -m gdn_verify.megatron_gate: the pre-merge gate for a Megatron-Core GatedDeltaNet (docs/DESIGN.md §14).

    python -m gdn_verify.megatron_gate [--quick] [--junit FILE] [--keep DIR] [--gdn-verify PATH] [--megatron PATH]
                                       [--no-controls]

Judges whatever Megatron is importable (a checkout with --megatron PATH, or first on PYTHONPATH) on gloo
ranks started once per world size, as `gdn-verify gate` does for the C++ modes. Steps, in order:

- `oracle`: Megatron's cp1 image of each case, every tensor and stage, `gdn-verify probe oracle`;
- `cp-vs-cp1`: headwise at W = 2, 4 and TP 2 x CP 2 (THD and SBHD, fp32 and bf16) against Megatron's own
  cp1 at the same TP, `gdn-verify probe cross-mode`;
- `chunkwise`: the same for `linear_cp_mode` = chunkwise where the Megatron has it (else skipped, naming
  which Megatron has it);
- `controls`: bugs planted in a copy of the Megatron under test (`PLANTS`) must fail cross-mode with a
  first divergence naming the stage and rank; the step passes when every control is caught.

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

from gdn_verify import cli, gatekit

SUITE = gatekit.Suite("megatron_gate", "megatron gate")


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


def planted_copy(root: Path, megatron_dir: Path) -> Path:
    """`megatron_dir` (a `megatron` package) copied under root with every PLANTS bug; root."""
    shutil.copytree(megatron_dir, root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    source = (root / COMMON).read_text()
    for name, (right, wrong) in PLANTS.items():
        if source.count(right) != 1:
            raise cli.BadInput(f"{name}: the planted line is not in this Megatron's {COMMON}")
        source = source.replace(right, wrong)
    (root / COMMON).write_text(source)
    return root


class Gate:
    """The worlds (one per size, started on first use), the gdn-verify binary and the scratch directory."""

    def __init__(self, binary: str, megatron_path: str | None, scratch: Path) -> None:
        from gdn_verify.adapters import megatron

        self.binary, self.megatron_path, self.scratch = binary, megatron_path, scratch
        self.adapter = megatron
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
        """The gate's one call into Megatron: case `c`'s `mode` dump into `directory`."""
        from gdn_verify.adapters import Request, runner
        from gdn_verify.cases import make_case

        world, adapter = c.tp if mode == "cp1" else c.world, self.adapter.MegatronAdapter()
        plan = adapter.plan(Request(core=c.core, mode=mode, world=world, tp=c.tp, source=path or self.megatron_path))
        runner.dump_in(self.world(world, path), adapter, make_case(c.case, 0, c.dtype), plan, directory, "megatron")

    def judge(self, reader: str, directory: Path) -> gatekit.Verdict:
        return gatekit.judge(self.binary, reader, directory)


def reproduce(c: Case, modes: list[str], reader: str, megatron_path: str | None) -> str:
    """The commands that rerun one case from a shell."""
    env = f"PYTHONPATH={megatron_path}:$PYTHONPATH " if megatron_path else ""
    dumps = [f"--adapter megatron --case {c.case} --dtype {c.dtype} --core {c.core} --mode {mode} "
             f"--world {c.tp if mode == 'cp1' else c.world} --tp {c.tp}" for mode in modes]
    return "\n".join("  " + line for line in gatekit.reproduce(dumps, reader, f"/tmp/{c.label}", env))


def run_cases(gate: Gate, cases: list[Case], mode: str, reader: str, step: gatekit.Step) -> None:
    """Dumps each case's cp1 (and, for CP, its `mode` world) into a fresh directory and judges it."""
    for c in cases:
        directory = gate.scratch / step.name / c.label
        modes = ["cp1"] + ([mode] if c.world > 1 else [])
        try:
            for m in modes:
                gate.dump(c, m, directory)
            v = gate.judge(reader, directory)
            why = None if v.passed else v.line
        except Exception as e:  # noqa: BLE001 - a case that cannot run is a failing case, named
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
        step.record(c.label, why, reproduce(c, modes, reader, gate.megatron_path))


def chunkwise(gate: Gate, cases: list[Case], step: gatekit.Step) -> None:
    """The chunkwise cases where the gate's Megatron has `linear_cp_mode`, else skipped naming who has it."""
    if gate.world(1).run(gate.adapter.rank_has_linear_cp_mode, gate.megatron_path)[0]:
        run_cases(gate, cases, "chunkwise", "cross-mode", step)
    else:
        step.skip = "this Megatron has no linear_cp_mode (Megatron-LM's development branch has it)"


def run_controls(gate: Gate, megatron_dir: Path, step: gatekit.Step) -> None:
    """Each planted bug must make cross-mode FAIL with its first-divergence line."""
    root = str(planted_copy(gate.scratch / "planted", megatron_dir))
    for c, bug, first in CONTROLS:
        directory = gate.scratch / step.name / bug
        gate.dump(c, "cp1", directory)
        gate.dump(c, "headwise", directory, path=root)
        v = gate.judge("cross-mode", directory)
        if not v.passed and v.line.startswith(first):
            step.notes.append(f"{bug} ({c.label}): caught: {v.line}")
            step.record(bug, None)
        else:
            step.record(bug, f"expected '{first}', got: {v.line}")


def controls(gate: Gate, skip: bool, step: gatekit.Step) -> None:
    if skip:
        step.skip = "--no-controls"
    else:
        run_controls(gate, megatron_dir(gate.megatron_path), step)


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.megatron_gate", description=__doc__.split("\n\n")[0])
    gatekit.add_options(p, quick="a smaller matrix (SBHD fp32, W 2 and TP 2 x CP 2)")
    p.add_argument("--megatron", default=None, metavar="PATH",
                   help="a Megatron checkout (the directory holding megatron/) to judge instead of the importable one")
    p.add_argument("--no-controls", action="store_true", help="skip the planted-bug controls")
    return p


def checkout(path: str | None) -> str | None:
    """--megatron's directory, resolved; BadInput when it holds no Megatron GDN."""
    if path and not (Path(path) / COMMON).is_file():
        raise cli.BadInput(f"--megatron {path} holds no {COMMON}: pass the directory holding megatron/")
    return str(Path(path).resolve()) if path else None


def megatron_dir(path: str | None) -> Path:
    """The `megatron` package the gate judges (for the controls' copy)."""
    if path:
        return Path(path).resolve() / "megatron"
    import importlib.util

    spec = importlib.util.find_spec("megatron")  # the namespace package: nothing of Megatron is imported
    assert spec is not None and spec.submodule_search_locations is not None, "megatron is not importable"
    return next(Path(p) for p in spec.submodule_search_locations if (Path(p) / "core").is_dir())


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
                ("chunkwise", functools.partial(chunkwise, gate, cp)),
                ("controls", functools.partial(controls, gate, args.no_controls))], out)
        finally:
            gate.close()
    return gatekit.finish(SUITE, args, steps, started, out)


def main(argv: list[str] | None = None) -> int:
    return gatekit.main(parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
