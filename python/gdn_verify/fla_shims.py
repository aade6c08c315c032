"""The shims FLA needs on a CPU: one for any of its ops (`FLA_SHIMS`, applied by gdn_verify.triton_cpu.enable_fla)
and two for its context parallelism, `fla.ops.cp` with gloo (`FLA_CP_SHIMS`, enable_fla_cp); docs/triton_cpu.md.

| shim | failure it fixes (exact message) | where |
|---|---|---|
| `fla-device-ctx-cpu` | `AttributeError: module 'torch.cpu' has no attribute 'device'` | FLA 0.4.2's `input_guard` enters `torch.<Triton backend>.device(index)`: no driver, backend `cpu`, no such context; a CPU tensor enters none |
| `fla-sm-count-no-driver` | `RuntimeError: 0 active drivers ([]). There should only be one.` | FLA 0.4.2's `get_multiprocessor_count` asks the driver whether it is an NPU outside its fallback; the shim returns that fallback, 1 |
| `cp-device-cpu` | `RuntimeError: CP affine chains require NVIDIA Ampere or newer ...` | `fla.ops.cp`'s `_check_cp_device` refuses a CPU tensor; the shim lets CPU pass, nothing else |
| `gloo-all-gather-view` | `RuntimeError: ProcessGroupGloo::allgather: invalid tensor size ...` | FLA passes an `[W, n, ...]` output, gloo wants `[W*n, ...]`: the same memory, viewed flat |
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

import sys
from collections.abc import Callable

from gdn_verify.triton_shims import Shim, fails_with, set_attr, undo_all


def _rebind(old: object, new: object) -> Callable[[], None]:
    """Every fla module's binding of `old` (a module-level name, as `from fla.x import f` copies it) set to `new`;
    returns the undo."""
    undos = [set_attr(m, name, new) for n, m in list(sys.modules.items()) if n.startswith("fla.")
             for name, value in list(vars(m).items()) if value is old]
    return lambda: undo_all(undos)


# (1) FLA's input_guard (around each op taking tensors) enters custom_device_ctx(tensor.device.index). FLA 0.4.2
# builds it as getattr(torch, <Triton's backend>).device(index); under the interpreter there is no driver, the
# backend is "cpu", and torch.cpu has no device context. A CPU tensor's index is None, so there is no device to
# enter: the shim enters none (what later FLA does itself, e.g. 0.6.0's custom_device_ctx) and passes any
# other index to FLA's.
DEVICE_CTX_ERROR = "module 'torch.cpu' has no attribute 'device'"


def _device_ctx_needed() -> bool:
    from fla import utils

    ctx = getattr(utils, "custom_device_ctx", None)
    return ctx is not None and fails_with(lambda: ctx(None), DEVICE_CTX_ERROR)


def _device_ctx_patch() -> Callable[[], None]:
    import contextlib

    from fla import utils

    ctx = utils.custom_device_ctx

    def custom_device_ctx(index):
        return contextlib.nullcontext() if index is None else ctx(index)

    return _rebind(ctx, custom_device_ctx)


# (2) FLA's get_multiprocessor_count (how many programs some backward kernels split their partial sums over, e.g.
# FusedRMSNormGated's dw) falls back to 1 where Triton gives no device properties. FLA 0.4.2 first asks the
# driver whether it is an NPU, outside its try, and with no driver that raises. The shim returns FLA's own
# fallback, 1, when (and only when) that is the error: the count 0.6.0 takes under the interpreter too.
SM_COUNT_ERROR = "0 active drivers"


def _sm_count_needed() -> bool:
    from fla import utils

    count = getattr(utils, "get_multiprocessor_count", None)
    return count is not None and fails_with(lambda: count(0), SM_COUNT_ERROR)


def _sm_count_patch() -> Callable[[], None]:
    from fla import utils

    count = utils.get_multiprocessor_count

    def get_multiprocessor_count(*args, **kwargs):
        try:
            return count(*args, **kwargs)
        except RuntimeError as e:
            if SM_COUNT_ERROR not in str(e):
                raise
            return 1

    return _rebind(count, get_multiprocessor_count)  # fla's modules bound it by name


# (3) fla.ops.cp checks for an Ampere-or-newer CUDA device (or Ascend) before its CP kernels; under the
# interpreter the tensors are on the CPU. The shim passes CPU devices and defers to FLA's check otherwise.
# An FLA without the check (0.4.2 has none) runs its CP kernels on any device: nothing to shim.
CP_DEVICE_ERROR = "CP affine chains require NVIDIA Ampere or newer"


def _cp_device_needed() -> bool:
    import torch
    from fla.ops.cp import context

    check = getattr(context, "_check_cp_device", None)
    return check is not None and fails_with(lambda: check(torch.device("cpu")), CP_DEVICE_ERROR)


def _cp_device_patch() -> Callable[[], None]:
    import fla.ops.cp  # noqa: F401 -- loads the modules that bound the check by name
    from fla.ops.cp import context

    check = context._check_cp_device

    def check_cp_device(device):
        if device.type != "cpu":
            check(device)

    return _rebind(check, check_cp_device)  # five fla modules bound the check by name


# (4) gloo's all_gather_into_tensor accepts only an output of shape [W * n, ...] for an input [n, ...];
# NCCL also takes [W, n, ...], which FLA's fla.ops.cp.comm passes. The same memory viewed flat is what
# gloo wants. Whether gloo refuses is found at the first call (it validates before communicating, so
# every rank sees the same refusal); from then on a [W, n, ...] output is passed flat.
GLOO_ERROR = "ProcessGroupGloo::allgather: invalid tensor size"


def _gloo_patch() -> Callable[[], None]:
    import torch.distributed as dist

    gather = dist.all_gather_into_tensor
    refused: list[bool] = []

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        stacked = output_tensor.dim() == input_tensor.dim() + 1 and output_tensor.shape[1:] == input_tensor.shape
        if stacked and not refused:
            try:
                return gather(output_tensor, input_tensor, group, async_op)
            except RuntimeError as e:
                if GLOO_ERROR not in str(e):
                    raise
                refused.append(True)
        if stacked:
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
        return gather(output_tensor, input_tensor, group, async_op)

    return set_attr(dist, "all_gather_into_tensor", all_gather_into_tensor)


FLA_SHIMS = (
    Shim("fla-device-ctx-cpu", DEVICE_CTX_ERROR, _device_ctx_needed, _device_ctx_patch),
    Shim("fla-sm-count-no-driver", SM_COUNT_ERROR, _sm_count_needed, _sm_count_patch),
)

# gloo's refusal is detected at the first stacked call (it needs a process group), so the wrapper is
# installed whenever CP runs on a CPU and passes every call through unchanged until gloo refuses.
FLA_CP_SHIMS = (
    Shim("cp-device-cpu", CP_DEVICE_ERROR, _cp_device_needed, _cp_device_patch),
    Shim("gloo-all-gather-view", GLOO_ERROR, lambda: True, _gloo_patch),
)
