"""`gdn-verify run`'s geometry options for a Python command, and the CaseSpec they give (docs/DESIGN.md §8).

`add_geometry_options(parser)` adds them in place of `--case`, same names and defaults as
cli/lists.cpp; `case_spec_from_args(args)` and `seed_from_args(args)` read them back, with a ValueError
naming the fix for an illegal geometry.
"""

from __future__ import annotations

import argparse

from gdn_verify.cases import GATES, CaseSpec, case_spec, check_geometry, geometry_case_name
from gdn_verify.names import Geometry

GEOMETRY_DEFAULTS = {"format": "thd", "lengths": "128,64", "seq_len": 64, "batch": 1, "hidden": 64,
                     "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 16, "value_head_dim": 16,
                     "conv_width": 4, "conv_bias": False, "gates": "default"}


def add_geometry_options(parser: argparse.ArgumentParser) -> None:
    """`gdn-verify run`'s geometry options, same names and defaults (cli/lists.cpp `add_geometry_options`),
    and --seed. Each defaults to None, so geometry_from_args tells a given option from a default."""
    g = parser.add_argument_group("geometry (in place of --case; gdn-verify run's options and defaults)")
    g.add_argument("--format", default=None, help="thd (packed, --lengths) | sbhd (--seq-len, --batch)")
    g.add_argument("--lengths", default=None, help="THD sequence lengths, e.g. 40,200,16 (default 128,64)")
    for option, what in (("--seq-len", "SBHD sequence length S"), ("--batch", "SBHD batch B"),
                         ("--hidden", "hidden_size"), ("--num-key-heads", "linear_num_key_heads (Hk)"),
                         ("--num-value-heads", "linear_num_value_heads (Hv)"),
                         ("--key-head-dim", "linear_key_head_dim (dk)"),
                         ("--value-head-dim", "linear_value_head_dim (dv)"),
                         ("--conv-width", "linear_conv_kernel_dim (W)")):
        g.add_argument(option, default=None, type=_integer(option),
                       help=f"{what} (default {GEOMETRY_DEFAULTS[option[2:].replace('-', '_')]})")
    g.add_argument("--conv-bias", action="store_true", default=None, help="the conv1d has a bias (conv1d.bias)")
    g.add_argument("--gates", default=None, help=" | ".join(GATES) + " (default default)")
    g.add_argument("--seed", default="0", help="seed of the inputs and parameters (a non-negative integer)")


def _integer(option: str):
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer, e.g. {option} 64") from None
    return parse


def seed_from_args(args: argparse.Namespace) -> int:
    """--seed as an integer; ValueError naming the fix."""
    seed = str(args.seed)
    if not (seed.isascii() and seed.isdigit()) or int(seed) >= 2**64:  # isdigit alone takes '１２'
        raise ValueError(f"--seed '{args.seed}' is not an integer in [0, 2^64): e.g. --seed 0")
    return int(seed)


def geometry_from_args(args: argparse.Namespace) -> CaseSpec | None:
    """The CaseSpec the geometry options give (unset ones at run's defaults), None when none is given;
    ValueError naming the fix for an illegal geometry (cli/lists.cpp `geometry_spec`)."""
    given = {k: getattr(args, k) for k in GEOMETRY_DEFAULTS if getattr(args, k, None) is not None}
    if not given:
        return None
    v = {**GEOMETRY_DEFAULTS, **given}
    lengths: tuple[int, ...] = ()
    if v["format"] == "thd":
        lengths = tuple(_lengths(v["lengths"]))
    geometry = Geometry(v["hidden"], v["num_key_heads"], v["num_value_heads"], v["key_head_dim"],
                        v["value_head_dim"], v["conv_width"], conv_bias=bool(v["conv_bias"]))
    spec = CaseSpec("", "", geometry, v["format"], lengths, v["seq_len"], v["batch"], v["gates"])
    check_geometry(spec)
    return CaseSpec(geometry_case_name(spec), "from geometry options", geometry, spec.format, lengths,
                    spec.seq_len, spec.batch, spec.gates)


def case_spec_from_args(args: argparse.Namespace) -> CaseSpec:
    """--case (args.case, None when not given: thd-gva) or the geometry options; ValueError when both."""
    spec = geometry_from_args(args)
    if spec is not None and args.case is not None:
        raise ValueError(f"--case {args.case} and geometry options given: a probe case fixes the geometry; "
                         "give one or the other")
    return spec if spec is not None else case_spec(args.case or "thd-gva")


def _lengths(text: str) -> list[int]:
    """"40,200,16" -> [40, 200, 16]; ValueError as cli/lists.cpp `parse_int_list` and `geometry_spec`."""
    out = []
    for part in str(text).split(","):
        try:
            out.append(int(part))
        except ValueError:
            raise ValueError(f"--lengths: '{part}' is not an integer; give a comma-separated list like "
                             "256,128") from None
    if any(L < 0 for L in out):
        raise ValueError(f"--lengths {text}: a sequence length is negative; give token counts like 40,200,16")
    if sum(out) == 0:
        raise ValueError(f"--lengths {text} holds no token: give token counts like 40,200,16")
    return out
