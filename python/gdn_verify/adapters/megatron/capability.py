"""Which Megatron this process imports, and whether it has `linear_cp_mode` (the chunkwise CP switch)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

from gdn_verify.adapters.base import AdapterError

# Where Megatron's CP algorithm choice lives: Megatron-LM's development branch adds
# TransformerConfig.linear_cp_mode = "headwise" | "chunkwise"; no PyPI release (0.19.2 included) has it.
LINEAR_CP_MODE = "linear_cp_mode"
NO_LINEAR_CP_MODE = ("needs a Megatron-Core with TransformerConfig.linear_cp_mode (Megatron-LM's development "
                     "branch; no PyPI release has it): put that checkout first on PYTHONPATH, or use --mode headwise "
                     "(the released all-to-all scheme)")


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """Megatron imported without its import-time warnings about Transformer Engine, Apex and CUDA, so a
    refusal made in the parent stays one line."""
    torch_log = logging.getLogger("torch.utils.cpp_extension")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch_log.setLevel(level)


def has_linear_cp_mode() -> bool:
    """Whether the importable Megatron's TransformerConfig has `linear_cp_mode`."""
    with quietly():
        from megatron.core.transformer import TransformerConfig
    return LINEAR_CP_MODE in {f.name for f in dataclasses.fields(TransformerConfig)}


def linear_cp_mode_for(mode: str) -> str | None:
    """The `linear_cp_mode` a run of `mode` sets: none at cp1 or where Megatron has no such switch (0.19.2's
    headwise is its only CP), else the mode itself."""
    return None if mode == "cp1" or not has_linear_cp_mode() else mode


def import_from(megatron_path: str | None) -> None:
    """Puts a Megatron checkout (the directory holding `megatron/`) first on this process's path; an error
    when a different megatron is already imported here."""
    import sys

    if megatron_path is None:
        return
    root = str(Path(megatron_path).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    with quietly():
        import megatron.core

    if not str(Path(megatron.core.__file__).resolve()).startswith(root):
        raise AdapterError(f"megatron: this process already imported megatron from {megatron.core.__file__}, not "
                           f"{root}: start a fresh world for another checkout")


def rank_has_linear_cp_mode(rank, megatron_path: str | None = None) -> bool:
    """`has_linear_cp_mode` of the Megatron a world's rank imports (from `megatron_path` when given)."""
    import_from(megatron_path)
    return has_linear_cp_mode()


# The method each of Megatron's GDN shapes hands the conv's output (its first argument, `qkv`) to:
# 0.19.2 and the dev branch `_prepare_input_for_gated_delta_rule`, commit 5139086e's single module
# `_prepare_qkv_for_gated_delta_rule`.
PREPARE_METHODS = ("_prepare_input_for_gated_delta_rule", "_prepare_qkv_for_gated_delta_rule")


def prepare_method(module) -> str:
    """The name of `module`'s method taking the conv's output; AdapterError naming what was looked for."""
    for name in PREPARE_METHODS:
        if hasattr(module, name):
            return name
    raise AdapterError(f"megatron: this GatedDeltaNet has none of {', '.join(PREPARE_METHODS)} (the method taking "
                       "the conv's output, where stages are recorded): dump with --no-stages, or teach "
                       "gdn_verify.adapters.megatron.capability this shape")


def converts_at_input(module) -> bool:
    """Whether chunkwise CP converts the layer's input to the contiguous layout before in_proj (the dev
    branch: `convert_module_input_tensors_cp_partition_mode`), so in_proj, its norm and out_proj's input
    run on the rank's contiguous span; 5139086e converts in_proj's output, so those run on its zigzag rows."""
    import sys

    return hasattr(sys.modules[type(module).__module__], "convert_module_input_tensors_cp_partition_mode")
