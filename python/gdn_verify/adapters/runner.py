"""A case through an adapter into an image (docs/DESIGN.md §14): the registry chooses the adapter, the
adapter's `plan` chooses this process (`run_here`) or gloo ranks (`check_world`, `run_world`), and
`images.write_image` writes the result once. `python -m gdn_verify.dump` is its command line."""

from __future__ import annotations

from pathlib import Path

import torch

from gdn_verify import images
from gdn_verify.adapters.base import Adapter, AdapterError, ImageRun, Request, WorldPlan
from gdn_verify.adapters.registry import Registry
from gdn_verify.cases import Case
from gdn_verify.world import World


def dump(registry: Registry, name: str, request: Request, case: Case, out: Path, image: str | None = None) -> str:
    """Runs `case` through adapter `name` as `request` asks and writes the image into `out`; the summary
    line. AdapterError (or images.ImageError) naming the fix, before anything runs, for what cannot."""
    cls = registry.get(name)
    check_capabilities(registry, cls, request)
    plan = cls.plan(request)
    image = image or name
    backend = cls.backend(request.device)
    if plan is None:
        check_device(request.device)
    adapter = registry.load(name)
    if plan is not None:
        adapter.check_world(case, plan)
    check_fresh(out, case, image, backend, None if plan else adapter.core(request.core))
    if plan is None:
        run = adapter.run_here(case, request)
    else:
        with World(plan.size, env=cls.rank_env) as world:
            run = adapter.run_world(world, case, plan)
    write(out, case, image, backend, run)
    return summary(run, case, out)


def dump_in(world: World, adapter: Adapter, case: Case, plan: WorldPlan, out: Path, image: str) -> ImageRun:
    """`plan` on the ranks of a running `world` (a gate reuses one across cases), written into `out`."""
    adapter.check_world(case, plan)
    run = adapter.run_world(world, case, plan)
    write(out, case, image, adapter.backend("cpu"), run)
    return run


def write(out: Path, case: Case, image: str, backend: str, run: ImageRun) -> None:
    images.write_image(out, case, image, backend, run.dumps, transport=run.transport, extra_meta=run.meta)


def check_capabilities(registry: Registry, cls: type[Adapter], request: Request) -> None:
    """--tp and --world only for adapters that have them, naming the ones that do."""
    if request.tp is not None and not cls.tensor_parallel:
        others = " or ".join(f"--adapter {c.name}" for c in registry.classes() if c.tensor_parallel)
        raise AdapterError(f"--tp: adapter {cls.name} has no tensor parallelism here; drop --tp or use {others}")
    if request.world is not None and not cls.world_run:
        others = " and ".join(f"--adapter {c.name} ({c.world_run})" for c in registry.classes() if c.world_run)
        raise AdapterError(f"--world: adapter {cls.name} has no CPU context parallelism here; only {others} run on "
                           "several processes; drop --world")


def check_device(name: str) -> None:
    """A CUDA device torch can use, before the module is built on it."""
    device = torch.device(name)
    if device.type == "cuda" and not (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
        raise AdapterError(f"--device {name}: torch sees {torch.cuda.device_count()} CUDA device(s): "
                           "use --device cpu, or run where the GPU is visible")


def check_fresh(out: Path, case: Case, image: str, backend: str, core: str | None) -> None:
    """`out` holds nothing or this image (core-op form included: a re-dump with another is refused, not
    replaced), checked before the module runs."""
    meta = images.read_meta(out)
    images.check_same_image(meta, images.identity(case, image, backend), out)
    notes = meta.get("notes")
    have = notes.get("core") if isinstance(notes, dict) else None
    if core and have and have != core:
        raise images.ImageError(f'{out} holds an image with core "{have}", not "{core}": dump into a fresh --out '
                                "directory")


def summary(run: ImageRun, case: Case, out: Path) -> str:
    """The dump's one line: what ran, on which case, and the files written."""
    mode, world = run.dumps[0].mode, len(run.dumps)
    files = f"{mode}.rank0.safetensors" if world == 1 else f"{mode}.rank0..{world - 1}.safetensors"
    return (f"gdn_verify.dump: {run.label} on case {case.spec.name}, seed {case.seed}, {case.dtype} -> "
            f"{out}/{{inputs.safetensors, {files}, meta.json}}")
