"""The contract every adapter class follows (docs/DESIGN.md §14), after FLA's `BaseBackend`: class-level
facts that need no library (its name, the pip package, the core-op forms, their decay classes, the CP
modes, whether it runs on several processes) and the calls that turn a case into an image, which import
the library when they run: in this process (`prepare`, `build_module`, `load_megatron_params`, `run`,
together `run_here`), or on the ranks of a `gdn_verify.world.World` (`plan`, `check_world`, `run_world`)."""

from __future__ import annotations

import importlib.util
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

import torch
from torch import nn

import gdn_verify
from gdn_verify import provenance
from gdn_verify.cases import Case
from gdn_verify.images import RankDump, Stage
from gdn_verify.names import Geometry
from gdn_verify.world import World

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


@dataclass(frozen=True)
class Request:
    """One dump as asked for (`python -m gdn_verify.dump`'s options; None: not given)."""

    core: str | None = None
    mode: str | None = None
    world: int | None = None  # gloo processes
    tp: int | None = None
    device: str = "cpu"
    stages: bool = True
    source: str | None = None  # a checkout the ranks import the library from (None: whatever imports)


@dataclass(frozen=True)
class WorldPlan:
    """A run on gloo processes (docs/DESIGN.md §14): `mode` on `size` ranks at TP `tp`, core form `core`."""

    mode: str
    size: int
    tp: int
    core: str
    stages: bool
    source: str | None = None


@dataclass
class ImageRun:
    """One dump ready for `images.write_image`: every rank's RankDump of one mode, how the ranks talked,
    meta.json's adapter keys, and what the dump's summary line says of the run."""

    dumps: list[RankDump]
    transport: str  # "inproc" (one process) or "gloo"
    meta: dict
    label: str  # e.g. "fla (fla-triton path)"


class Adapter(ABC):
    """A library's GatedDeltaNet under Megatron's parameter names (docs/DESIGN.md §1.3).

    Class attributes (readable without the library): `name` (the --adapter name), `package` (the pip
    distribution), `import_name` (the module that must be importable; its __version__ goes to
    meta.json), `cores` (core-op form -> what runs, the first the default), `decay_classes` (core-op
    form -> its decay class), `modes` (the CP modes it runs, cp1 first), `world_run` (what its run on
    several processes is, "" for none), `tensor_parallel` and `rank_env` (its ranks' environment)."""

    name: ClassVar[str]
    package: ClassVar[str]
    import_name: ClassVar[str]
    cores: ClassVar[Mapping[str, str]]
    decay_classes: ClassVar[Mapping[str, DecayClass]]
    modes: ClassVar[tuple[str, ...]] = ("cp1",)
    world_run: ClassVar[str] = ""
    tensor_parallel: ClassVar[bool] = False
    rank_env: ClassVar[Mapping[str, str]] = {}
    gdn_sources: ClassVar[tuple[str, ...]] = ()

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

    @classmethod
    def backend(cls, device: str) -> str:
        """The image's backend (part of its identity): the adapter on the device's type."""
        return f"{cls.name}:{torch.device(device).type}"

    @classmethod
    def versions(cls) -> dict[str, str]:
        """What computed the image, for meta.json: gdn_verify, torch and the library as imported here."""
        module = sys.modules.get(cls.import_name)
        return {"gdn_verify": gdn_verify.__version__, "torch": torch.__version__,
                cls.import_name: str(getattr(module, "__version__", "unknown"))}

    @classmethod
    def library(cls) -> dict:
        """meta.json's "library" (gdn_verify.provenance): the library as this process imported it; a world's
        ranks call it, they are the ones that imported."""
        return provenance.library(cls.import_name, cls.gdn_sources)

    def run_here(self, case: Case, request: Request) -> ImageRun:
        """The cp1 image of `case` computed in this process: prepare, build, load, run."""
        core = self.core(request.core)
        self.prepare(request.device, core)
        module = self.build_module(case.geometry, case.torch_dtype, request.device, core)
        self.load_megatron_params(module, case.params)
        result = self.run(module, case, request.stages, core)
        dumped = RankDump("cp1", 0, 1, result.out.cpu(), result.grad_hidden.cpu(),
                          {n: g.cpu() for n, g in result.grads.items()}, result.stages)
        meta = {"adapter": self.name, "path": result.path, "device": request.device, "notes": result.notes,
                "versions": self.versions(), "library": self.library(), "decay_class": result.decay_class}
        return ImageRun([dumped], "inproc", meta, f"{self.name} ({result.path} path)")

    @classmethod
    def plan(cls, request: Request) -> WorldPlan | None:
        """The run on gloo processes `request` asks for, None for one in this process (the default: an
        adapter with `world_run` overrides it); AdapterError naming the fix."""
        if request.mode not in (None, "cp1"):
            raise AdapterError(f"--mode {request.mode} needs --world N (the CP ranks); without it the dump is cp1")
        return None

    def check_world(self, case: Case, plan: WorldPlan) -> None:
        """AdapterError naming the fix when `case` cannot run as `plan`, before any rank starts."""

    def run_world(self, world: World, case: Case, plan: WorldPlan) -> ImageRun:
        """The image of `case` computed on the ranks of `world` (`plan.size` of them, under `rank_env`)."""
        raise AdapterError(f"adapter {self.name} has no run on several processes: drop --world")
