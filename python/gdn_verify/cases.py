"""The probe cases of `gdn-verify probe dump`, rebuilt bit for bit (docs/DESIGN.md §4 "Inputs", §8).

A port of the C++ generator: the test-case parameters seeded by parameter name (`ref::case_params`)
from the counter-based PRNG (gdn_verify.rng), the gate regimes' A_log, and the rounding to the storage
dtype. The command-line geometry options that give a CaseSpec are gdn_verify.case_options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gdn_verify import names
from gdn_verify.names import Geometry
from gdn_verify.rng import Rng, det_log, seeded_normal, seeded_uniform


def init_params(geometry: Geometry, seed: int) -> dict[str, torch.Tensor]:
    """Megatron's initialisation seeded by parameter name, as `ref::init_params` (docs/DESIGN.md §1.3)."""
    init_method_std = 0.02
    conv_bound = 1.0 / math.sqrt(float(geometry.linear_conv_kernel_dim))
    params = {}
    for name in names.param_names(geometry):
        shape = names.param_shape(geometry, name)
        if name in (names.IN_PROJ_NORM, names.OUT_NORM, names.DT_BIAS):
            params[name] = torch.ones(shape, dtype=torch.float64)
        elif name == names.IN_PROJ:
            params[name] = seeded_normal(seed, name, shape, init_method_std)
        elif name == names.OUT_PROJ:
            params[name] = seeded_normal(seed, name, shape, init_method_std / math.sqrt(2.0))
        elif name in (names.CONV_WEIGHT, names.CONV_BIAS):
            params[name] = seeded_uniform(seed, name, shape, lambda u: conv_bound * (2.0 * u - 1.0))
        else:  # A_log: log U(1, 16)
            params[name] = seeded_uniform(seed, name, shape, lambda u: det_log(1.0 + 15.0 * u))
    return params


def _sign(u: float) -> float:
    return -1.0 if u < 0.5 else 1.0


def _folded(u: float) -> float:
    """A fresh uniform in [0, 1) from u's other half: 2u and 2u - 1 are exact (`ref::case_params`)."""
    return 2.0 * u if u < 0.5 else 2.0 * u - 1.0


def _outside_one(m: float) -> float:
    """[0, 1) -> [0.5, 0.8) u [1.2, 1.5), uniform on both."""
    t = 0.6 * m
    return 0.5 + t if t < 0.3 else 0.9 + t


def case_params(geometry: Geometry, seed: int) -> dict[str, torch.Tensor]:
    """The parameters of every case, as `ref::case_params` (docs/DESIGN.md §1.3 "Test-case parameters"):
    `init_params` with the norm weights, dt_bias, the conv bias and A_log drawn away from 0 and 1."""
    conv_bound = 1.0 / math.sqrt(float(geometry.linear_conv_kernel_dim))
    params = init_params(geometry, seed)
    for name in names.param_names(geometry):
        shape = names.param_shape(geometry, name)
        if name in (names.IN_PROJ_NORM, names.OUT_NORM, names.DT_BIAS):
            params[name] = seeded_uniform(seed, name, shape, _outside_one)
        elif name == names.CONV_BIAS:
            params[name] = seeded_uniform(seed, name, shape,
                                          lambda u: _sign(u) * conv_bound * (0.25 + 0.75 * _folded(u)))
        elif name == names.A_LOG:
            params[name] = seeded_uniform(seed, name, shape, lambda u: det_log(2.0 + 14.0 * u))
    return params


def a_log_between(seed: int, heads: int, lo: float, hi: float) -> torch.Tensor:
    """A_log with A log-uniform in [lo, hi] per head: the gate regimes of docs/DESIGN.md §4."""
    rng = Rng(seed, "A_log/regime")
    log_lo, log_hi = det_log(lo), det_log(hi)
    return torch.from_numpy(log_lo + (log_hi - log_lo) * rng.uniforms(heads))


DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}
GATES = ("default", "weak", "strong", "extreme")
FORMATS = ("thd", "sbhd")


def rounded(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` rounded to the storage dtype and widened back to F64. bf16 goes through fp32, both steps
    round-to-nearest-even, as the C++ `Tensor::to` (core/half.hpp) does."""
    if dtype == torch.bfloat16:
        return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)
    return t.to(dtype).to(torch.float64)


@dataclass(frozen=True)
class CaseSpec:
    """A probe case's geometry (probes/image.cpp `probe_cases`)."""

    name: str
    what: str
    geometry: Geometry
    format: str  # "thd" | "sbhd"
    lengths: tuple[int, ...] = ()  # THD
    seq_len: int = 0  # SBHD
    batch: int = 1  # SBHD
    gates: str = "default"  # "default" | "weak" | "strong" | "extreme" (harness/run_spec.hpp `GateRegime`)


_GVA = Geometry(64, 4, 8, 16, 16)
CASES: dict[str, CaseSpec] = {
    c.name: c
    for c in (
        CaseSpec("thd-gva", "THD, 3 sequences (128, 64, 32), hidden 64, Hk 4, Hv 8, dk = dv = 16", _GVA, "thd",
                 (128, 64, 32)),
        CaseSpec("thd-short", "THD, one 16-token sequence, Hk = Hv = 8, dk = dv = 8, weak gates",
                 Geometry(32, 8, 8, 8, 8), "thd", (16,), gates="weak"),
        CaseSpec("thd-odd", "THD, 3 sequences of odd lengths (9, 5, 3), as thd-gva", _GVA, "thd", (9, 5, 3)),
        CaseSpec("sbhd", "SBHD, S = 128, B = 1, hidden 64, Hk 4, Hv 8, dk = dv = 16", _GVA, "sbhd", seq_len=128),
    )
}


@dataclass
class Case:
    """One probe case's inputs, rounded to the storage dtype and held as F64 (docs/DESIGN.md §8)."""

    spec: CaseSpec
    seed: int
    dtype: str  # "fp64" | "fp32" | "bf16"
    params: dict[str, torch.Tensor]
    hidden_states: torch.Tensor  # THD [T, 1, hidden] | SBHD [S, B, hidden], natural order
    grad_output: torch.Tensor
    cu_seqlens: list[int] | None  # THD only

    @property
    def geometry(self) -> Geometry:
        return self.spec.geometry

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def sequences(self) -> list[tuple[int, int]]:
        """Each sequence's [begin, end) rows: THD the packed tokens, SBHD each batch column's S rows."""
        if self.cu_seqlens is not None:
            return list(zip(self.cu_seqlens[:-1], self.cu_seqlens[1:]))
        S = self.spec.seq_len
        return [(b * S, (b + 1) * S) for b in range(self.spec.batch)]


def case_spec(name: str) -> CaseSpec:
    """The probe case `name`; ValueError naming the known ones."""
    if name not in CASES:
        raise ValueError(f"unknown case '{name}': use {', '.join(CASES)}")
    return CASES[name]


def make_case(name: str, seed: int = 0, dtype: str = "fp32") -> Case:
    """The inputs, parameters and grad_output `gdn-verify probe dump --case name --seed seed --dtype dtype`
    writes, bit for bit (`cp::make_case`)."""
    return make_case_from_geometry(case_spec(name), seed, dtype)


def make_case_from_geometry(spec: CaseSpec, seed: int = 0, dtype: str = "fp32") -> Case:
    """The case `gdn-verify probe dump` writes for this geometry (a probe case's, or the geometry options'
    of gdn_verify.case_options), bit for bit (`cp::make_case`); ValueError naming the fix for an illegal one."""
    check_geometry(spec)
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}': use {', '.join(DTYPES)}")
    g = spec.geometry
    params = case_params(g, seed)
    if spec.gates == "weak":
        params[names.A_LOG] = a_log_between(seed, g.Hv, 1e-3, 1e-2)
    elif spec.gates == "strong":
        params[names.A_LOG] = a_log_between(seed, g.Hv, 8.0, 32.0)
    elif spec.gates == "extreme":
        shape_extreme_params(g, params)
    storage = DTYPES[dtype]
    params = {n: rounded(t, storage) for n, t in params.items()}
    if spec.format == "thd":
        cu = [0]
        for length in spec.lengths:
            cu.append(cu[-1] + length)
        shape, cu_seqlens = (cu[-1], 1, g.hidden_size), cu
    else:
        shape, cu_seqlens = (spec.seq_len, spec.batch, g.hidden_size), None
    hidden = rounded(seeded_normal(seed, names.HIDDEN, shape), storage)
    grad_output = rounded(seeded_normal(seed, names.GRAD_OUTPUT, shape), storage)
    if spec.gates == "extreme":
        hidden = rounded(extreme_rows(hidden, cu_seqlens), storage)
    return Case(spec, seed, dtype, params, hidden, grad_output, cu_seqlens)


def shape_extreme_params(g: Geometry, params: dict[str, torch.Tensor]) -> None:
    """The extreme regime's parameters, element for element as `cp::shape_extreme_params`: even value heads
    A = 1e3 and dt_bias = -10, in_proj's column 0 (over x_0 = sqrt(hidden) ln_w[0] of a spike row) driving
    a + dt_bias to +-1e3 and the beta logits to +-50 on the spike rows, key head 0's q rows zero and key head
    Hk-1's k rows times 1e-29."""
    hidden, root = g.hidden_size, math.sqrt(float(g.hidden_size)) * float(params[names.IN_PROJ_NORM][0])
    beta_row = g.conv_dim + g.v_dim
    alpha_row = beta_row + g.Hv
    A_log, dt_bias, W = params[names.A_LOG], params[names.DT_BIAS], params[names.IN_PROJ].view(-1)
    for h in range(g.Hv):
        even = h % 2 == 0
        if even:
            A_log[h] = det_log(1e3)
            dt_bias[h] = -10.0
        W[(alpha_row + h) * hidden] = ((1e3 if even else -1e3) - float(dt_bias[h])) / root
        W[(beta_row + h) * hidden] = (50.0 if even else -50.0) / root
    tiny_k = (2 * g.qk_dim - g.dk) * hidden
    W[: g.dk * hidden] = 0.0
    W[tiny_k: tiny_k + g.dk * hidden] *= 1e-29


def extreme_rows(hidden: torch.Tensor, cu_seqlens: list[int] | None) -> torch.Tensor:
    """The extreme regime's hidden rows (`cp::extreme_rows`): per sequence i, token t of L, t = 0 of even i
    zero, else t = L/2 the spike 1e4 e_0, else t = L-1 times 1e4; column 0 zero on every other row."""
    out = hidden.clone()
    flat = out.view(-1, hidden.shape[-1])
    if cu_seqlens is not None:
        spans = [(b, e - b, 1) for b, e in zip(cu_seqlens[:-1], cu_seqlens[1:])]
    else:
        spans = [(b, hidden.shape[0], hidden.shape[1]) for b in range(hidden.shape[1])]
    for i, (start, L, stride) in enumerate(spans):
        for t in range(L):
            row = flat[start + t * stride]
            zero = t == 0 and i % 2 == 0
            spike = not zero and t == L // 2
            large = not zero and not spike and t == L - 1
            if zero or spike:
                row.zero_()
            elif large:
                row.mul_(1e4)
            row[0] = 1e4 if spike else 0.0
    return out


def check_geometry(spec: CaseSpec) -> None:
    """ValueError naming the fix for a geometry gdn-verify rejects at CP = 1 (`ref::LayerConfig`, `geometry_spec`)."""
    if spec.format not in FORMATS:
        raise ValueError(f"unknown --format '{spec.format}': use thd or sbhd")
    if spec.gates not in GATES:
        raise ValueError(f"unknown gate regime '{spec.gates}': use default, weak, strong or extreme")
    g = spec.geometry
    for name in ("hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                 "linear_value_head_dim", "linear_conv_kernel_dim"):
        if getattr(g, name) <= 0:
            raise ValueError(f"layer config: {name} = {getattr(g, name)} must be a positive integer")
    if g.Hv % g.Hk:
        raise ValueError(f"layer config: linear_num_value_heads = {g.Hv} is not a multiple of linear_num_key_heads = "
                         f"{g.Hk}; GVA maps Hv/Hk value heads onto each key head, so choose Hv divisible by Hk")
    if spec.format == "sbhd" and (spec.seq_len < 1 or spec.batch < 1):
        raise ValueError(f"--seq-len {spec.seq_len} --batch {spec.batch}: SBHD needs at least one token in each of "
                         "at least one sequence, e.g. --seq-len 64 --batch 1")


def geometry_case_name(spec: CaseSpec) -> str:
    """The case name of a geometry dump: the options that rebuild it (probes/image.cpp `geometry_case_name`)."""
    g = spec.geometry
    shape = (f"--lengths {','.join(map(str, spec.lengths))}" if spec.format == "thd"
             else f"--seq-len {spec.seq_len} --batch {spec.batch}")
    return (f"--format {spec.format} {shape} --hidden {g.hidden_size} --num-key-heads {g.Hk} --num-value-heads {g.Hv} "
            f"--key-head-dim {g.dk} --value-head-dim {g.dv} --conv-width {g.linear_conv_kernel_dim}"
            f"{' --conv-bias' if g.conv_bias else ''} --gates {spec.gates}")
