"""python -m gdn_verify.noise_survey: the own-spread check's false-alarm count over seeds (docs/DESIGN.md §4,
"Gates from an implementation's own spread").

    python -m gdn_verify.noise_survey --adapter fla --core layer --world 1 --hidden 32 ... --seeds 0-19
    python -m gdn_verify.noise_survey --adapter megatron --mode cp1 --world 1 --core fla-triton --case sbhd

For each seed the case is run twice through the adapter, as given and nudged by noise.ULPS ulps (`dump
--nudge`), and each tensor's error (`probe oracle`) is held to gdn_verify.noise's bound. One line per seed,
then the largest error/spread over every tensor and seed, and the count outside the bound: the false alarms
of an unmodified library. Exit 0 when none, 1 otherwise, 3 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from gdn_verify import adapters, case_options, cases, cli, gatekit, noise
from gdn_verify.adapters import AdapterError, Request, runner
from gdn_verify.world import World


@dataclasses.dataclass
class Tally:
    """Every tensor's error/spread so far, and those outside the bound."""

    tensors: int = 0
    outside: list[str] = dataclasses.field(default_factory=list)
    worst: tuple[float, str] = (0.0, "")

    def add(self, seed: int, report: dict, spread: dict[str, float]) -> str:
        """Counts one seed's tensors; that seed's line."""
        ratios = {t["name"]: t["rel_rms"] / max(spread[t["name"]], noise.FLOOR / noise.M)
                  for t in report["tensors"] if t.get("rel_rms") is not None and t["name"] in spread}
        self.tensors += len(ratios)
        line = noise.first_outside(report, spread)
        if line:
            self.outside.append(f"seed {seed}: {line}")
        name = max(ratios, key=ratios.__getitem__, default="")
        if name and ratios[name] > self.worst[0]:
            self.worst = (ratios[name], f"{name}, seed {seed}")
        worst = f"largest error/spread {ratios[name]:.2f} ({name})" if name else "no tensors"
        return f"seed {seed}: {len(ratios)} tensors, {worst}" + (f"; OUTSIDE: {line}" if line else "")


def seeds(text: str) -> range:
    """--seeds FIRST-LAST (or one seed); BadInput naming the fix."""
    first, _, last = text.partition("-")
    if not (first.isdigit() and (last or first).isdigit()) or int(last or first) < int(first):
        raise cli.BadInput(f"--seeds '{text}': give FIRST-LAST (e.g. 0-19) or one seed")
    return range(int(first), int(last or first) + 1)


def parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m gdn_verify.noise_survey", description=__doc__.split("\n\n")[0])
    p.add_argument("--adapter", required=True, help=" | ".join(adapters.ADAPTERS.names()))
    p.add_argument("--case", default=None, help=" | ".join(cases.CASES) + "; or, in its place, the geometry options")
    p.add_argument("--dtype", default="fp32", help="fp32 | bf16")
    p.add_argument("--core", default=None, help="the adapter's core-op form (as `dump --core`)")
    p.add_argument("--mode", default=None, help="as `dump --mode`")
    p.add_argument("--world", default=None, type=int, help="as `dump --world`")
    p.add_argument("--tp", default=None, type=int, help="as `dump --tp`")
    p.add_argument("--seeds", default="0-19", help="FIRST-LAST (default 0-19)")
    p.add_argument("--gdn-verify", dest="binary", default=None, help="the gdn-verify binary (as the gates')")
    case_options.add_geometry_options(p)
    return p


def checked(args: argparse.Namespace) -> tuple[cases.CaseSpec, range]:
    if args.adapter not in adapters.ADAPTERS:
        raise cli.BadInput(f"unknown --adapter '{args.adapter}': use {', '.join(adapters.ADAPTERS.names())}")
    if args.dtype not in noise.STORAGE:
        raise cli.BadInput(f"--dtype {args.dtype}: the spread is measured in ulps of fp32 or bf16 storage")
    if args.case is not None and args.case not in cases.CASES:
        raise cli.BadInput(f"unknown --case '{args.case}': use {', '.join(cases.CASES)}")
    if args.seed != "0":
        raise cli.BadInput(f"--seed {args.seed}: the survey runs every seed of --seeds FIRST-LAST; drop --seed")
    try:
        return case_options.case_spec_from_args(args), seeds(args.seeds)
    except ValueError as e:
        raise cli.BadInput(str(e)) from e


def run(args: argparse.Namespace, out=sys.stdout) -> int:
    spec, wanted = checked(args)
    binary = gatekit.find_binary(args.binary)
    request = Request(core=args.core, mode=args.mode, world=args.world, tp=args.tp)
    cls = adapters.ADAPTERS.get(args.adapter)
    try:
        runner.check_capabilities(adapters.ADAPTERS, cls, request)
        plan = cls.plan(request)
    except AdapterError as e:
        raise cli.BadInput(str(e)) from e
    adapter, tally = adapters.ADAPTERS.load(args.adapter), Tally()
    with tempfile.TemporaryDirectory(prefix="gdnv-noise-") as tmp, World(plan.size if plan else 1,
                                                                         env=cls.rank_env) as world:
        for seed in wanted:
            case = cases.make_case_from_geometry(spec, seed, args.dtype)
            image, twin = Path(tmp) / f"s{seed}", Path(tmp) / f"s{seed}-twin"
            for directory, c in ((image, case), (twin, noise.perturbed(case, seed))):
                if plan is None:
                    runner.write(directory, c, args.adapter, cls.backend("cpu"), adapter.run_here(c, request))
                else:
                    runner.dump_in(world, adapter, c, plan, directory, args.adapter)
            _, report = gatekit.judge_report(binary, "oracle", image)
            if report is None:
                raise cli.BadInput(f"gdn-verify probe oracle wrote no report for seed {seed}: run it on {image}")
            mode = next(image.glob("*.rank0.safetensors")).name.split(".")[0]
            spread = noise.spreads(noise.load_dump(image, mode), noise.load_dump(twin, mode))
            print(tally.add(seed, report, spread), file=out, flush=True)
    print(f"{len(wanted)} seeds, {tally.tensors} tensors: {len(tally.outside)} outside min(class gate, "
          f"max({noise.M:g} x own spread, {noise.FLOOR:.2e})); largest error/spread {tally.worst[0]:.2f} "
          f"({tally.worst[1]})", file=out)
    for line in tally.outside:
        print(f"  {line}", file=out)
    return 1 if tally.outside else 0


def main(argv: list[str] | None = None) -> int:
    return gatekit.main(parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
