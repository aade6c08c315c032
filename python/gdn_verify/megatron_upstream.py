"""Megatron-LM's own GatedDeltaNet and context_parallel_layout unit tests, run on CPU gloo ranks (docs/DESIGN.md §14).

A snapshot is a folder holding Megatron-LM's `megatron/core` and its `tests/unit_tests` files, as CI has them under
`../shared/megatron-lm/<commit>/` (`snapshots`). `run_tests` is a `gdn_verify.world` rank function: it puts the
snapshot first on `sys.path` and runs pytest on the given files in this rank, every rank of the world at once, so a
test that asks `Utils.initialize_model_parallel` for CP = 2 or 4 gets Megatron's groups over the world's gloo group.

What a snapshot lacks and what stands in for it, never for the math:

- `tests.unit_tests.test_utilities.Utils`: process groups only. `initialize_model_parallel` is Megatron's own
  `parallel_state.initialize_model_parallel` over the world's default (gloo) group; `destroy_model_parallel` its own
  teardown after a barrier.
- Modules the snapshot does not hold (`megatron.training`, Megatron's checkpointing and attention test helpers):
  each name in them is a function that raises `NotInSnapshot`; only tests skipped by name (they also need
  Transformer Engine and a GPU) call them.
- Device shims: `adapters.megatron.cpu_shims.install()` (CUDA allocations on the CPU, `torch.compile` eager, Triton's
  interpreter) and `cuda_rng_state_placeholder` (below).

Every outcome is recorded per test id (`Outcomes`): passed, failed, error (in setup or teardown) or skipped, with the
skip's reason, the test's seconds, and the rank's wall and CPU seconds.
"""

from __future__ import annotations

import os
import sys
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gdn_verify.world import Rank

# Modules Megatron's GDN tests import that no snapshot holds; the tests that use them are skipped by name.
NOT_IN_SNAPSHOT = ("megatron.training", "megatron.training.arguments", "megatron.training.checkpointing",
                   "megatron.training.global_vars", "megatron.training.training", "tests.unit_tests.dist_checkpointing",
                   "tests.unit_tests.transformer.test_attention",
                   "tests.unit_tests.transformer.test_multi_latent_attention")
# Marks Megatron's conftest.py (not in a snapshot) registers.
MARKS = ("internal", "flaky", "flaky_in_dev")


def snapshots(repo: Path) -> Path:
    """Where CI keeps the Megatron-LM snapshots: ../shared/megatron-lm beside the repository root."""
    return repo.resolve().parent / "shared" / "megatron-lm"


class NotInSnapshot(RuntimeError):
    """A test called a helper the Megatron-LM snapshot does not hold."""


class Utils:
    """Megatron's `tests/unit_tests/test_utilities.Utils`, for process groups only, over the default gloo group."""

    world_size = 1
    rank = 0
    inited = False

    @staticmethod
    def initialize_distributed() -> None:
        import torch.distributed as dist

        if not dist.is_initialized():  # a lone process: a one-rank gloo group
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        Utils.world_size, Utils.rank = dist.get_world_size(), dist.get_rank()

    @staticmethod
    def initialize_model_parallel(tensor_model_parallel_size: int = 1, pipeline_model_parallel_size: int = 1,
                                  virtual_pipeline_model_parallel_size: int | None = None, **kwargs: Any) -> None:
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        Utils.initialize_distributed()
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tensor_model_parallel_size,
            pipeline_model_parallel_size=pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size, **kwargs)
        Utils.inited = True

    @staticmethod
    def destroy_model_parallel() -> None:
        import torch.distributed as dist
        from megatron.core import parallel_state

        if not Utils.inited:
            return
        dist.barrier()
        parallel_state.destroy_model_parallel()
        Utils.inited = False


def cuda_rng_state_placeholder() -> None:
    """`torch.cuda.get_rng_state()` -> an empty state instead of "Found no NVIDIA driver".

    `model_parallel_cuda_manual_seed`, which Megatron's tests call in their setup, makes its RNG tracker store the
    CUDA generator's state per seed. On a CPU nothing draws from that generator (every random tensor comes from the
    CPU's), and the tracker's restores are queued by `torch.cuda._lazy_call` until CUDA starts, which it never does."""
    import torch

    torch.cuda.get_rng_state = lambda device="cuda": torch.empty(0, dtype=torch.uint8)


def _cuda_rng_state_error() -> str:
    """What `torch.cuda.get_rng_state()` raises here before `cuda_rng_state_placeholder` ("" if nothing)."""
    import torch

    if _installed:  # the shim may be in force already
        return ""
    try:
        torch.cuda.get_rng_state()
    except Exception as e:  # noqa: BLE001 - the failure the shim fixes, reported
        return f"{type(e).__name__}: {e}"
    return ""


def _placeholder(name: str) -> types.ModuleType:
    module = types.ModuleType(name)

    def missing_name(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def missing(*args: Any, **kwargs: Any) -> Any:
            raise NotInSnapshot(f"{name}.{attr} is not in the Megatron-LM snapshot")

        return missing

    module.__getattr__ = missing_name  # type: ignore[method-assign]
    return module


_installed: list[Any] = []  # [tree, shims applied] once install ran in this process


def install(tree: str) -> list[str]:
    """This process imports Megatron from `tree`, with the stand-ins and device shims above; the shims applied.
    Must run before anything imports megatron, triton or fla; again with the same tree it does nothing."""
    if _installed:
        if _installed[0] != tree:
            raise RuntimeError(f"this process imports Megatron from {_installed[0]}, not {tree}")
        return list(_installed[1])
    if "megatron" in sys.modules:
        raise RuntimeError(f"megatron was imported before gdn_verify.megatron_upstream.install({tree!r})")
    sys.dont_write_bytecode = True  # a snapshot is read-only (and shared)
    sys.path.insert(0, tree)
    import torch

    from gdn_verify.adapters.megatron import cpu_shims

    applied = cpu_shims.install()
    if not torch.cuda.is_available():
        cuda_rng_state_placeholder()
        applied.append("cuda_rng_state_placeholder")
    Utils.initialize_distributed()
    for name in ("tests", "tests.unit_tests", "tests.unit_tests.transformer"):
        sys.modules.setdefault(name, types.ModuleType(name))
    utilities = types.ModuleType("tests.unit_tests.test_utilities")
    utilities.Utils = Utils  # type: ignore[attr-defined]
    sys.modules[utilities.__name__] = utilities
    for name in NOT_IN_SNAPSHOT:
        sys.modules[name] = _placeholder(name)
    _installed[:] = [tree, applied]
    return list(applied)


class Outcomes:
    """A pytest plugin: skips the tests named in `skips` (test id prefix -> reason) and records every outcome."""

    def __init__(self, skips: Mapping[str, str]) -> None:
        self.skips = dict(skips)
        self.results: dict[str, dict[str, Any]] = {}

    def pytest_configure(self, config: Any) -> None:
        for mark in MARKS:
            config.addinivalue_line("markers", f"{mark}: Megatron-LM's mark")

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        import pytest

        for item in items:
            for prefix, reason in self.skips.items():
                if item.nodeid.startswith(prefix):
                    item.add_marker(pytest.mark.skip(reason=reason))

    def pytest_runtest_logreport(self, report: Any) -> None:
        result = self.results.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "detail": ""})
        result["seconds"] += report.duration
        if report.skipped:
            result["outcome"] = "skipped"
            result["detail"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        elif report.failed:
            result["outcome"] = "failed" if report.when == "call" else "error"
            result["detail"] = str(report.longrepr)[-2000:]


def run_tests(rank: Rank, tree: str, files: Sequence[str], skips: Mapping[str, str],
              extra: Sequence[str] = ()) -> dict[str, Any]:
    """A world's rank function: pytest over `files` (relative to `tree`) with Megatron from `tree`; this rank's
    outcomes by test id, its shims, exit code, and wall and CPU seconds (the imports included)."""
    wall, cpu = time.monotonic(), time.process_time()
    without = _cuda_rng_state_error()
    shims = install(tree)
    import pytest

    plugin = Outcomes(skips)
    args = ["-q", "-p", "no:cacheprovider", "--rootdir", tree, "-W", "ignore::DeprecationWarning", *extra,
            *(os.path.join(tree, f) for f in files)]
    code = pytest.main(args, plugins=[plugin])
    return {"rank": rank.rank, "exit": int(code), "shims": shims, "cuda_rng_state_without_shim": without,
            "outcomes": plugin.results,
            "wall_s": time.monotonic() - wall, "cpu_s": time.process_time() - cpu}
