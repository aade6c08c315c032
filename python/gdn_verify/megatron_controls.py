"""The Megatron gate's controls: bugs planted in a copy of the Megatron under test, each of which the gate
must catch with a first divergence naming its stage and the rank that computed it (docs/megatron.md).

A bug class has a plant per Megatron shape that carries its code (0.19.2's `gated_delta_net/common.py`,
5139086e's single `gated_delta_net.py` and `context_parallel_layout.py`, the dev branch's package and
`context_parallel_layout/routes.py`): a plant applies to a tree holding its text exactly once. A class
the tree under test runs but no plant of it applies to fails the controls step: the gate cannot show it
would catch that bug there.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

SSM = "megatron/core/ssm/"
REPLACE = '__import__("dataclasses").replace'
_PERM = ("norm_out.index_select(-1, torch.argsort(_build_head_perm_for_split_sections(\n"
         "{i}    (norm_out.shape[-1] // 2,) * 2, cp_size, norm_out.device)))\n")
_A2A_BACK = ("if packed_seq_params is not None and packed_seq_params.qkv_format == 'thd':\n"
             "{i}    if cp_size > 1:\n{i}        assert thd_cp_a2a_inv is not None\n")


@dataclass(frozen=True)
class Plant:
    """One bug planted as text: `right` (once in `file`, relative to the checkout) becomes `wrong`; `first`,
    where this shape's code makes the first divergence another than its class's."""

    file: str
    right: str
    wrong: str
    first: str = ""


@dataclass(frozen=True)
class Control:
    """A bug class: the mode it acts in, its case (probe case, dtype, core, TP x CP world), the first
    divergence `probe cross-mode` must print, and its plants."""

    name: str
    mode: str
    case: tuple[str, str, str, int, int]
    first: str
    plants: tuple[Plant, ...]


def _head_perm_back(file: str, indent: str) -> Plant:
    """Before the all-to-all back (a2a_hp_to_cp of 5139086e and the dev branch, at `indent`), the head
    permutation's inverse applied to out_proj's input."""
    anchor = indent + _A2A_BACK.format(i=indent)
    perm = f"{indent}if cp_size > 1:\n{indent}    norm_out = " + _PERM.format(i=indent + "    ")
    return Plant(file, anchor, perm + anchor)


_ZIGZAG_SLOTS = ("        segments.append((seq_start + first_chunk * chunk_len, chunk_len, local_start{a}))\n"
                 "        segments.append((seq_start + second_chunk * chunk_len, chunk_len, local_start{b}))\n")
_THD_LB = "    # In the per-sequence load-balanced layout each rank owns load-balanced\n"
_THD_OFF = "    lb_chunk = (lb_chunk + 1) % (2 * cp_size)\n" + _THD_LB

_BIAS = ("        conv1d_bias = (\n            {getter}(\n                self.conv1d.bias,\n                dim=0,\n"
         "                cp_group={group},\n{sections}            )\n            if self.conv_bias\n"
         "            else None\n        )\n        if self.config.deterministic_mode:\n")
_SECTIONS = "                split_sections=qkv_channels_split_sections,\n"


def _bias_split(file: str, getter: str, group: str) -> Plant:
    """The conv bias's headwise CP slice taken without its q, k, v sections (the weight's keeps them)."""
    return Plant(file, _BIAS.format(getter=getter, group=group, sections=_SECTIONS),
                 _BIAS.format(getter=getter, group=group, sections=""))


CONTROLS = (
    # head blocks land in the wrong columns of out_proj's input (identity at CP = 1)
    Control("head_perm_back", "headwise", ("sbhd", "fp32", "torch-chunk", 1, 2),
            "first divergence: stage::gated_norm (forward, rank 0 of 2", (
                Plant(SSM + "gated_delta_net/common.py", "        # CP all to all: HP to CP\n",
                      "        # CP all to all: HP to CP\n"
                      "        norm_out_hp = norm_out_hp.index_select(-1, torch.argsort("
                      "_build_head_perm_for_split_sections(\n"
                      "            (norm_out_hp.shape[-1] // 2,) * 2, self.cp_size, norm_out_hp.device)))\n"),
                _head_perm_back(SSM + "gated_delta_net.py", "        "),
                _head_perm_back(SSM + "gated_delta_net/common.py", "    "))),
    # the packed (THD) zigzag of the all-to-all off by one chunk: the mixer sees every sequence rotated
    Control("thd_zigzag_off_by_one", "headwise", ("thd-gva", "fp32", "fla-triton", 1, 2),
            "first divergence: stage::conv (forward, rank 0 of 2", (
                Plant(SSM + "gated_delta_net/common.py", _THD_LB, _THD_OFF),
                Plant(SSM + "gated_delta_net.py", _THD_LB, _THD_OFF))),
    # the conv bias cut into CP slices across its q, k, v sections (identity at CP = 1): each rank's heads
    # get other channels' biases; only a case with a conv bias runs it
    Control("conv_bias_split", "headwise", ("mgt-prod", "fp32", "fla-triton", 1, 2),
            "first divergence: stage::conv (forward, rank 0 of 2", (
                _bias_split(SSM + "gated_delta_net/gdn.py", "get_parameter_local_cp", "self.pg_collection.cp"),
                _bias_split(SSM + "gated_delta_net.py", "get_parameter_local_cp_headwise", "cp_group_headwise"),
                _bias_split(SSM + "gated_delta_net/gdn.py", "get_parameter_local_cp", "cp_group_headwise"))),
    # the conv's halo (the tail of the previous rank's span) dropped: rank 1's first tokens start cold
    Control("conv_halo_dropped", "chunkwise", ("thd-short", "fp32", "fla-triton", 1, 2),
            "first divergence: stage::conv (forward, rank 1 of 2", tuple(
                Plant(SSM + file, f"{name} = chunkwise_cp_context\n",
                      f"{name} = None if chunkwise_cp_context is None else {REPLACE}(chunkwise_cp_context, "
                      "pre_num_conv_tokens=0)\n")
                for file, name in (("gated_delta_net.py", "            _conv_cp_context"),
                                   ("gated_delta_net/gdn.py", "            conv_cp_context")))),
    # the state carried in from earlier ranks dropped: rank 1's first sequence starts from zero
    Control("state_dropped", "chunkwise", ("thd-short", "fp32", "fla-triton", 1, 2),
            "first divergence: stage::core (forward, rank 1 of 2", tuple(
                Plant(SSM + file, "            cp_context=chunkwise_cp_context,\n",
                      f"            cp_context=None if chunkwise_cp_context is None else {REPLACE}("
                      "chunkwise_cp_context, pre_num_ranks=0),\n")
                for file in ("gated_delta_net.py", "gated_delta_net/gdn.py"))),
    # the zigzag -> contiguous conversion off by one chunk (5139086e: every chunk sent as its successor; the
    # dev branch: a rank's two zigzag chunks read from each other's slots): contiguous spans get other tokens
    Control("conversion_off_by_one", "chunkwise", ("thd-short", "fp32", "fla-triton", 1, 2),
            "first divergence: stage::conv (forward, rank 0 of 2", (
                Plant("megatron/core/context_parallel_layout.py", "    offset = pos_in_seq - chunk * chunk_lens\n",
                      "    offset = pos_in_seq - chunk * chunk_lens\n    chunk = (chunk + 1) % chunk_divisor\n"),
                # the dev branch converts the layer's input, before the norm
                Plant("megatron/core/context_parallel_layout/routes.py", _ZIGZAG_SLOTS.format(a="", b=" + chunk_len"),
                      _ZIGZAG_SLOTS.format(a=" + chunk_len", b=""),
                      "first divergence: stage::x_norm (forward, rank 0 of 2"))),
)


def applicable(control: Control, checkout: Path) -> Plant | None:
    """The plant of `control` whose text the checkout holds exactly once, if any."""
    for plant in control.plants:
        path = checkout / plant.file
        if path.is_file() and path.read_text().count(plant.right) == 1:
            return plant
    return None


def planted_copy(root: Path, checkout: Path, plant: Plant) -> Path:
    """The checkout's `megatron` package copied under `root` with `plant` applied; `root`."""
    shutil.copytree(checkout / "megatron", root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    path = root / plant.file
    path.write_text(path.read_text().replace(plant.right, plant.wrong))
    return root
