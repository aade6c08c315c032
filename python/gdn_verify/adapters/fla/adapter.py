"""The `Adapter` class of FLA's layer (the package docstring): in this process on either core, or FLA's KCP
on gloo ranks (`kcp`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from gdn_verify.adapters.base import Adapter, AdapterError, DecayClass, ImageRun, Request, Run, WorldPlan
from gdn_verify.adapters.fla import kcp, mapping
from gdn_verify.adapters.fla.mapping import FlaAdapterError, FlaGdn, geometry_of
from gdn_verify.adapters.fla.torch_path import forward
from gdn_verify.cases import Case
from gdn_verify.names import Geometry
from gdn_verify.world import World

NAME = "fla"

CORES = {"triton": "FLA's GatedDeltaNet.forward with cu_seqlens (its Triton kernels; on a CPU under Triton's "
                    "interpreter)",
         "torch": "FLA's layer's torch submodules with FLA's naive_recurrent_gated_delta_rule and rms_norm_ref, "
                  "per sequence"}
DECAY_CLASSES_BY_CORE: dict[str, DecayClass] = {"triton": "cumsum-decay", "torch": "product-of-decays"}
# What meta.json's "library" hashes: FLA's layer, its chunked and CP kernels, the conv and norms it calls
# (0.4's flat modules and 0.6's packages alike; a glob another release lacks matches nothing).
GDN_SOURCES = ("fla/layers/gated_deltanet.py", "fla/ops/gated_delta_rule/**/*.py", "fla/ops/cp/**/*.py",
               "fla/ops/common/*.py", "fla/modules/convolution.py", "fla/modules/causal_conv1d/**/*.py",
               "fla/modules/fused_norm_gate.py", "fla/modules/l2norm.py", "fla/modules/norm/fused_norm_gate.py",
               "fla/modules/norm/l2norm.py")


def path(module: FlaGdn, core: str = "triton") -> str:
    """"fla-triton" for FLA's own forward, "torch" for the references (see the module docstring)."""
    return "fla-triton" if core == "triton" else "torch"


def _check_interpreter() -> None:
    """FLA's kernels on a CPU tensor need Triton's interpreter, enabled before FLA was imported."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise FlaAdapterError("fla --core triton on a CPU needs Triton's interpreter: call FlaAdapter().prepare("
                              "device, core) (or gdn_verify.triton_cpu.enable_fla()) before importing fla, or use "
                              "--core torch")


def _recorder():
    from gdn_verify.stages import StageRecorder

    return StageRecorder()



class FlaAdapter(Adapter):
    """flash-linear-attention's GatedDeltaNet behind its block's attn_norm (the module docstring's mapping)."""

    name = NAME
    package = "flash-linear-attention"
    import_name = "fla"
    cores = CORES
    decay_classes = DECAY_CLASSES_BY_CORE
    modes = ("cp1", "chunkwise")
    world_run = "FLA's KCP under Triton's interpreter"
    rank_env = kcp.ENV
    gdn_sources = GDN_SOURCES

    def build_module(self, geometry: Geometry, dtype: torch.dtype, device: str = "cpu",
                     core: str | None = None) -> FlaGdn:
        """FLA's layer (and its block's RMSNorm) with the geometry, for either core; refuses what FLA cannot
        express, and fp64: FLA's kernels and references compute in fp32, so an fp64 image would be judged at a
        gate it cannot meet."""
        from fla.layers.gated_deltanet import GatedDeltaNet

        if dtype == torch.float64:
            raise FlaAdapterError("fla computes in fp32 (its Triton kernels and torch references alike): use "
                                  "--dtype fp32 or bf16")
        g = geometry
        layer = GatedDeltaNet(hidden_size=g.hidden_size, head_dim=g.dk, expand_v=g.dv / g.dk, num_heads=g.Hk,
                              num_v_heads=g.Hv, use_gate=True, use_short_conv=True,
                              conv_size=g.linear_conv_kernel_dim, conv_bias=g.conv_bias, norm_eps=g.layernorm_epsilon)
        model = FlaGdn(nn.RMSNorm(g.hidden_size, eps=g.layernorm_epsilon), layer)
        if layer.head_v_dim != g.dv:
            raise FlaAdapterError(f"dv = {g.dv} is not head_dim * expand_v for head_dim = {g.dk}: FLA cannot build it")
        return model.to(device=device, dtype=dtype)

    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """FlaGdn's state dict (or its gradients) under Megatron's names (`mapping.to_megatron`)."""
        return mapping.to_megatron(state, geometry)

    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
        """Megatron's parameters as FlaGdn's state dict (`mapping.from_megatron`)."""
        return mapping.from_megatron(params, geometry)

    def load_megatron_params(self, module: nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        """Megatron-named parameters into the module, in its dtype."""
        state = self.from_megatron(params, geometry_of(module))
        dtype = module.attn.o_proj.weight.dtype
        module.load_state_dict({n: t.to(dtype) for n, t in state.items()})

    def prepare(self, device: str, core: str | None = None) -> None:
        """Before FLA is imported: on a CPU the triton core needs Triton's interpreter and FLA's shims
        (gdn_verify.triton_cpu)."""
        if (core or "triton") == "triton" and torch.device(device).type == "cpu":
            from gdn_verify import triton_cpu

            try:
                triton_cpu.enable_fla()
            except triton_cpu.TritonCpuError as e:
                raise FlaAdapterError(str(e)) from e

    def run(self, module: nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """Forward and backward of the case: FLA's forward with cu_seqlens (triton), or THD one sequence at a
        time (torch, so the convs never cross sequences)."""
        if case.spec.format != "thd" and case.spec.batch != 1:
            raise AdapterError("fla: SBHD with batch > 1 is not mapped; use a THD case or batch 1")
        core = self.core(core)
        if core == "triton" and module.attn.o_proj.weight.device.type == "cpu":
            _check_interpreter()
        dtype, device = module.attn.o_proj.weight.dtype, module.attn.o_proj.weight.device
        hidden = case.hidden_states.reshape(-1, case.geometry.hidden_size).to(device=device, dtype=dtype)
        hidden.requires_grad_()
        recorder = _recorder() if stages and core == "torch" else None
        module.zero_grad(set_to_none=True)
        out = forward(module, hidden, case.sequences(), recorder, core)
        out.backward(case.grad_output.reshape(out.shape).to(device=device, dtype=dtype))
        grads = self.to_megatron({n: p.grad for n, p in module.named_parameters()}, geometry_of(module),
                                 gradients=True)
        shape = case.hidden_states.shape
        notes = {"fla_path": CORES[core]}
        if core == "triton" and device.type == "cpu":
            from gdn_verify import triton_cpu

            notes["triton_cpu_shims"] = ", ".join(triton_cpu.applied()) or "none"
        return Run(out=out.detach().reshape(shape), grad_hidden=hidden.grad.reshape(shape), grads=grads,
                   stages=recorder.stages() if recorder else None, path=path(module, core), notes=notes,
                   decay_class=DECAY_CLASSES_BY_CORE[core])


    @classmethod
    def plan(cls, request: Request) -> WorldPlan | None:
        """--world N: FLA's KCP (chunkwise) over N gloo ranks, cp1 at N = 1 (`kcp`); else one process."""
        return super().plan(request) if request.world is None else kcp.plan(request)

    def check_world(self, case: Case, plan: WorldPlan) -> None:
        try:
            kcp.check_world(case, plan.size)
        except ValueError as e:
            raise AdapterError(f"{case.spec.name} at --world {plan.size}: {e}") from e

    def run_world(self, world: World, case: Case, plan: WorldPlan) -> ImageRun:
        return kcp.run(world, case, plan, self.decay_classes[kcp.DECAY_CORE])
