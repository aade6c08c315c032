"""make_case rebuilds `gdn-verify probe dump`'s inputs bit for bit (docs/DESIGN.md §8)."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from gdn_verify import case_options, cases, dump, images, rng, safetensors_file


@pytest.mark.parametrize("case", ["thd-gva", "thd-short", "thd-odd", "sbhd"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp64"])
def test_make_case_writes_the_same_inputs_file_as_probe_dump(cpp_image, case, dtype):
    c = cases.make_case(case, 0, dtype)
    mine = safetensors_file.safetensors_bytes(images.inputs_tensors(c), images.inputs_metadata(c, "cpp"))
    assert mine == (cpp_image(case, 0, dtype) / "inputs.safetensors").read_bytes()


def test_make_case_follows_the_seed_bit_for_bit(cpp_image):
    c = cases.make_case("thd-short", 7, "bf16")
    mine = safetensors_file.safetensors_bytes(images.inputs_tensors(c), images.inputs_metadata(c, "cpp"))
    assert mine == (cpp_image("thd-short", 7, "bf16") / "inputs.safetensors").read_bytes()
    assert mine != (cpp_image("thd-short", 0, "bf16") / "inputs.safetensors").read_bytes()


def test_det_log_is_the_natural_logarithm():
    for x in (1e-300, 0.25, 0.7, 1.0, 2.0, 15.999, 1e300):
        assert abs(rng.det_log(x) - math.log(x)) <= 4e-16 * abs(math.log(x)) + 1e-300


def test_normal_draws_have_unit_variance():
    draws = rng.Rng(0, "variance").normals(20000)
    assert abs(draws.mean()) < 0.03 and abs(draws.var() - 1.0) < 0.05


def test_unknown_case_and_dtype_name_the_choices():
    with pytest.raises(ValueError, match="unknown case 'thd-long': use thd-gva, thd-short, thd-odd, sbhd"):
        cases.make_case("thd-long")
    with pytest.raises(ValueError, match="unknown dtype 'fp16': use fp64, fp32, bf16"):
        cases.make_case("thd-short", 0, "fp16")


# Geometries beyond the probe cases: a sequence spanning four ranks, SBHD with a batch, an empty sequence, a
# conv bias, every gate regime (extreme reshapes parameters and hidden rows), another seed.
GEOMETRIES = [
    ["--lengths", "40,200,16", "--num-key-heads", "4", "--num-value-heads", "8"],
    ["--format", "sbhd", "--seq-len", "24", "--batch", "2", "--hidden", "32"],
    ["--lengths", "9,0,7", "--conv-bias", "--conv-width", "3", "--gates", "strong"],
    ["--lengths", "12,7", "--gates", "extreme", "--key-head-dim", "8", "--value-head-dim", "4"],
    ["--format", "sbhd", "--seq-len", "10", "--batch", "3", "--gates", "extreme", "--conv-bias"],
    ["--lengths", "5", "--gates", "weak", "--seed", "3"],
]


def geometry_case(argv: list[str], dtype: str) -> cases.Case:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", default=None)
    case_options.add_geometry_options(parser)
    args = parser.parse_args(argv)
    return cases.make_case_from_geometry(case_options.case_spec_from_args(args), case_options.seed_from_args(args),
                                        dtype)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[" ".join(g) for g in GEOMETRIES])
def test_geometry_options_make_the_same_inputs_file_as_probe_dump(gdnv, tmp_path, geometry, dtype):
    r = gdnv("probe", "dump", "--mode", "cp1", "--image", "cpp", "--out", tmp_path, "--dtype", dtype, *geometry)
    assert r.returncode == 0, r.stderr
    c = geometry_case(geometry, dtype)
    mine = safetensors_file.safetensors_bytes(images.inputs_tensors(c), images.inputs_metadata(c, "cpp"))
    assert mine == (tmp_path / "inputs.safetensors").read_bytes()
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["case"] == c.spec.name and meta["geometry"] == images.geometry_json(c)


def test_a_geometry_names_its_case_by_the_options_that_rebuild_it():
    c = geometry_case(["--lengths", "40,200,16", "--conv-bias", "--gates", "weak"], "fp32")
    assert c.spec.name == ("--format thd --lengths 40,200,16 --hidden 64 --num-key-heads 2 --num-value-heads 4 "
                           "--key-head-dim 16 --value-head-dim 16 --conv-width 4 --conv-bias --gates weak")
    assert c.cu_seqlens == [0, 40, 240, 256] and c.geometry.conv_bias and cases.names.CONV_BIAS in c.params


def test_a_probe_case_and_its_geometry_options_are_the_same_inputs():
    thd_gva = ["--lengths", "128,64,32", "--num-key-heads", "4", "--num-value-heads", "8"]
    a, b = cases.make_case("thd-gva", 0, "bf16"), geometry_case(thd_gva, "bf16")
    assert torch.equal(a.hidden_states, b.hidden_states) and a.params.keys() == b.params.keys()
    assert all(torch.equal(a.params[n], b.params[n]) for n in a.params)
    assert a.spec.name != b.spec.name  # each image keeps the name it was made with


BAD_GEOMETRY = [
    (["--case", "sbhd", "--hidden", "32"], "--case sbhd and geometry options given: a probe case fixes the geometry"),
    (["--num-key-heads", "3"], "linear_num_value_heads = 4 is not a multiple of linear_num_key_heads = 3"),
    (["--hidden", "0"], "layer config: hidden_size = 0 must be a positive integer"),
    (["--format", "sbhd", "--seq-len", "0"], "--seq-len 0 --batch 1: SBHD needs at least one token"),
    (["--lengths", "8,-1"], "--lengths 8,-1: a sequence length is negative"),
    (["--lengths", "0,0"], "--lengths 0,0 holds no token"),
    (["--lengths", "8,x"], "--lengths: 'x' is not an integer; give a comma-separated list like 256,128"),
    (["--gates", "mild"], "unknown gate regime 'mild': use default, weak, strong or extreme"),
    (["--format", "bshd"], "'bshd'"),
]


@pytest.mark.parametrize("argv,message", BAD_GEOMETRY, ids=[" ".join(b[0]) for b in BAD_GEOMETRY])
def test_a_bad_geometry_is_one_error_line_exit_3_in_both_commands(gdnv, capsys, tmp_path, argv, message):
    cpp = gdnv("probe", "dump", "--mode", "cp1", "--image", "x", "--out", tmp_path / "cpp", *argv)
    assert cpp.returncode == 3 and cpp.stderr.count("\n") == 1 and message in cpp.stderr, cpp.stderr
    assert dump.main(["--adapter", "fla", "--out", str(tmp_path / "py"), *argv]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "cpp").exists() and not (tmp_path / "py").exists()


def test_the_dump_module_judges_a_geometry_with_conv_bias(python_dump, gdnv, tmp_path):
    geometry = ["--lengths", "12,5", "--hidden", "32", "--key-head-dim", "8", "--value-head-dim", "8", "--conv-bias"]
    r = python_dump("--adapter", "fla", "--core", "torch", "--image", "x", "--out", tmp_path / "fla", *geometry)
    assert r.returncode == 0, r.stderr
    c = gdnv("probe", "dump", "--mode", "cp1", "--image", "x", "--out", tmp_path / "cpp", *geometry)
    assert c.returncode == 0, c.stderr
    inputs = [(tmp_path / image / "inputs.safetensors").read_bytes() for image in ("fla", "cpp")]
    assert inputs[0] == inputs[1]
    judged = gdnv("probe", "oracle", "--dir", tmp_path / "fla")
    assert judged.returncode == 0 and "grad::conv1d.bias: pass" in judged.stdout, judged.stdout[-2000:]
