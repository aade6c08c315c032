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
are written as `gdn-verify probe dump` would (§8). With --world N the command starts N local gloo
processes and runs FLA's layer under its own context parallelism (gdn_verify.fla_cp: --mode chunkwise
at N > 1, --mode cp1 at N = 1, the same forward the CP run is compared with), one rank file per rank.
--adapter megatron always runs on gloo processes: Megatron-Core's layer in --mode cp1 | headwise | chunkwise
at TP = --tp, CP = world / tp (default --world 1).
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

import gdn_verify
from gdn_verify import adapters, case_options, cases, images
from gdn_verify.adapters import megatron
from gdn_verify.world import RankFailed

EXIT_BAD_INPUT = 3


class BadInput(Exception):
    """A command-line mistake: printed as one `error:` line, exit 3."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors are the project's one-line `error: ...`, exit 3 (docs/DESIGN.md §5)."""

    def error(self, message: str):
        raise BadInput(f"{message}: see python -m gdn_verify.dump --help")


def parser() -> Parser:
    p = Parser(prog="python -m gdn_verify.dump", description=__doc__.split("\n\n")[0])
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
                   help="run on N local gloo processes (fla: FLA's KCP, gdn_verify.fla_cp; megatron: TP x CP); "
                        "fla at N > 1 needs --mode chunkwise")
    p.add_argument("--mode", default=None, help="cp1 | chunkwise (fla, with --world; default cp1 at N = 1, chunkwise "
                                                "above) | headwise (megatron)")
    p.add_argument("--tp", default=None, type=int, help="tensor-parallel size (megatron; default 1)")
    case_options.add_geometry_options(p)
    return p


def checked(args: argparse.Namespace) -> tuple[cases.CaseSpec, int]:
    """The case and seed, after every check that needs no library: BadInput naming the fix."""
    if args.case is not None and args.case not in cases.CASES:
        raise BadInput(f"unknown --case '{args.case}': use {', '.join(cases.CASES)}")
    if args.dtype not in cases.DTYPES:
        raise BadInput(f"unknown --dtype '{args.dtype}': use {', '.join(cases.DTYPES)}")
    try:
        spec, seed = case_options.case_spec_from_args(args), case_options.seed_from_args(args)
    except ValueError as e:
        raise BadInput(str(e)) from e
    if args.adapter not in adapters.ADAPTERS:
        raise BadInput(f"unknown --adapter '{args.adapter}': use {', '.join(adapters.ADAPTERS.names())}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out '{out}' is a file: give a directory")
    try:
        torch.device(args.device)
    except RuntimeError as e:
        raise BadInput(f"--device '{args.device}' is not a torch device ({e}): e.g. --device cpu or cuda:0") from e
    if args.tp is not None and args.adapter != "megatron":
        raise BadInput(f"--tp: adapter {args.adapter} has no tensor parallelism here; drop --tp or use "
                       "--adapter megatron")
    return spec, seed


def check_device(name: str) -> None:
    """A CUDA --device torch can use, before the module is built on it."""
    device = torch.device(name)
    if device.type == "cuda" and not (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
        raise BadInput(f"--device {name}: torch sees {torch.cuda.device_count()} CUDA device(s): "
                       "use --device cpu, or run where the GPU is visible")


def check_out(out: Path) -> None:
    """--out: a directory, or a new one under a writable directory (probed by creating and removing a
    file there), so a bad path fails before the module runs; BadInput naming the path."""
    try:
        if os.path.lexists(out) and not out.is_dir():
            kind = "a file" if out.is_file() or not out.is_symlink() else "a symlink that is not a directory (a loop?)"
            raise BadInput(f"--out '{out}' is {kind}: give a directory")
        parent = out  # the nearest existing ancestor; a name too long, a loop or a file on the way raises
        while True:
            try:
                os.lstat(parent)
                break
            except FileNotFoundError:
                parent = parent.parent
        if not parent.is_dir():
            raise BadInput(f"--out '{out}': '{parent}' is not a directory: give a path of directories")
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".gdnv-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise BadInput(f"--out '{out}' cannot be written ({e.strerror or e}): give a writable directory") from e


def check_same_core(meta: dict, core: str, out: Path) -> None:
    """The core-op form is part of the image (meta.json notes.core): a re-dump with another one is
    refused, not replaced."""
    have = meta.get("notes", {}).get("core") if isinstance(meta.get("notes"), dict) else None
    if core and have and have != core:
        raise BadInput(f'{out} holds an image with core "{have}", not "{core}": dump into a fresh --out directory')


def world_mode(args: argparse.Namespace) -> str:
    """--mode for a --world run: cp1 at one rank, chunkwise above; BadInput naming the fix otherwise."""
    if "chunkwise" not in adapters.ADAPTERS.get(args.adapter).modes:
        raise BadInput(f"--world: adapter {args.adapter} has no CPU context parallelism here; only --adapter fla "
                       "(FLA's KCP under Triton's interpreter) and megatron run on several processes; drop --world")
    if args.world < 1:
        raise BadInput(f"--world {args.world}: give the number of CP ranks, at least 1")
    want = "cp1" if args.world == 1 else "chunkwise"
    if (args.mode or want) != want:
        raise BadInput(f"--mode {args.mode} with --world {args.world}: FLA's KCP is the chunkwise mode at --world > 1, "
                       "cp1 at --world 1")
    if args.core is not None or args.device != "cpu":
        raise BadInput("--world runs FLA's Triton kernels on the CPU under the interpreter: drop --core and --device")
    return want


def dump_world(args: argparse.Namespace, spec: cases.CaseSpec, seed: int) -> str:
    """--world N: FLA's layer on N local gloo processes (gdn_verify.fla_cp), the image written once."""
    from gdn_verify import fla_cp, world

    mode = world_mode(args)
    case = cases.make_case_from_geometry(spec, seed, args.dtype)
    try:
        fla_cp.check_world(case, args.world)
    except ValueError as e:
        raise BadInput(f"{spec.name} at --world {args.world}: {e}") from e
    image = args.image or args.adapter
    images.check_same_image(images.read_meta(Path(args.out)), images.identity(case, image, "fla:cpu"), Path(args.out))
    with world.World(args.world, env=fla_cp.ENV) as w:
        fla_cp.dump(w, Path(args.out), case, args.world, stages=not args.no_stages, image=image)
    files = ", ".join(images.rank_path(Path(""), mode, r).name for r in range(args.world))
    return (f"gdn_verify.dump: fla ({fla_cp.PATH}, {args.world} gloo process{'es' if args.world > 1 else ''}) on case "
            f"{spec.name}, seed {seed}, {args.dtype} -> {args.out}/{{inputs.safetensors, {files}, meta.json}}")


def dump(args: argparse.Namespace) -> str:
    """Builds, loads, runs and writes; returns the summary line."""
    check_out(Path(args.out))
    spec, seed = checked(args)
    if args.adapter == "megatron":  # gloo ranks on the CPU: its own --device rule
        return dump_megatron(args, spec, seed)
    if args.world is not None:
        return dump_world(args, spec, seed)
    check_device(args.device)
    if args.mode not in (None, "cp1"):
        raise BadInput(f"--mode {args.mode} needs --world N (the CP ranks); without it the dump is cp1")
    adapter = adapters.ADAPTERS.load(args.adapter)
    core = adapter.core(args.core)
    case = cases.make_case_from_geometry(spec, seed, args.dtype)
    image = args.image or args.adapter
    adapter.prepare(args.device, core)
    backend = f"{args.adapter}:{torch.device(args.device).type}"
    images.check_same_image(images.read_meta(Path(args.out)), images.identity(case, image, backend), Path(args.out))
    check_same_core(images.read_meta(Path(args.out)), core, Path(args.out))
    module = adapter.build_module(case.geometry, case.torch_dtype, args.device, core)
    adapter.load_megatron_params(module, case.params)
    result = adapter.run(module, case, not args.no_stages, core)
    dumped = images.RankDump("cp1", 0, 1, result.out.cpu(), result.grad_hidden.cpu(),
                             {n: g.cpu() for n, g in result.grads.items()}, result.stages)
    extra = {"adapter": args.adapter, "path": result.path, "device": args.device, "notes": result.notes,
             "versions": versions(args.adapter), "decay_class": result.decay_class}
    images.write_image(Path(args.out), case, image, backend, [dumped], transport="inproc", extra_meta=extra)
    return (f"gdn_verify.dump: {args.adapter} ({result.path} path) on case {spec.name}, seed {seed}, {args.dtype} -> "
            f"{args.out}/{{inputs.safetensors, cp1.rank0.safetensors, meta.json}}")


def dump_megatron(args: argparse.Namespace, spec: cases.CaseSpec, seed: int) -> str:
    """Megatron-Core's layer in --mode over --world gloo processes started here (TP --tp, CP world / tp)."""
    from gdn_verify.world import World

    core = adapters.ADAPTERS.load("megatron").core(args.core)
    world, tp, mode = args.world or 1, args.tp or 1, args.mode or "cp1"
    megatron.check_world(mode, world, tp, core)
    if args.device != "cpu":
        raise BadInput(f"--device {args.device}: --adapter megatron runs on the CPU's gloo ranks; drop --device")
    case = cases.make_case_from_geometry(spec, seed, args.dtype)
    image, backend = args.image or args.adapter, "megatron:cpu"
    images.check_same_image(images.read_meta(Path(args.out)), images.identity(case, image, backend), Path(args.out))
    extra = {"adapter": args.adapter, "device": args.device, "versions": versions(args.adapter)}
    with World(world, env=megatron.RANK_ENV) as w:
        ran = megatron.dump_world(w, Path(args.out), case, image, backend, mode, tp, core, not args.no_stages, extra)
    return (f"gdn_verify.dump: megatron ({ran} path) {mode} on {world} rank(s) (TP {tp}, CP {world // tp}), case "
            f"{spec.name}, seed {seed}, {args.dtype} -> {args.out}/{{inputs.safetensors, "
            f"{mode}.rank0..{world // tp - 1}.safetensors, meta.json}}")


def versions(adapter: str) -> dict[str, str]:
    """What computed the image, for meta.json: gdn_verify, torch and the adapter's library."""
    out = {"gdn_verify": gdn_verify.__version__, "torch": torch.__version__}
    module = adapters.ADAPTERS.get(adapter).import_name
    out[module] = str(getattr(sys.modules.get(module), "__version__", "unknown"))
    return out


def terminated(signum, frame):
    """SIGTERM as an exception, so the temp file being written is removed on the way out
    (images.write_atomic); exit 128 + 15, as the signal would."""
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
    except (BadInput, adapters.AdapterError, images.ImageError) as e:
        return error(str(e))
    except RankFailed as e:  # a rank's error: one line naming the rank, the rank's exit code
        error(str(e))
        return e.exit_code
    except OSError as e:  # writing the image: a full disk, a directory removed under us
        where = f" {e.filename}" if e.filename else ""
        return error(f"writing the image failed:{where}: {e.strerror or e}: check --out, then dump into a fresh "
                     "directory")
    except MemoryError:
        return error("out of memory building the case: use a smaller --case")


def error(message: str) -> int:
    """One line on stderr, control characters escaped (messages quote paths and metadata), exit 3."""
    print("error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message), file=sys.stderr)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
