"""Megatron's TP and CP process groups over gloo: setting them up, this rank's place in them, and the
mode, world, TP and core-form combinations a world can run."""

from __future__ import annotations

from gdn_verify.adapters.base import AdapterError
from gdn_verify.adapters.megatron import cpu_shims
from gdn_verify.adapters.megatron.layer import CORES

MODES = ("cp1", "headwise", "chunkwise")


def initialize(tp: int = 1, cp: int = 1) -> None:
    """Megatron's parallel state over the default (gloo) process group: TP groups of `tp` consecutive ranks,
    CP groups across them. Starts a one-process gloo group when none exists (cp1 at TP = 1)."""
    import torch.distributed as dist

    cpu_shims.install()
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        if (parallel_state.get_tensor_model_parallel_world_size(),
                parallel_state.get_context_parallel_world_size()) == (tp, cp):
            return
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, context_parallel_size=cp)


def tp_size_and_rank() -> tuple[int, int]:
    """This process's TP group size and its rank in it."""
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()


def cp_size_and_rank() -> tuple[int, int]:
    """This process's CP group size and its rank in it."""
    from megatron.core import parallel_state

    return parallel_state.get_context_parallel_world_size(), parallel_state.get_context_parallel_rank()


def check_world(mode: str, world: int, tp: int, core: str) -> None:
    """The mode, world, TP and core-form combination Megatron can run; AdapterError naming the fix."""
    if mode not in MODES:
        raise AdapterError(f"megatron: unknown --mode '{mode}': use {', '.join(MODES)}")
    if core not in CORES:
        raise AdapterError(f"megatron: unknown --core '{core}': use {' or '.join(CORES)}")
    if tp < 1 or world < 1 or world % tp:
        raise AdapterError(f"megatron: --world {world} is not a multiple of --tp {tp}: the CP size is world / tp")
    cp = world // tp
    if mode == "cp1" and cp != 1:
        raise AdapterError(f"megatron: --mode cp1 runs CP = 1, not world / tp = {cp}: use --world {tp}")
    if mode != "cp1" and cp < 2:
        raise AdapterError(f"megatron: --mode {mode} needs CP = world / tp >= 2, got {cp}: use --world {2 * tp}")
