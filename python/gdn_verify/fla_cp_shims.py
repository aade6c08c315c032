"""The shims FLA's context parallelism (`fla.ops.cp`) needs on a CPU with gloo, applied by
gdn_verify.triton_cpu.enable_fla_cp (docs/triton_cpu.md).

| shim | failure it fixes (exact message) | where |
|---|---|---|
| `cp-device-cpu` | `RuntimeError: CP affine chains require NVIDIA Ampere or newer ...` | `fla.ops.cp`'s `_check_cp_device` refuses a CPU tensor; the shim lets CPU pass, nothing else |
| `gloo-all-gather-view` | `RuntimeError: ProcessGroupGloo::allgather: invalid tensor size ...` | FLA passes an `[W, n, ...]` output, gloo wants `[W*n, ...]`: the same memory, viewed flat |
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

import sys
from collections.abc import Callable

from gdn_verify.triton_shims import Shim, fails_with, set_attr, undo_all

# (1) fla.ops.cp checks for an Ampere-or-newer CUDA device (or Ascend) before its CP kernels; under the
# interpreter the tensors are on the CPU. The shim passes CPU devices and defers to FLA's check otherwise.
CP_DEVICE_ERROR = "CP affine chains require NVIDIA Ampere or newer"


def _cp_device_needed() -> bool:
    import torch
    from fla.ops.cp import context

    return fails_with(lambda: context._check_cp_device(torch.device("cpu")), CP_DEVICE_ERROR)


def _cp_device_patch() -> Callable[[], None]:
    import fla.ops.cp  # noqa: F401 -- loads the modules that bound the check by name
    from fla.ops.cp import context

    check = context._check_cp_device

    def check_cp_device(device):
        if device.type != "cpu":
            check(device)

    # each fla module that did `from fla.ops.cp.context import _check_cp_device` holds its own binding
    holders = [m for n, m in list(sys.modules.items())
               if n.startswith("fla.") and getattr(m, "_check_cp_device", None) is check]
    undos = [set_attr(m, "_check_cp_device", check_cp_device) for m in holders]
    return lambda: undo_all(undos)


# (2) gloo's all_gather_into_tensor accepts only an output of shape [W * n, ...] for an input [n, ...];
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


# gloo's refusal is detected at the first stacked call (it needs a process group), so the wrapper is
# installed whenever CP runs on a CPU and passes every call through unchanged until gloo refuses.
FLA_CP_SHIMS = (
    Shim("cp-device-cpu", CP_DEVICE_ERROR, _cp_device_needed, _cp_device_patch),
    Shim("gloo-all-gather-view", GLOO_ERROR, lambda: True, _gloo_patch),
)
