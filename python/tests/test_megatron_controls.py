"""Negative controls inside Megatron-Core: a copy of the installed megatron package (in a temp dir) with a
bug planted in its GatedDeltaNet source, imported by fresh gloo ranks, must fail our verdict with a first
divergence naming the stage and the rank. The copy carries both bugs at once:

- `head_perm_back`: the inverse of the all-to-all's head permutation applied to the gated norm's output
  on its way back to the sequence layout (a no-op at CP = 1), which sends head blocks to the wrong
  columns of out_proj's input;
- `thd_zigzag_off_by_one`: the packed (THD) zigzag split off by one chunk in `_build_thd_cp_a2a_perm`, so
  the mixer sees every sequence's chunks rotated.

SBHD never reaches the THD code, so an SBHD run shows the first alone; in a THD run the second acts first
(the mixer's conv precedes the gated norm). Each is judged against the unmodified Megatron's cp1.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core.ssm.gated_delta_net")
import megatron  # noqa: E402

from gdn_verify.adapters import AdapterError  # noqa: E402
from gdn_verify.adapters import megatron as adapter  # noqa: E402
from gdn_verify.cases import make_case  # noqa: E402
from gdn_verify.world import World  # noqa: E402

COMMON = Path("megatron/core/ssm/gated_delta_net/common.py")
PLANTS = {
    "head_perm_back": (
        "        # CP all to all: HP to CP\n",
        "        # CP all to all: HP to CP\n"
        "        norm_out_hp = norm_out_hp.index_select(-1, torch.argsort(_build_head_perm_for_split_sections(\n"
        "            (norm_out_hp.shape[-1] // 2,) * 2, self.cp_size, norm_out_hp.device)))\n"),
    "thd_zigzag_off_by_one": (
        "    natural_chunk = pos_in_seq // half_i  # in [0, 2*cp)\n",
        "    natural_chunk = (pos_in_seq // half_i + 1) % (2 * cp_size)\n"),
}


def planted_copy(root: Path) -> Path:
    """The installed megatron package copied under root, both bugs planted; root (the path to import from)."""
    shutil.copytree(Path(megatron.__path__[0]), root / "megatron", ignore=shutil.ignore_patterns("__pycache__"))
    source = (root / COMMON).read_text()
    for name, (right, wrong) in PLANTS.items():
        assert source.count(right) == 1, f"{name}: the planted line is not in this Megatron's {COMMON}"
        source = source.replace(right, wrong)
    (root / COMMON).write_text(source)
    return root


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A world of 2 ranks importing the planted copy, and the copy's root."""
    root = str(planted_copy(tmp_path_factory.mktemp("megatron-planted")))
    sys.path.insert(0, root)  # the ranks start with this path: they import the copy
    try:
        w = World(2, env=adapter.RANK_ENV, bad_input=(AdapterError,)).__enter__()
    finally:
        sys.path.remove(root)
    yield w, root
    w.close()


@pytest.fixture(scope="module")
def clean():
    with World(1, env=adapter.RANK_ENV, bad_input=(AdapterError,)) as w:
        yield w


@pytest.mark.parametrize("case_name,core,first", [
    ("sbhd", "torch-chunk", "first divergence: stage::gated_norm (forward, rank 0 of 2, rows 0..127)"),
    ("thd-gva", "fla-triton", "first divergence: stage::conv (forward, rank 0 of 2"),
])
def test_a_bug_planted_in_megatrons_cp_fails_naming_the_stage_and_rank(gdnv, planted, clean, tmp_path, case_name,
                                                                         core, first):
    world, root = planted
    case = make_case(case_name, 0, "fp32")
    adapter.dump_world(clean, tmp_path, case, "megatron", "megatron:cpu", "cp1", 1, core)
    adapter.dump_world(world, tmp_path, case, "megatron", "megatron:cpu", "headwise", 1, core, megatron_path=root)
    r = gdnv("probe", "cross-mode", "--dir", tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    assert first in r.stdout, r.stdout[-3000:]
