"""Adapters between a library's GatedDeltaNet and Megatron's parameter names (docs/DESIGN.md §1.3).

Each adapter is a module `gdn_verify.adapters.<module>` registered in ADAPTERS under its --adapter name.
The contract every adapter module follows (python -m gdn_verify.dump calls exactly these):

    NAME: str                                 the --adapter name
    build_module(geometry: Geometry, dtype: torch.dtype, device: str = "cpu") -> torch.nn.Module
        the library's real module (plus whatever the layer needs around it, e.g. the pre-RMSNorm)
        with the case's geometry; AdapterError naming the option when the library cannot express it
    from_megatron(params: dict[str, Tensor], geometry) -> dict[str, Tensor]
        Megatron names -> the module's state_dict names (a pure, lossless mapping)
    to_megatron(state: dict[str, Tensor], geometry) -> dict[str, Tensor]
        its inverse; applies to parameters and to their gradients alike
    load_megatron_params(module, params: dict[str, Tensor]) -> None
        copies Megatron-named parameters into the module (from_megatron, then load_state_dict)
    run(module, case: Case, stages: bool = True) -> Run
        forward on case.hidden_states and backward with case.grad_output, in the module's dtype on its
        device; the result in natural order and under Megatron's names
    path(module) -> str
        which implementation ran ("torch" for a pure-PyTorch path, "fla-triton" for FLA's kernels, ...),
        recorded in meta.json
    CORES (optional): the core-op forms `run(..., core=NAME)` accepts, the first the default; the
        dump's --core chooses one
    prepare(device: str, core: str | None) -> None (optional)
        runs before the library is imported (fla: enables Triton's interpreter on a CPU)

Gradients are under Megatron's names in Run.grads; an adapter whose mapping shifts a parameter (HF's
zero-centred norm, w + 1) maps gradients without the shift.

A library that is not installed makes `load` raise AdapterError naming the pip package to install.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field
from types import ModuleType

import torch

from gdn_verify.images import Stage

# --adapter name -> module implementing the contract above.
ADAPTERS = {
    "hf-qwen3-next": "gdn_verify.adapters.hf_qwen3_next",
    "fla": "gdn_verify.adapters.fla",
    "megatron": "gdn_verify.adapters.megatron",
}

# The package an adapter's library comes from, for the message when it is missing.
PACKAGES = {"hf-qwen3-next": "transformers", "fla": "flash-linear-attention", "megatron": "megatron-core"}


class AdapterError(ValueError):
    """A configuration or input an adapter refuses; one line naming the option and the fix."""


@dataclass
class Run:
    """One forward and backward of an adapted module, in natural order under Megatron's names."""

    out: torch.Tensor  # like case.hidden_states: THD [T, 1, hidden], SBHD [S, B, hidden]; module dtype
    grad_hidden: torch.Tensor
    grads: dict[str, torch.Tensor]  # Megatron name -> gradient
    stages: list[Stage] | None = None  # captured stage pieces (docs/DESIGN.md §8), None when not captured
    path: str = "torch"
    notes: dict[str, str] = field(default_factory=dict)  # extra meta.json facts (e.g. how THD was run)
    algorithm_class: str | None = None  # meta.json's algorithm_class (docs/DESIGN.md §4), when declared


def load(name: str) -> ModuleType:
    """The adapter module registered as `name`; AdapterError naming the known ones or the missing package."""
    if name not in ADAPTERS:
        raise AdapterError(f"unknown --adapter '{name}': use {', '.join(ADAPTERS)}")
    try:
        with warnings.catch_warnings():  # FLA warns on import that Triton has no CPU driver; meta.json says which path ran
            warnings.filterwarnings("ignore", message="Triton is not supported")
            return importlib.import_module(ADAPTERS[name])
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("gdn_verify"):
            raise AdapterError(f"adapter '{name}' is not in this build of gdn_verify ({e.name} missing)") from e
        raise AdapterError(f"adapter '{name}' needs {PACKAGES[name]} ({e.name} is not installed): "
                           f"pip install {PACKAGES[name]}") from e
