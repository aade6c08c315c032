"""Adapter for Megatron-Core's `GatedDeltaNet` (megatron.core.ssm.gated_delta_net).

Megatron's parameter names are the image's names (docs/DESIGN.md §1.3), so a TP = 1 state dict maps as
is. A TP-sharded module (TP size t) holds on rank r, as Megatron's forward splits it:

| name | rank r's shard | full tensor |
|---|---|---|
| `in_proj.weight` | rows `[q_r, k_r, v_r, z_r, beta_r, alpha_r]`, each section / t | per section, the ranks' pieces in rank order |
| `conv1d.weight`, `conv1d.bias` | channels `[q_r, k_r, v_r]` | the same, over q, k, v |
| `A_log`, `dt_bias` | value heads `[r Hv/t, (r+1) Hv/t)` | concatenated |
| `out_proj.weight` | columns `[r Hv dv/t, ...)` (row-parallel) | concatenated along columns |
| `in_proj.layer_norm_weight`, `out_norm.weight` | replicated | rank 0's (all must be equal) |

so gathering is section-major, like Megatron's sharded checkpoint (`sharded_state_dict` splits
in_proj into query, key, value, z, beta, alpha). Transformer Engine's `_extra_state` entries carry no
parameter and are left out.
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from gdn_verify import names
from gdn_verify.adapters.base import Adapter, AdapterError, DecayClass, Run
from gdn_verify.cases import Case
from gdn_verify.names import Geometry


class MegatronAdapterError(AdapterError):
    """A state dict that does not fit the geometry; the message names the tensor and the fix."""


def _sections(geometry: Geometry, name: str, tp: int) -> list[int]:
    """The per-rank section widths along dim 0 of a sectioned parameter (in_proj rows, conv channels)."""
    widths = geometry.section_widths()
    keys = names.IN_PROJ_SECTIONS if name == names.IN_PROJ else names.CONV_SECTIONS
    return [widths[k] // tp for k in keys]


def _check_tp(geometry: Geometry, tp: int) -> None:
    """TP must divide both head counts (docs/DESIGN.md §1.3, §3.1)."""
    if tp < 1 or geometry.Hk % tp or geometry.Hv % tp:
        raise MegatronAdapterError(f"TP size {tp} does not divide Hk = {geometry.Hk} and Hv = {geometry.Hv}: "
                                   "use a TP size that divides both head counts")


def _parameters(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict without Transformer Engine's `_extra_state` entries."""
    return {n: t for n, t in state.items() if not n.endswith("_extra_state")}


def _check_names(state: Mapping[str, torch.Tensor], geometry: Geometry, where: str) -> None:
    """Exactly the parameters of §1.3 for this geometry: an unknown or missing name is an error."""
    expected, got = set(names.param_names(geometry)), set(state)
    if got != expected:
        raise MegatronAdapterError(f"{where}: unknown {sorted(got - expected)}, missing {sorted(expected - got)}: "
                                   "pass a GatedDeltaNet state dict (conv1d.bias exactly when conv_bias)")


def gather_tp(shards: Sequence[Mapping[str, torch.Tensor]], geometry: Geometry) -> dict[str, torch.Tensor]:
    """The full-layer parameters from the state dicts of TP ranks 0 .. t-1, section by section."""
    tp = len(shards)
    _check_tp(geometry, tp)
    states = [_parameters(s) for s in shards]
    for r, s in enumerate(states):
        _check_names(s, geometry, f"TP rank {r}")
    full = {}
    for name in names.param_names(geometry):
        pieces = [s[name] for s in states]
        if name in (names.IN_PROJ, names.CONV_WEIGHT, names.CONV_BIAS):
            split = [torch.split(p, _sections(geometry, name, tp), dim=0) for p in pieces]
            full[name] = torch.cat([rank[i] for i in range(len(split[0])) for rank in split], dim=0)
        elif name in (names.A_LOG, names.DT_BIAS):
            full[name] = torch.cat(pieces, dim=0)
        elif name == names.OUT_PROJ:
            full[name] = torch.cat(pieces, dim=1)
        else:
            if any(not torch.equal(p, pieces[0]) for p in pieces):
                raise MegatronAdapterError(f"'{name}' differs between TP ranks: a replicated weight must be equal "
                                           "on every rank")
            full[name] = pieces[0]
        if tuple(full[name].shape) != names.param_shape(geometry, name):
            raise MegatronAdapterError(f"'{name}' gathers to {tuple(full[name].shape)}, not "
                                       f"{names.param_shape(geometry, name)}: check the geometry and TP size")
    return full


def shard_tp(full: Mapping[str, torch.Tensor], geometry: Geometry, tp: int) -> list[dict[str, torch.Tensor]]:
    """The inverse of `gather_tp`: each TP rank's state dict, as Megatron's TP-local module holds it."""
    _check_tp(geometry, tp)
    full = _parameters(full)
    _check_names(full, geometry, "full state dict")
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(tp)]
    for name, t in full.items():
        if name in (names.IN_PROJ, names.CONV_WEIGHT, names.CONV_BIAS):
            sections = [s.chunk(tp, dim=0) for s in torch.split(t, [w * tp for w in _sections(geometry, name, tp)])]
            pieces = [torch.cat([s[r] for s in sections], dim=0) for r in range(tp)]
        elif name in (names.A_LOG, names.DT_BIAS):
            pieces = list(t.chunk(tp, dim=0))
        elif name == names.OUT_PROJ:
            pieces = list(t.chunk(tp, dim=1))
        else:
            pieces = [t] * tp
        for r in range(tp):
            shards[r][name] = pieces[r].clone()
    return shards


NAME = "megatron"
# Both of Megatron's chunk forms (FLA's kernels, torch_chunk_gated_delta_rule) take decays as exp of
# differences of fp32 chunk-local cumsums of g (docs/DESIGN.md §4).
DECAY_CLASS: DecayClass = "cumsum-decay"

# Where Megatron's CP algorithm choice lives: Megatron-LM's development branch adds
# TransformerConfig.linear_cp_mode = "headwise" | "chunkwise"; no PyPI release (0.19.2 included) has it.
LINEAR_CP_MODE = "linear_cp_mode"
NO_LINEAR_CP_MODE = ("needs a Megatron-Core with TransformerConfig.linear_cp_mode (Megatron-LM's development "
                     "branch; no PyPI release has it): put that checkout first on PYTHONPATH, or use --mode headwise "
                     "(the released all-to-all scheme)")


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


def initialize(tp: int = 1, cp: int = 1) -> None:
    """Megatron's parallel state over the default (gloo) process group: TP groups of `tp` consecutive ranks,
    CP groups across them. Starts a one-process gloo group when none exists (cp1 at TP = 1)."""
    import torch.distributed as dist

    from gdn_verify import megatron_cpu

    megatron_cpu.install()
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        if (parallel_state.get_tensor_model_parallel_world_size(),
                parallel_state.get_context_parallel_world_size()) == (tp, cp):
            return
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, context_parallel_size=cp)


def config(geometry: Geometry, dtype: torch.dtype, deterministic: bool = False, cp_mode: str | None = None):
    """Megatron's TransformerConfig for the geometry, set up for a CPU (no CUDA RNG, no fused wgrad)."""
    import torch.nn.functional as F
    from megatron.core.transformer import TransformerConfig

    g = geometry
    extra = {LINEAR_CP_MODE: cp_mode} if cp_mode is not None else {}
    return TransformerConfig(num_layers=1, hidden_size=g.hidden_size, num_attention_heads=g.Hk,
                             linear_num_key_heads=g.Hk, linear_num_value_heads=g.Hv, linear_key_head_dim=g.dk,
                             linear_value_head_dim=g.dv, linear_conv_kernel_dim=g.linear_conv_kernel_dim,
                             layernorm_epsilon=g.layernorm_epsilon, normalization="RMSNorm", activation_func=F.silu,
                             params_dtype=dtype, use_cpu_initialization=True, perform_initialization=False,
                             gradient_accumulation_fusion=False, deterministic_mode=deterministic, **extra)


def _tp():
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()


def _cp():
    from megatron.core import parallel_state

    return parallel_state.get_context_parallel_world_size(), parallel_state.get_context_parallel_rank()


def _geometry(module: torch.nn.Module) -> Geometry:
    c = module.config
    return Geometry(c.hidden_size, c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim,
                    c.linear_value_head_dim, c.linear_conv_kernel_dim, c.layernorm_epsilon, module.conv_bias)


def path(module: torch.nn.Module) -> str:
    """Megatron's forward runs FLA's Triton kernels (deterministic_mode: its torch chunk form)."""
    return "megatron-torch-chunk" if module.config.deterministic_mode else "megatron-fla-triton"


def cp_rows(case: Case) -> list[int]:
    """The natural rows this process's CP rank holds, in its local (s, b) order, by Megatron's rules: SBHD
    through Megatron's own per-sequence zigzag (`_get_batch_on_this_cp_rank_per_sequence_balancing` on the
    CP group); THD the per-document zigzag, chunks r and 2 cp - 1 - r of every sequence (Megatron hands it to
    Transformer Engine's `thd_get_partitioned_indices`, which is CUDA only)."""
    cp, rank = _cp()
    for begin, end in case.sequences():
        if (end - begin) % (2 * cp) and cp > 1:
            raise AdapterError(f"megatron: a sequence of {end - begin} tokens does not split into 2 CP = {2 * cp} "
                               "chunks (Megatron's zigzag): pick a case whose lengths are multiples of 2 CP")
    if case.cu_seqlens is None:
        from megatron.core import parallel_state
        from megatron.core.utils import _get_batch_on_this_cp_rank_per_sequence_balancing

        S, B = case.spec.seq_len, case.spec.batch
        index = torch.arange(B * S).reshape(B, S)
        local = _get_batch_on_this_cp_rank_per_sequence_balancing(
            {"tokens": index}, cp_group=parallel_state.get_context_parallel_group())["tokens"]
        return local.t().reshape(-1).tolist()
    from gdn_verify.layouts import zigzag_rows

    return zigzag_rows(case, cp, rank)


# Replicated parameters whose gradient is a partial over TP ranks: out_norm acts on each rank's own heads
# (in_proj's norm sees the full input, its gradient arrives TP-reduced through ColumnParallelLinear).
TP_PARTIAL = (names.OUT_NORM,)


def _section_cols(geometry: Geometry, tp: int, rank: int) -> list[int]:
    """The full-layer in_proj columns of TP rank `rank`'s output: each section's rank-th slice."""
    cols: list[int] = []
    for s in names.IN_PROJ_SECTIONS:
        section, width = geometry.section(s), geometry.section_widths()[s] // tp
        cols.extend(range(section.start + rank * width, section.start + (rank + 1) * width))
    return cols


def _mixer_cols(geometry: Geometry) -> dict[str, list[int]]:
    """The full-layer columns of each mixer stage this (TP, CP) rank computes: after Megatron's head
    permutation and all-to-all, CP rank c of TP rank t holds the c-th of cp equal head blocks of each of
    t's sections (`_build_head_perm_for_split_sections`)."""
    g = geometry
    (tp, t), (cp, c) = _tp(), _cp()

    def heads(n: int) -> range:
        per = n // (tp * cp)
        return range(t * n // tp + c * per, t * n // tp + (c + 1) * per)

    def flat(hs: range, width: int, offset: int = 0) -> list[int]:
        return [offset + h * width + i for h in hs for i in range(width)]

    qk, v = flat(heads(g.Hk), g.dk), flat(heads(g.Hv), g.dv)
    return {"conv": qk + [g.qk_dim + i for i in qk] + [2 * g.qk_dim + i for i in v], "q": qk, "k": qk, "v": v,
            "g": list(heads(g.Hv)), "beta": list(heads(g.Hv)), "core": v}


def _record_stages(module: torch.nn.Module, recorder, rows: list[int], tokens: int):
    """Hooks and method wrappers putting every named stage into `recorder`; a function removing them.
    x_norm, in_proj and gated_norm (out_proj's input) on this rank's `rows`; the mixer's stages on every
    token (Megatron's all-to-all has put them in natural order) and this rank's heads. The wrappers pass
    values through unchanged (q, k, v are cut from conv and put back together so that each piece's
    gradient is seen)."""
    from gdn_verify.stages import l2_normalised

    g = _geometry(module)
    tp, t = _tp()
    v = g.v_dim // tp
    every = range(tokens)
    cols = _mixer_cols(g)
    prepare, gates, rule = (module._prepare_input_for_gated_delta_rule, module._compute_g_and_beta,
                            module.gated_delta_rule)

    def prepare_recorded(qkv, gate, batch, seq_len, *feats):
        recorder.record("conv", qkv, every, cols["conv"])
        q, k, vv = torch.split(qkv, [len(cols["q"]), len(cols["k"]), len(cols["v"])], dim=-1)
        for name, x in (("q", q), ("k", k)):
            recorder.record(name, x, every, cols[name], l2_normalised(x.reshape(*x.shape[:-1], -1, g.dk)))
        recorder.record("v", vv, every, cols["v"])
        return prepare(torch.cat([q, k, vv], dim=-1), gate, batch, seq_len, *feats)

    def gates_recorded(*args):
        decay, beta = gates(*args)
        recorder.record("g", decay, every, cols["g"])
        recorder.record("beta", beta, every, cols["beta"])
        return decay, beta

    def rule_recorded(*args, **kwargs):
        core, state = rule(*args, **kwargs)
        recorder.record("core", core, every, cols["core"])
        return core, state

    module._prepare_input_for_gated_delta_rule = prepare_recorded
    module._compute_g_and_beta = gates_recorded
    module.gated_delta_rule = rule_recorded
    module.in_proj.x_norm_hook = lambda x: recorder.record("x_norm", x, rows, range(g.hidden_size))
    handles = [
        module.in_proj.register_forward_hook(
            lambda m, i, out: recorder.record("in_proj", out[0], rows, _section_cols(g, tp, t))),
        module.out_proj.register_forward_pre_hook(
            lambda m, i: recorder.record("gated_norm", i[0], rows, range(t * v, (t + 1) * v))),
    ]

    def undo() -> None:
        for h in handles:
            h.remove()
        del module._prepare_input_for_gated_delta_rule, module._compute_g_and_beta  # the class's methods again
        module.gated_delta_rule = rule
        module.in_proj.x_norm_hook = None

    return undo


def _packed(case: Case):
    """Megatron's PackedSeqParams for a THD case (cu_seqlens of the whole packed batch); None for SBHD."""
    if case.cu_seqlens is None:
        return None
    from megatron.core.packed_seq_params import PackedSeqParams

    cu = torch.tensor(case.cu_seqlens, dtype=torch.int32)
    longest = max(e - b for b, e in case.sequences())
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                           max_seqlen_kv=longest)


def _full_grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The layer's parameter gradients, full: summed over CP (each rank holds a partial), TP-partial ones
    summed over TP, then the TP shards gathered (`gather_tp`)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    # In the state dtype before any sum (Megatron reduces fp32 main grads), so a bf16 layer's CP partials
    # are not rounded to bf16 again on the way.
    grads = {n: p.grad.detach().to(torch.float64 if p.dtype == torch.float64 else torch.float32)
             for n, p in module.named_parameters()}
    for n, g in grads.items():
        dist.all_reduce(g, group=parallel_state.get_context_parallel_group())
        if n in TP_PARTIAL:
            dist.all_reduce(g, group=parallel_state.get_tensor_model_parallel_group())
    tp, _ = _tp()
    if tp == 1:
        return grads
    shards: list = [None] * tp
    dist.all_gather_object(shards, grads, group=parallel_state.get_tensor_model_parallel_group())
    return gather_tp(shards, _geometry(module))


def _tp_merged(stages: list) -> list | None:
    """This CP rank's stages with every TP rank's columns side by side (TP rank 0's for a stage all hold
    whole, x_norm); None on TP ranks other than 0."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    from gdn_verify.images import Stage

    tp, t = _tp()
    if tp == 1:
        return stages
    group = parallel_state.get_tensor_model_parallel_group()
    every: list = [None] * tp
    dist.all_gather_object(every, stages, group=group)
    if t != 0:
        return None
    merged = []
    for pieces in zip(*every):
        if list(pieces[0].cols) == list(pieces[1].cols):
            merged.append(pieces[0])
            continue
        cols = [c for p in pieces for c in p.cols]
        merged.append(Stage(pieces[0].name, torch.cat([p.data for p in pieces], dim=1), pieces[0].rows, cols))
    return merged


def rank_run(module: torch.nn.Module, case: Case, mode: str, stages: bool = True):
    """Forward and backward of this process's CP shard of the case (`cp_rows`); the CP rank's RankDump
    (out and grad_hidden its rows, the layer's full parameter gradients, the stages with every TP rank's
    columns) on TP rank 0, None on the other TP ranks."""
    from gdn_verify.images import RankDump
    from gdn_verify.stages import StageRecorder

    rows = cp_rows(case)
    B, H = case.spec.batch if case.cu_seqlens is None else 1, case.geometry.hidden_size
    dtype = next(module.parameters()).dtype
    shape = (len(rows) // B, B, H)
    hidden = case.hidden_states.reshape(-1, H)[rows].reshape(shape).to(dtype).requires_grad_()
    grad_out = case.grad_output.reshape(-1, H)[rows].reshape(shape).to(dtype)
    recorder = StageRecorder() if stages else None
    undo = _record_stages(module, recorder, rows, case.hidden_states.shape[0] * B) if stages else None
    try:
        module.zero_grad(set_to_none=True)
        out, _ = module(hidden, attention_mask=None, packed_seq_params=_packed(case))
        out.backward(grad_out)
    finally:
        if undo:
            undo()
    grads = _full_grads(module)
    merged = _tp_merged(recorder.stages()) if recorder is not None else None
    if _tp()[1] != 0:
        return None
    cp, cp_rank = _cp()
    return RankDump(mode, cp_rank, cp, out.detach(), hidden.grad, grads, merged)


_PATH_NOTE = {
    "megatron-fla-triton": "Megatron-Core's GatedDeltaNet.forward (non-TE spec) with FLA's Triton kernels under "
                           "Triton's interpreter",
    "megatron-torch-chunk": "Megatron-Core's GatedDeltaNet.forward (non-TE spec) in deterministic_mode: its "
                            "torch_chunk_gated_delta_rule and F.conv1d; FLA's Triton l2norm under Triton's interpreter",
}


# --core: Megatron's two forms of the gated delta rule (the first the default); deterministic_mode picks
# DETERMINISTIC.
CORES = {"fla-triton": "FLA's chunked Triton kernels", "torch-chunk": "torch_chunk_gated_delta_rule"}
DETERMINISTIC = "torch-chunk"
MODES = ("cp1", "headwise", "chunkwise")
# The environment of every rank: FLA's Triton kernels under Triton's interpreter.
RANK_ENV = {"TRITON_INTERPRET": "1"}


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


def _rank_dump(rank, case: Case, mode: str, tp: int, core: str, stages: bool, megatron_path: str | None = None):
    """One rank's part of a world's dump (`gdn_verify.world`): Megatron's groups, the module, rank_run."""
    import_from(megatron_path)
    initialize(tp, rank.world // tp)
    cp_mode = None if mode == "cp1" or not has_linear_cp_mode() else mode
    adapter = MegatronAdapter()
    module = adapter.build_module(case.geometry, case.torch_dtype, core=core, cp_mode=cp_mode)
    adapter.load_megatron_params(module, case.params)
    return rank_run(module, case, mode, stages), path(module)


def dump_world(world, directory, case: Case, image: str, backend: str, mode: str, tp: int, core: str,
               stages: bool = True, extra_meta: Mapping | None = None, megatron_path: str | None = None) -> str:
    """Runs the mode on every rank of `world` (a gdn_verify.world.World of TP x CP ranks) and writes the
    image once; the path that ran. Chunkwise needs linear_cp_mode (AdapterError naming which Megatron has
    it); with linear_cp_mode, headwise is linear_cp_mode = headwise. `megatron_path`: a checkout the ranks
    import Megatron from (else whatever `import megatron` finds)."""
    from gdn_verify import images

    check_world(mode, world.size, tp, core)
    if mode == "chunkwise" and not has_linear_cp_mode():
        raise AdapterError(f"megatron: --mode chunkwise {NO_LINEAR_CP_MODE}")
    answers = world.run(_rank_dump, case, mode, tp, core, stages, megatron_path)
    dumps = [d for d, _ in answers if d is not None]
    ran = answers[0][1]
    # "adapter" marks a third-party image: probe cross-mode judges its CP relative to its own cp1
    meta = dict(extra_meta or {}, adapter="megatron", path=ran, decay_class=DECAY_CLASS, tp=tp,
                notes={"megatron_path": _PATH_NOTE[ran]})
    images.write_image(directory, case, image, backend, dumps, transport="gloo", extra_meta=meta)
    return ran


class MegatronAdapter(Adapter):
    """Megatron-Core's GatedDeltaNet (non-TE spec) on the CPU's gloo ranks (the module docstring's mapping)."""

    name = NAME
    package = "megatron-core"
    import_name = "megatron.core"
    cores = CORES
    decay_classes = {core: DECAY_CLASS for core in CORES}
    modes = MODES

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
        _check_tp(geometry, parallel_state.get_tensor_model_parallel_world_size())
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.ssm.gated_delta_net import GatedDeltaNet

        pg = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])
        deterministic = self.core(core) == DETERMINISTIC
        return GatedDeltaNet(config(geometry, dtype, deterministic, cp_mode), submodules(),
                             conv_bias=geometry.conv_bias, pg_collection=pg)

    def to_megatron(self, state: Mapping[str, torch.Tensor], geometry: Geometry,
                    gradients: bool = False) -> dict[str, torch.Tensor]:
        """A TP = 1 Megatron state dict (or its gradients) under the image's names: the same names, checked."""
        return gather_tp([state], geometry)

    def from_megatron(self, params: Mapping[str, torch.Tensor], geometry: Geometry) -> dict[str, torch.Tensor]:
        """The image's parameters as a TP = 1 Megatron state dict."""
        return shard_tp(params, geometry, 1)[0]

    def load_megatron_params(self, module: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        """The image's parameters into this TP rank's module: its shard (`shard_tp`), every name loaded."""
        tp, rank = _tp()
        dtype = next(module.parameters()).dtype
        shard = shard_tp(params, _geometry(module), tp)[rank]
        module.load_state_dict({n: t.to(dtype) for n, t in shard.items()}, strict=True)

    def run(self, module: torch.nn.Module, case: Case, stages: bool = True, core: str | None = None) -> Run:
        """The cp1 run in one process: the case in natural order, in the core form the module was built for."""
        if _cp()[0] != 1 or _tp()[0] != 1:
            raise ValueError("megatron.run is the one-process cp1 run; across ranks use rank_run")
        built = path(module)
        if core is not None and built != f"megatron-{self.core(core)}":
            raise AdapterError(f"megatron: --core {core}, but the module was built as {built}: build it with "
                               f"core={core!r}")
        d = rank_run(module, case, "cp1", stages)
        return Run(out=d.out, grad_hidden=d.grad_hidden, grads=d.grads, stages=d.stages, path=built,
                   decay_class=DECAY_CLASS, notes={"megatron_path": _PATH_NOTE[built]})
