"""gdn_verify.layouts' row lists against `gdn-verify layout` (docs/DESIGN.md §2)."""

from __future__ import annotations

import json

import pytest

from gdn_verify.cases import make_case
from gdn_verify.layouts import contiguous_rows, zigzag_rows


def layout_rows(gdnv, case, world: int, rank: int) -> list[int]:
    where = (["--cu-seqlens", ",".join(map(str, case.cu_seqlens))] if case.cu_seqlens
             else ["--seq-len", str(case.spec.seq_len)])
    r = gdnv("layout", "--layout", "zigzag", "--cp", world, "--rank", rank, *where)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["indices"]


@pytest.mark.parametrize("case_name,world", [("thd-gva", 1), ("thd-gva", 2), ("thd-gva", 8), ("sbhd", 4)])
def test_zigzag_rows_equal_gdn_verify_layout(gdnv, case_name, world):
    case = make_case(case_name, 0, "fp32")
    for rank in range(world):
        assert zigzag_rows(case, world, rank) == layout_rows(gdnv, case, world, rank)


def test_lengths_not_divisible_by_2w_are_refused():
    with pytest.raises(ValueError, match="not divisible by 2W = 4"):
        zigzag_rows(make_case("thd-odd", 0, "fp32"), 2, 0)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_contiguous_rows_equal_gdn_verify_layout(gdnv, world):
    case = make_case("thd-gva", 0, "fp32")
    assert case.cu_seqlens is not None
    for rank in range(world):
        r = gdnv("layout", "--layout", "contiguous", "--cp", world, "--rank", rank, "--cu-seqlens",
                 ",".join(map(str, case.cu_seqlens)))
        assert r.returncode == 0, r.stderr
        assert list(contiguous_rows(case.cu_seqlens[-1], world, rank)) == json.loads(r.stdout)["indices"]


def test_a_total_not_divisible_by_w_has_no_contiguous_layout():
    with pytest.raises(ValueError, match="224 tokens are not divisible by W = 3"):
        contiguous_rows(224, 3, 0)
