"""The contract every adapter class follows (docs/DESIGN.md §14), after FLA's `BaseBackend`: class-level
facts that need no library (its name, the pip package, the core-op forms, their decay classes, the CP
modes) and the five calls `python -m gdn_verify.dump` makes, which import the library when they run."""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

import torch
from torch import nn

from gdn_verify.cases import Case
from gdn_verify.images import Stage
from gdn_verify.names import Geometry

# How a library forms its decays (docs/DESIGN.md §4): "cumsum-decay" (e^{gamma_i - gamma_j} of fp32
# chunk-local cumsums, as FLA's chunked kernels) or "product-of-decays" (one decay per token multiplied).
DecayClass = Literal["product-of-decays", "cumsum-decay"]
DECAY_CLASSES: tuple[DecayClass, ...] = get_args(DecayClass)
# The CP modes an adapter may support (docs/DESIGN.md §3).
MODES = ("cp1", "headwise", "chunkwise")


class AdapterError(ValueError):
    """A configuration or input an adapter refuses; one line naming the option and the fix."""


@dataclass
class Run:
    """One forward and backward of an adapted module, in natural order under Megatron's names."""

    out: torch.Tensor  # like case.hidden_states: THD [T, 1, hidden], SBHD [S, B, hidden]; module dtype
    grad_hidden: torch.Tensor
    grads: dict[str, torch.Tensor]  # Megatron name -> gradient
    stages: list[Stage] | None  # captured stage pieces (docs/DESIGN.md §8), None when not captured
    path: str  # which implementation ran: "torch" for a pure-PyTorch path, else the kernels' name
    decay_class: DecayClass  # the class of the core form that ran, written to meta.json
    notes: dict[str, str] = field(default_factory=dict)  # extra meta.json facts (e.g. how THD was run)


class Adapter(ABC):
    """A library's GatedDeltaNet under Megatron's parameter names (docs/DESIGN.md §1.3).

    Class attributes (readable without the library): `name` (the --adapter name), `package` (the pip
    distribution), `import_name` (the module that must be importable; its __version__ goes to
    meta.json), `cores` (core-op form -> what runs, the first the default), `decay_classes` (core-op
    form -> its decay class) and `modes` (the CP modes it runs, cp1 first)."""

    name: ClassVar[str]
    package: ClassVar[str]
    import_name: ClassVar[str]
    cores: ClassVar[Mapping[str, str]]
    decay_classes: ClassVar[Mapping[str, DecayClass]]
    modes: ClassVar[tuple[str, ...]] = ("cp1",)

    @classmethod
    def is_available(cls) -> bool:
        """Whether the library can be imported (found, not imported: FLA must be imported after `prepare`)."""
        try:
            return importlib.util.find_spec(cls.import_name) is not None
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            return False

    @classmethod
    def check_available(cls) -> None:
        if not cls.is_available():
            raise AdapterError(f"adapter '{cls.name}' needs {cls.package} ({cls.import_name} is not installed): "
                               f"pip install {cls.package}")

    @classmethod
    def core(cls, core: str | None) -> str:
        """The core-op form `core` names, the default for None; AdapterError naming the forms."""
        if core is None:
            return next(iter(cls.cores))
        if core not in cls.cores:
            raise AdapterError(f"unknown --core '{core}' for {cls.name}: use {' or '.join(cls.cores)}")
        return core

    def prepare(self, device: str, core: str | None = None) -> None:
        """Runs before the library is imported (fla: Triton's interpreter on a CPU); nothing by default."""

    @abstractmethod
    def build_module(self, geometry: Geometry, dtype: torch.dtype, device: str = "cpu",
                     core: str | None = None) -> nn.Module:
        """The library's real module (and what the layer needs around it, e.g. the pre-RMSNorm) with the
        geometry, for the core-op form `core` where the form is fixed when the module is built;
        AdapterError naming the option when the library cannot express it."""

    @abstractmethod
    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
        """Megatron names -> the module's state_dict names (a pure, lossless mapping)."""

    @abstractmethod
    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """The inverse of from_megatron; with `gradients`, of the parameters' gradients (a mapping that
        shifts a parameter, HF's zero-centred norm w + 1, leaves its gradient unshifted)."""

    @abstractmethod
    def load_megatron_params(self, module: nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        """Copies Megatron-named parameters into the module, in its dtype and on its device."""

    @abstractmethod
    def run(self, module: nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """Forward on case.hidden_states and backward with case.grad_output, in the module's dtype on its
        device, with the core-op form `core` (None: the default); the result in natural order under
        Megatron's names."""
