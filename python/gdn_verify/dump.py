"""python -m gdn_verify.dump: run a library's GatedDeltaNet on a probe case and write a cp1 image.

    python -m gdn_verify.dump --adapter hf-qwen3-next --case thd-gva --seed 0 --dtype fp32 --out DIR
    python -m gdn_verify.dump --adapter fla --lengths 40,200,16 --num-key-heads 4 --num-value-heads 8 --out DIR
    python -m gdn_verify.dump --adapter fla --mode chunkwise --world 4 --lengths 40,200,16 --out DIR
    python -m gdn_verify.dump --adapter megatron --case sbhd --mode headwise --world 4 --tp 2 --out DIR
    gdn-verify probe oracle --dir DIR

The case is a probe case (--case) or, in its place, `gdn-verify run`'s geometry options, generated bit for
bit as `gdn-verify probe dump` does (gdn_verify.cases). The module is built with the case's geometry,
loaded with the case's parameters through the adapter (docs/DESIGN.md §1.3 names), run forward and
backward on the case's inputs, and its outputs, parameter gradients and the stages the adapter captures
are written as `gdn-verify probe dump` would (§8), by gdn_verify.adapters.runner. With --world N the
command starts N local gloo processes where the adapter has such a run: FLA's layer under its own
context parallelism (--mode chunkwise at N > 1, --mode cp1 at N = 1, the same forward the CP run is
compared with), one rank file per rank; --adapter megatron always runs on gloo processes: Megatron-Core's
layer in --mode cp1 | headwise | chunkwise at TP = --tp, CP = world / tp (default --world 1).
Bad input is one line `error: ...` on stderr naming the fix, exit code 3, nothing written.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

import torch

from gdn_verify import adapters, case_options, cases, cli, images, noise
from gdn_verify.adapters import runner
from gdn_verify.world import RankFailed


def parser() -> cli.Parser:
    p = cli.Parser(prog="python -m gdn_verify.dump", description=__doc__.split("\n\n")[0])
    p.add_argument("--adapter", required=True, help=" | ".join(adapters.ADAPTERS.names()))
    p.add_argument("--case", default=None,
                   help=" | ".join(cases.CASES) + " (default thd-gva); or, in its place, the geometry options")
    p.add_argument("--dtype", default="fp32", help=" | ".join(cases.DTYPES))
    p.add_argument("--out", required=True, help="directory to write (one image of one case per directory)")
    p.add_argument("--image", default=None, help="image label (default: the adapter's name)")
    p.add_argument("--device", default="cpu", help="torch device the module runs on (default cpu)")
    p.add_argument("--core", default=None,
                   help="the adapter's core-op form where it has several (hf-qwen3-next: chunk | recurrent; "
                        "fla: triton | torch)")
    p.add_argument("--no-stages", action="store_true", help="write outputs and gradients only")
    p.add_argument("--world", default=None, type=int,
                   help="run on N local gloo processes (fla: FLA's KCP; megatron: TP x CP); "
                        "fla at N > 1 needs --mode chunkwise")
    p.add_argument("--mode", default=None, help="cp1 | chunkwise (fla, with --world; default cp1 at N = 1, chunkwise "
                                                "above) | headwise (megatron)")
    p.add_argument("--tp", default=None, type=int, help="tensor-parallel size (megatron; default 1)")
    p.add_argument("--nudge", default=None, type=int, metavar="ULPS",
                   help="move every input and parameter by ULPS units in the last place of --dtype (signs seeded "
                        "by the seed): the twin an implementation's own spread is measured with (fp32, bf16)")
    case_options.add_geometry_options(p)
    return p


def checked(args: argparse.Namespace) -> tuple[cases.CaseSpec, int]:
    """The case and seed, after every check that needs no library: BadInput naming the fix."""
    if args.case is not None and args.case not in cases.CASES:
        raise cli.BadInput(f"unknown --case '{args.case}': use {', '.join(cases.CASES)}")
    if args.dtype not in cases.DTYPES:
        raise cli.BadInput(f"unknown --dtype '{args.dtype}': use {', '.join(cases.DTYPES)}")
    try:
        spec, seed = case_options.case_spec_from_args(args), case_options.seed_from_args(args)
    except ValueError as e:
        raise cli.BadInput(str(e)) from e
    if args.adapter not in adapters.ADAPTERS:
        raise cli.BadInput(f"unknown --adapter '{args.adapter}': use {', '.join(adapters.ADAPTERS.names())}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise cli.BadInput(f"--out '{out}' is a file: give a directory")
    if args.nudge is not None and (args.nudge < 1 or args.dtype == "fp64"):
        raise cli.BadInput(f"--nudge {args.nudge} with --dtype {args.dtype}: give a positive number of ulps of an fp32 "
                           "or bf16 case")
    try:
        torch.device(args.device)
    except RuntimeError as e:
        raise cli.BadInput(f"--device '{args.device}' is not a torch device ({e}): e.g. --device cpu or cuda:0") from e
    return spec, seed


def check_out(out: Path) -> None:
    """--out: a directory, or a new one under a writable directory (probed by creating and removing a
    file there), so a bad path fails before the module runs; BadInput naming the path."""
    try:
        if os.path.lexists(out) and not out.is_dir():
            kind = "a file" if out.is_file() or not out.is_symlink() else "a symlink that is not a directory (a loop?)"
            raise cli.BadInput(f"--out '{out}' is {kind}: give a directory")
        parent = out  # the nearest existing ancestor; a name too long, a loop or a file on the way raises
        while True:
            try:
                os.lstat(parent)
                break
            except FileNotFoundError:
                parent = parent.parent
        if not parent.is_dir():
            raise cli.BadInput(f"--out '{out}': '{parent}' is not a directory: give a path of directories")
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".gdnv-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise cli.BadInput(f"--out '{out}' cannot be written ({e.strerror or e}): give a writable directory") from e


def dump(args: argparse.Namespace) -> str:
    """The image the options ask for (adapters.runner); returns the summary line."""
    check_out(Path(args.out))
    spec, seed = checked(args)
    request = adapters.Request(core=args.core, mode=args.mode, world=args.world, tp=args.tp, device=args.device,
                               stages=not args.no_stages)
    case = cases.make_case_from_geometry(spec, seed, args.dtype)
    if args.nudge is not None:
        case = noise.perturbed(case, seed, args.nudge)
    return runner.dump(adapters.ADAPTERS, args.adapter, request, case, Path(args.out), args.image)


def terminated(signum, frame):
    """SIGTERM as an exception, so the temp file being written is removed on the way out
    (safetensors_file.write_atomic); exit 128 + 15, as the signal would."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        return run_main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_main(argv: list[str] | None) -> int:
    try:
        args = parser().parse_args(argv)
        print(dump(args))
        return 0
    except (cli.BadInput, adapters.AdapterError, images.ImageError) as e:
        return cli.error(str(e))
    except RankFailed as e:  # a rank's error: one line naming the rank, the rank's exit code
        cli.error(str(e))
        return e.exit_code
    except OSError as e:  # writing the image: a full disk, a directory removed under us
        where = f" {e.filename}" if e.filename else ""
        return cli.error(f"writing the image failed:{where}: {e.strerror or e}: check --out, then dump into a fresh "
                     "directory")
    except MemoryError:
        return cli.error("out of memory building the case: use a smaller --case")


if __name__ == "__main__":
    sys.exit(main())
