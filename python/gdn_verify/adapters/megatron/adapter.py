"""The MegatronAdapter class: the Adapter contract (gdn_verify.adapters.base) over this package's parts."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gdn_verify import provenance
from gdn_verify.adapters.base import Adapter, AdapterError, ImageRun, Request, Run, WorldPlan
from gdn_verify.adapters.fla.adapter import GDN_SOURCES as FLA_SOURCES
from gdn_verify.adapters.megatron import layer, rules, worlds
from gdn_verify.adapters.megatron.capability import NO_LINEAR_CP_MODE, has_linear_cp_mode
from gdn_verify.adapters.megatron.groups import MODES, check_world, cp_size_and_rank, initialize, tp_size_and_rank
from gdn_verify.adapters.megatron.params import check_tp, gather_tp, shard_tp
from gdn_verify.adapters.megatron.ranks import rank_run
from gdn_verify.cases import Case
from gdn_verify.names import Geometry
from gdn_verify.world import World

NAME = "megatron"


class MegatronAdapter(Adapter):
    """Megatron-Core's GatedDeltaNet (non-TE spec) on the CPU's gloo ranks (the package docstring's mapping)."""

    name = NAME
    package = "megatron-core"
    import_name = "megatron.core"
    cores = layer.CORES
    decay_classes = {core: layer.DECAY_CLASS for core in layer.CORES}
    modes = MODES
    world_run = "Megatron's TP x CP on gloo ranks, cp1 included"
    tensor_parallel = True
    rank_env = worlds.RANK_ENV
    # meta.json's "library" hashes the layer (one module, or a package as in 0.19), its all-to-all CP and the
    # development branch's CP layout where present
    gdn_sources = ("megatron/core/ssm/gated_delta_net.py", "megatron/core/ssm/gated_delta_net/**/*.py",
                   "megatron/core/ssm/mamba_context_parallel.py", "megatron/core/context_parallel_layout.py",
                   "megatron/core/context_parallel_layout/**/*.py")

    @classmethod
    def library(cls) -> dict:
        """meta.json's "library": Megatron as imported here, with the FLA whose kernels its layer runs (both core
        forms call FLA's Triton ops) as "kernels"."""
        return {**super().library(), "kernels": provenance.library("fla", FLA_SOURCES)}

    def build_module(self, geometry: Geometry, dtype: torch.dtype, device: str = "cpu", core: str | None = None, *,
                     cp_mode: str | None = None) -> torch.nn.Module:
        """Megatron-Core's GatedDeltaNet with the geometry over Megatron's TP and CP groups (`initialize`;
        a one-process world when none is set up), its core form fixed by deterministic_mode. `cp_mode` sets
        linear_cp_mode where Megatron has it."""
        if torch.device(device).type != "cpu":
            raise AdapterError(f"megatron: --device {device}: this adapter runs Megatron's layer on the CPU "
                               "(gloo groups); use --device cpu")
        from megatron.core import parallel_state

        if not parallel_state.model_parallel_is_initialized():
            initialize()
        if cp_mode is not None and not has_linear_cp_mode():
            raise AdapterError(f"megatron: linear_cp_mode '{cp_mode}' {NO_LINEAR_CP_MODE}")
        check_tp(geometry, parallel_state.get_tensor_model_parallel_world_size())
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.ssm.gated_delta_net import GatedDeltaNet

        pg = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])
        deterministic = self.core(core) == layer.DETERMINISTIC
        config = layer.config(geometry, dtype, deterministic, cp_mode, tp_size_and_rank()[0], cp_size_and_rank()[0])
        return GatedDeltaNet(config, layer.submodules(), conv_bias=geometry.conv_bias, pg_collection=pg)

    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """A TP = 1 Megatron state dict (or its gradients) under the image's names: the same names, checked."""
        return gather_tp([state], geometry)

    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
        """The image's parameters as a TP = 1 Megatron state dict."""
        return shard_tp(params, geometry, 1)[0]

    def load_megatron_params(self, module: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        """The image's parameters into this TP rank's module: its shard (`shard_tp`), every name loaded."""
        tp, rank = tp_size_and_rank()
        dtype = next(module.parameters()).dtype
        shard = shard_tp(params, layer.module_geometry(module), tp)[rank]
        module.load_state_dict({n: t.to(dtype) for n, t in shard.items()}, strict=True)

    def run(self, module: torch.nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """The cp1 run in one process: the case in natural order, in the core form the module was built for."""
        if cp_size_and_rank()[0] != 1 or tp_size_and_rank()[0] != 1:
            raise ValueError("megatron.run is the one-process cp1 run; across ranks use rank_run")
        built = layer.path(module)
        if core is not None and built != f"megatron-{self.core(core)}":
            raise AdapterError(f"megatron: --core {core}, but the module was built as {built}: build it with "
                               f"core={core!r}")
        d = rank_run(module, case, "cp1", stages)
        return Run(out=d.out, grad_hidden=d.grad_hidden, grads=d.grads, stages=d.stages, path=built,
                   decay_class=layer.DECAY_CLASS, notes={"megatron_path": layer.PATH_NOTE[built]})

    @classmethod
    def plan(cls, request: Request) -> WorldPlan:
        """Always gloo ranks on the CPU: --mode (default cp1) on --world (default 1) ranks at TP --tp (default 1)."""
        core, world, tp, mode = cls.core(request.core), request.world or 1, request.tp or 1, request.mode or "cp1"
        check_world(mode, world, tp, core)
        if request.device != "cpu":
            raise AdapterError(f"--device {request.device}: --adapter megatron runs on the CPU's gloo ranks; drop "
                               "--device")
        return WorldPlan(mode, world, tp, core, request.stages, request.source)

    def check_world(self, case: Case, plan: WorldPlan) -> None:
        """Before any rank starts: chunkwise needs linear_cp_mode (refused naming which Megatron has it), then
        every rule of `rules` (ours, and Megatron's own configuration checks run here on the config the ranks
        will build), each refusal one line naming the rule and the flag."""
        if plan.mode == "chunkwise" and not has_linear_cp_mode():
            raise AdapterError(f"megatron: --mode chunkwise {NO_LINEAR_CP_MODE}")
        rules.check(case, plan)

    def run_world(self, world: World, case: Case, plan: WorldPlan) -> ImageRun:
        return worlds.run(world, self, case, plan)
