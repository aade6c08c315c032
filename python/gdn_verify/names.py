"""Megatron-Core GatedDeltaNet names, shapes and row sections (docs/DESIGN.md §1.3), shared by every adapter.

Every adapter maps its library's parameters to and from these names, so the image it writes is judged
against the same oracle as the C++ implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

IN_PROJ_NORM = "in_proj.layer_norm_weight"
IN_PROJ = "in_proj.weight"
CONV_WEIGHT = "conv1d.weight"
CONV_BIAS = "conv1d.bias"
A_LOG = "A_log"
DT_BIAS = "dt_bias"
OUT_NORM = "out_norm.weight"
OUT_PROJ = "out_proj.weight"

HIDDEN = "hidden_states"
GRAD_OUTPUT = "grad_output"
CU_SEQLENS = "cu_seqlens"

# The named stages in the order the oracle judges them (docs/DESIGN.md §1.3, `ref::judged_order`);
# the boundary state is chunkwise CP's only and never comes from a single-rank PyTorch run.
FORWARD_STAGES = ("x_norm", "in_proj", "conv", "q", "k", "v", "g", "beta", "core", "gated_norm")
BACKWARD_STAGES = ("gated_norm", "core", "beta", "g", "v", "conv_k", "conv_q", "conv", "in_proj", "x_norm")
# The core fuses the L2 norm's backward, so the gradient recorded at stage q (k) is w.r.t. the conv's q (k)
# section, before the norm: it is named for that tensor, stage_grad::conv_q (conv_k), never stage_grad::q.
GRAD_STAGE = {"q": "conv_q", "k": "conv_k"}

# Row sections of in_proj.weight and channel sections of conv1d.weight, in Megatron's order.
IN_PROJ_SECTIONS = ("q", "k", "v", "z", "beta", "alpha")
CONV_SECTIONS = ("q", "k", "v")


@dataclass(frozen=True)
class Geometry:
    """The layer's config under Megatron's names (docs/DESIGN.md §1.3), as the image metadata spells it."""

    hidden_size: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    layernorm_epsilon: float = 1e-6
    conv_bias: bool = False

    @property
    def Hk(self) -> int:
        return self.linear_num_key_heads

    @property
    def Hv(self) -> int:
        return self.linear_num_value_heads

    @property
    def dk(self) -> int:
        return self.linear_key_head_dim

    @property
    def dv(self) -> int:
        return self.linear_value_head_dim

    @property
    def qk_dim(self) -> int:
        return self.Hk * self.dk

    @property
    def v_dim(self) -> int:
        return self.Hv * self.dv

    @property
    def conv_dim(self) -> int:
        return 2 * self.qk_dim + self.v_dim

    @property
    def in_proj_dim(self) -> int:
        return self.conv_dim + self.v_dim + 2 * self.Hv

    def section_widths(self) -> dict[str, int]:
        """Each in_proj row section's width, keyed by IN_PROJ_SECTIONS."""
        return {"q": self.qk_dim, "k": self.qk_dim, "v": self.v_dim, "z": self.v_dim, "beta": self.Hv, "alpha": self.Hv}

    def section(self, name: str) -> range:
        """The in_proj rows (equally: conv channels for q, k, v) of section `name`."""
        start = 0
        for s, width in self.section_widths().items():
            if s == name:
                return range(start, start + width)
            start += width
        raise KeyError(f"unknown in_proj section '{name}': use one of {', '.join(IN_PROJ_SECTIONS)}")

    def metadata(self) -> dict[str, str]:
        """The config as layer-level file metadata (docs/DESIGN.md §5; `ref::write_layer_config`)."""
        return {
            "hidden_size": str(self.hidden_size),
            "linear_num_key_heads": str(self.Hk),
            "linear_num_value_heads": str(self.Hv),
            "linear_key_head_dim": str(self.dk),
            "linear_value_head_dim": str(self.dv),
            "linear_conv_kernel_dim": str(self.linear_conv_kernel_dim),
            "layernorm_epsilon": format_number(self.layernorm_epsilon),
        }


def param_names(geometry: Geometry) -> list[str]:
    """The parameter names in docs/DESIGN.md §1.3's table order (conv1d.bias only with conv_bias)."""
    names = [IN_PROJ_NORM, IN_PROJ, CONV_WEIGHT]
    if geometry.conv_bias:
        names.append(CONV_BIAS)
    return names + [A_LOG, DT_BIAS, OUT_NORM, OUT_PROJ]


def param_shape(geometry: Geometry, name: str) -> tuple[int, ...]:
    """The shape of Megatron parameter `name`; KeyError naming the known ones otherwise."""
    g = geometry
    shapes = {
        IN_PROJ_NORM: (g.hidden_size,),
        IN_PROJ: (g.in_proj_dim, g.hidden_size),
        CONV_WEIGHT: (g.conv_dim, 1, g.linear_conv_kernel_dim),
        CONV_BIAS: (g.conv_dim,),
        A_LOG: (g.Hv,),
        DT_BIAS: (g.Hv,),
        OUT_NORM: (g.dv,),
        OUT_PROJ: (g.hidden_size, g.v_dim),
    }
    if name not in shapes:
        raise KeyError(f"unknown GatedDeltaNet parameter '{name}': use one of {', '.join(shapes)}")
    return shapes[name]


def format_number(v: float) -> str:
    """A float as C++'s std::to_chars writes it (docs/DESIGN.md §5: the shortest decimal that round-trips,
    fixed or scientific, fixed on a tie), so metadata matches the C++ writer's byte for byte."""
    digits, exponent = _shortest_digits(v)
    sign = "-" if v < 0 else ""
    if digits == "0":
        return sign + "0"
    point = exponent + 1  # position of the decimal point after the first digit
    if point <= 0:
        fixed = "0." + "0" * -point + digits
    elif point >= len(digits):
        fixed = digits + "0" * (point - len(digits))
    else:
        fixed = digits[:point] + "." + digits[point:]
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    scientific = f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return sign + (fixed if len(fixed) <= len(scientific) else scientific)


def _shortest_digits(v: float) -> tuple[str, int]:
    """The shortest round-trip significant digits of |v| and the decimal exponent of the first digit."""
    mantissa, _, exp = repr(abs(v)).partition("e")
    whole, _, frac = mantissa.partition(".")
    frac = frac.rstrip("0") if frac != "0" else ""
    exponent = int(exp or 0) + len(whole) - 1
    digits = (whole + frac).lstrip("0")
    exponent -= len(whole + frac) - len((whole + frac).lstrip("0"))
    digits = digits.rstrip("0") or "0"
    return digits, exponent
