"""The GatedDeltaNet layer as this adapter builds it: the TransformerConfig, the non-TE submodules, its
two core forms and the path names the image records."""

from __future__ import annotations

import torch

from gdn_verify.adapters.base import DecayClass
from gdn_verify.adapters.megatron.capability import LINEAR_CP_MODE
from gdn_verify.names import Geometry

# --core: Megatron's two forms of the gated delta rule (the first the default); deterministic_mode picks
# DETERMINISTIC.
CORES = {"fla-triton": "FLA's chunked Triton kernels", "torch-chunk": "torch_chunk_gated_delta_rule"}
DETERMINISTIC = "torch-chunk"
# Both of Megatron's chunk forms (FLA's kernels, torch_chunk_gated_delta_rule) take decays as exp of
# differences of fp32 chunk-local cumsums of g (docs/DESIGN.md §4).
DECAY_CLASS: DecayClass = "cumsum-decay"

PATH_NOTE = {
    "megatron-fla-triton": "Megatron-Core's GatedDeltaNet.forward (non-TE spec) with FLA's Triton kernels under "
                           "Triton's interpreter",
    "megatron-torch-chunk": "Megatron-Core's GatedDeltaNet.forward (non-TE spec) in deterministic_mode: its "
                            "torch_chunk_gated_delta_rule and F.conv1d; FLA's Triton l2norm under Triton's interpreter",
}


def _norm_linear_class():
    """Megatron's ColumnParallelLinear behind a local RMSNorm whose weight is `layer_norm_weight`: the
    non-Transformer-Engine form of TELayerNormColumnParallelLinear (no such module ships for GDN). The
    norm computes in fp32 and returns the input's dtype, as TE's fused norm does."""
    import torch.nn.functional as F
    from megatron.core.tensor_parallel import ColumnParallelLinear

    class NormColumnParallelLinear(ColumnParallelLinear):
        def __init__(self, input_size: int, output_size: int, *, config, **kwargs) -> None:
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.layer_norm_weight = torch.nn.Parameter(torch.ones(input_size, dtype=config.params_dtype))
            self.eps = config.layernorm_epsilon
            self.x_norm_hook = None  # called with x_norm: the adapter's stage recorder

        def forward(self, x: torch.Tensor):
            x_norm = F.rms_norm(x.float(), (x.shape[-1],), self.layer_norm_weight.float(), self.eps).to(x.dtype)
            if self.x_norm_hook is not None:
                self.x_norm_hook(x_norm)
            return super().forward(x_norm)

    return NormColumnParallelLinear


def submodules():
    """The hand-written non-TE ModuleSpec: in_proj = RMSNorm + ColumnParallelLinear, out_norm Megatron's
    local norm (WrappedTorchNorm: torch's RMSNorm), out_proj = RowParallelLinear."""
    from megatron.core.ssm.gated_delta_net import GatedDeltaNetSubmodules
    from megatron.core.tensor_parallel import RowParallelLinear
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    return GatedDeltaNetSubmodules(in_proj=_norm_linear_class(), out_norm=WrappedTorchNorm,
                                   out_proj=RowParallelLinear)


def config(geometry: Geometry, dtype: torch.dtype, deterministic: bool = False, cp_mode: str | None = None,
           tp: int = 1, cp: int = 1):
    """Megatron's TransformerConfig for the geometry, set up for a CPU (no CUDA RNG, no fused wgrad), declared
    a GDN layer (`experimental_attention_variant`) over TP `tp` x CP `cp`, so that Megatron's own checks of
    a GDN configuration run when it is built (docs/megatron.md, "Whose rule")."""
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    g = geometry
    extra = {LINEAR_CP_MODE: cp_mode} if cp_mode is not None else {}
    return TransformerConfig(num_layers=1, hidden_size=g.hidden_size, num_attention_heads=g.Hk,
                             linear_num_key_heads=g.Hk, linear_num_value_heads=g.Hv, linear_key_head_dim=g.dk,
                             linear_value_head_dim=g.dv, linear_conv_kernel_dim=g.linear_conv_kernel_dim,
                             layernorm_epsilon=g.layernorm_epsilon, normalization="RMSNorm", activation_func=F.silu,
                             params_dtype=dtype, use_cpu_initialization=True, perform_initialization=False,
                             gradient_accumulation_fusion=False, deterministic_mode=deterministic,
                             experimental_attention_variant="gated_delta_net", linear_attention_freq=1,
                             tensor_model_parallel_size=tp, context_parallel_size=cp, **extra)


def module_geometry(module: torch.nn.Module) -> Geometry:
    """The full layer's geometry, read back from a built module's config."""
    c = module.config
    return Geometry(c.hidden_size, c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                    c.linear_value_head_dim, c.linear_conv_kernel_dim, c.layernorm_epsilon, module.conv_bias)


def path(module: torch.nn.Module) -> str:
    """Megatron's forward runs FLA's Triton kernels (deterministic_mode: its torch chunk form)."""
    return "megatron-torch-chunk" if module.config.deterministic_mode else "megatron-fla-triton"
