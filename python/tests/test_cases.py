"""make_case rebuilds `gdn-verify probe dump`'s inputs bit for bit (docs/DESIGN.md §8)."""

from __future__ import annotations

import math

import pytest

from gdn_verify import cases, images


@pytest.mark.parametrize("case", ["thd-gva", "thd-short", "thd-odd", "sbhd"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp64"])
def test_make_case_writes_the_same_inputs_file_as_probe_dump(cpp_image, case, dtype):
    c = cases.make_case(case, 0, dtype)
    mine = images.safetensors_bytes(images.inputs_tensors(c), images.inputs_metadata(c, "cpp"))
    assert mine == (cpp_image(case, 0, dtype) / "inputs.safetensors").read_bytes()


def test_make_case_follows_the_seed_bit_for_bit(cpp_image):
    c = cases.make_case("thd-short", 7, "bf16")
    mine = images.safetensors_bytes(images.inputs_tensors(c), images.inputs_metadata(c, "cpp"))
    assert mine == (cpp_image("thd-short", 7, "bf16") / "inputs.safetensors").read_bytes()
    assert mine != (cpp_image("thd-short", 0, "bf16") / "inputs.safetensors").read_bytes()


def test_det_log_is_the_natural_logarithm():
    for x in (1e-300, 0.25, 0.7, 1.0, 2.0, 15.999, 1e300):
        assert abs(cases.det_log(x) - math.log(x)) <= 4e-16 * abs(math.log(x)) + 1e-300


def test_normal_draws_have_unit_variance():
    rng = cases.Rng(0, "variance")
    draws = [rng.normal(i) for i in range(20000)]
    mean = sum(draws) / len(draws)
    var = sum((d - mean) ** 2 for d in draws) / len(draws)
    assert abs(mean) < 0.03 and abs(var - 1.0) < 0.05


def test_unknown_case_and_dtype_name_the_choices():
    with pytest.raises(ValueError, match="unknown case 'thd-long': use thd-gva, thd-short, thd-odd, sbhd"):
        cases.make_case("thd-long")
    with pytest.raises(ValueError, match="unknown dtype 'fp16': use fp64, fp32, bf16"):
        cases.make_case("thd-short", 0, "fp16")
