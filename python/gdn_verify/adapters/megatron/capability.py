"""Which Megatron this process imports, and whether it has `linear_cp_mode` (the chunkwise CP switch)."""

from __future__ import annotations

from pathlib import Path

from gdn_verify.adapters.base import AdapterError

# Where Megatron's CP algorithm choice lives: Megatron-LM's development branch adds
# TransformerConfig.linear_cp_mode = "headwise" | "chunkwise"; no PyPI release (0.19.2 included) has it.
LINEAR_CP_MODE = "linear_cp_mode"
NO_LINEAR_CP_MODE = ("needs a Megatron-Core with TransformerConfig.linear_cp_mode (Megatron-LM's development "
                     "branch; no PyPI release has it): put that checkout first on PYTHONPATH, or use --mode headwise "
                     "(the released all-to-all scheme)")


def has_linear_cp_mode() -> bool:
    """Whether the importable Megatron's TransformerConfig has `linear_cp_mode` (imported without its import-time
    warnings about Transformer Engine, Apex and CUDA, so a refusal stays one line)."""
    import dataclasses
    import logging
    import warnings

    torch_log = logging.getLogger("torch.utils.cpp_extension")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.transformer import TransformerConfig
    finally:
        torch_log.setLevel(level)
    return LINEAR_CP_MODE in {f.name for f in dataclasses.fields(TransformerConfig)}


def import_from(megatron_path: str | None) -> None:
    """Puts a Megatron checkout (the directory holding `megatron/`) first on this process's path; an error
    when a different megatron is already imported here."""
    import sys

    if megatron_path is None:
        return
    root = str(Path(megatron_path).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    import megatron.core

    if not str(Path(megatron.core.__file__).resolve()).startswith(root):
        raise AdapterError(f"megatron: this process already imported megatron from {megatron.core.__file__}, not "
                           f"{root}: start a fresh world for another checkout")


def rank_has_linear_cp_mode(rank, megatron_path: str | None = None) -> bool:
    """`has_linear_cp_mode` of the Megatron a world's rank imports (from `megatron_path` when given)."""
    import_from(megatron_path)
    return has_linear_cp_mode()
