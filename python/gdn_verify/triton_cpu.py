"""Triton's interpreter on a CPU, with only the shims this installation needs (docs/triton_cpu.md).

`enable()` sets `TRITON_INTERPRET=1` (read when `@triton.jit` decorates a kernel, so it must run before
triton or any kernel library is imported) and applies each triton shim whose failure it reproduces here;
`enable_fla()` adds those FLA's ops need on a CPU, `enable_fla_cp()` those its context parallelism
(`fla.ops.cp`) needs with gloo.
No shim touches the math: each changes what the interpreter, a device check or a collective's output view
does, and each is applied only when a probe shows the failure it fixes (or the cost it removes, work whose
result nothing reads), so on a version without the bug the shim is not applied. `applied()` lists the
ones in force (written into an image's meta.json), `SHIMS` holds them all by name. The shims and the
failure each fixes: gdn_verify.triton_shims (the interpreter's) and gdn_verify.fla_shims (FLA's).

What a verdict under the interpreter does not cover (docs/DESIGN.md §14): GPU rounding (the interpreter
computes `tl.dot` in full fp32 with numpy and ignores `input_precision`, e.g. tf32 and tf32x3), tile
configurations other than the one kept, the compiler, and races between programs (the interpreter runs
the grid's programs one after another).
"""

from __future__ import annotations

import os
import sys

from gdn_verify.fla_shims import FLA_CP_SHIMS, FLA_SHIMS
from gdn_verify.triton_shims import TRITON_SHIMS, Shim

ENV = "TRITON_INTERPRET"
SHIMS = {s.name: s for s in TRITON_SHIMS + FLA_SHIMS + FLA_CP_SHIMS}


class TritonCpuError(RuntimeError):
    """The interpreter cannot be enabled in this process; the message says why and what to do."""


_applied: list[str] = []


def applied() -> list[str]:
    """Names of the shims in force in this process, in the order applied."""
    return list(_applied)


def enable() -> list[str]:
    """Runs Triton kernels in its interpreter on the CPU from now on; applies the triton shims needed.

    Must run before triton is imported (directly or by a kernel library such as fla), since
    `@triton.jit` reads TRITON_INTERPRET when it decorates. Idempotent; returns `applied()`.
    """
    if "triton" in sys.modules and os.environ.get(ENV) != "1":
        raise TritonCpuError("triton was imported before gdn_verify.triton_cpu.enable() without TRITON_INTERPRET=1, "
                             "so its kernels are compiled for a GPU driver: call enable() before importing triton "
                             "or fla, or set TRITON_INTERPRET=1 in the environment")
    os.environ[ENV] = "1"
    _apply(TRITON_SHIMS)
    return applied()


def enable_fla() -> list[str]:
    """`enable()` plus the shims FLA's ops need on a CPU (their probes import fla); returns `applied()`."""
    enable()
    _apply(FLA_SHIMS)
    return applied()


def enable_fla_cp() -> list[str]:
    """`enable_fla()` plus the shims FLA's context parallelism needs on a CPU with gloo; returns `applied()`."""
    enable_fla()
    _apply(FLA_CP_SHIMS)
    return applied()


def _apply(shims: tuple[Shim, ...]) -> None:
    for shim in shims:
        if shim.name not in _applied and shim.needed():
            shim.patch()
            _applied.append(shim.name)
