"""What Megatron-Core's GatedDeltaNet needs to run on a CPU: device shims, never math (docs/DESIGN.md §14).

Each shim moves an allocation or a call from the CUDA device to the CPU; none changes a value that is
computed. `install()` applies them all, once per process, before Megatron builds a module. Each has a
test (python/tests/test_megatron_cpu.py) showing the failure it fixes on a machine without a GPU.

- `current_device_is_cpu`: Megatron allocates `conv1d`, `dt_bias`, `A_log` and the CP head permutation on
  `torch.cuda.current_device()` (an int meaning `cuda:N`). Without a driver the allocation raises
  "Found no NVIDIA driver". The shim returns `torch.device("cpu")`, which every such call accepts.
- `eager_jit_fuser`: Megatron decorates `_prepare_input_for_gated_delta_rule`, `_compute_g_and_beta` and
  `_apply_gated_norm` with `torch.compile` (`megatron.core.jit.jit_fuser`). On a CPU, Inductor compiles
  them to C++ on the first call of every process (25-30 s of a 30 s cp1 run) and fuses their element-wise
  ops into loops whose rounding differs from the ops' own in the last bits. The shim turns TorchDynamo
  off: the methods run eagerly, each op as written (the reference semantics of the Python source).

The Triton kernels Megatron calls (FLA's `l2norm`, `causal_conv1d`, `chunk_gated_delta_rule`) run under
Triton's interpreter with `gdn_verify.triton_cpu`'s shims (`install` enables it);
`TransformerConfig(use_cpu_initialization=True, perform_initialization=False, gradient_accumulation_fusion=False)`
keeps the CUDA RNG tracker and the fused weight-gradient kernel out of the way, and the weights come from the case.
"""

from __future__ import annotations

import torch

_INSTALLED: set[str] = set()


def current_device_is_cpu() -> None:
    """torch.cuda.current_device() -> torch.device("cpu")."""
    torch.cuda.current_device = lambda: torch.device("cpu")
    _INSTALLED.add("current_device_is_cpu")


def eager_jit_fuser() -> None:
    """torch.compile'd functions run eagerly (TorchDynamo disabled)."""
    import torch._dynamo

    torch._dynamo.config.disable = True
    _INSTALLED.add("eager_jit_fuser")


SHIMS = {"current_device_is_cpu": current_device_is_cpu, "eager_jit_fuser": eager_jit_fuser}


def install() -> list[str]:
    """Every shim, once per process, and Triton's interpreter with the shims FLA's context parallelism
    needs (chunkwise CP hands FLA's `fla.ops.cp` context to its kernels); a no-op where a CUDA device is
    visible. The names installed, triton_cpu's included."""
    if torch.cuda.is_available():
        return []
    from gdn_verify import triton_cpu

    for name, shim in SHIMS.items():
        if name not in _INSTALLED:
            shim()
    return sorted(_INSTALLED) + triton_cpu.enable_fla_cp()
