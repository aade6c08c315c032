"""The image writer reproduces `gdn-verify probe dump`'s files, and the C++ readers accept its images."""

from __future__ import annotations

import json

import pytest
import torch

from gdn_verify import cases, images, safetensors_file


def rewrite(cpp_dir, out_dir, case, run_id=None):
    """The C++ image's cp1 dump read back and written again by the Python writer (under `run_id`)."""
    image = images.read_image(cpp_dir)
    tensors, meta = image.ranks["cp1"][0]
    stages = images.stages_of(tensors, meta) if "summed_stages" in meta else None
    grads = {n[len("grad::"):]: t for n, t in tensors.items() if n.startswith("grad::")}
    dump = images.RankDump("cp1", 0, 1, tensors["out"], tensors["grad_hidden"], grads, stages)
    images.write_image(out_dir, case, "cpp", "cpu", [dump], run_id=run_id)


@pytest.mark.parametrize("extra", [(), ("--stages",)])
def test_written_rank_file_is_byte_identical_to_probe_dumps(cpp_image, tmp_path, extra):
    cpp = cpp_image("thd-short", 0, "fp32", *extra)
    # The same run id: the rank file carries the run that wrote it, a fresh one by default.
    run_id = json.loads((cpp / "meta.json").read_text())["modes"]["cp1"]["run"]
    rewrite(cpp, tmp_path, cases.make_case("thd-short", 0, "fp32"), run_id)
    for name in ("inputs.safetensors", "cp1.rank0.safetensors"):
        assert (tmp_path / name).read_bytes() == (cpp / name).read_bytes(), name


def test_probe_readers_accept_a_written_image(cpp_image, gdnv, tmp_path):
    cpp = cpp_image("thd-short", 0, "bf16", "--stages")
    rewrite(cpp, tmp_path, cases.make_case("thd-short", 0, "bf16"))
    oracle = gdnv("probe", "oracle", "--dir", tmp_path)
    assert oracle.returncode == 0, oracle.stdout + oracle.stderr
    assert "stage::conv" in oracle.stdout
    same = gdnv("probe", "compare", "--ref", cpp, "--cand", tmp_path, "--policy", "bitwise")
    assert same.returncode == 0, same.stdout + same.stderr


def test_image_round_trips(tmp_path):
    case = cases.make_case("thd-short", 0, "bf16")
    T, hidden = case.hidden_states.shape[0], case.geometry.hidden_size
    out = torch.linspace(-1, 1, T * hidden, dtype=torch.bfloat16).reshape(T, 1, hidden)
    grads = {n: torch.full(t.shape, 0.5, dtype=torch.float32) for n, t in case.params.items()}
    stage = images.Stage("stage::g", torch.arange(6.0).reshape(3, 2), [5, 0, 9], [7, 1], summed=True)
    dump = images.RankDump("cp1", 0, 1, out, -out, grads, [stage])
    images.write_image(tmp_path, case, "py", "test:cpu", [dump], extra_meta={"adapter": "test"})
    back = images.read_image(tmp_path)
    assert torch.equal(back.inputs["hidden_states"], case.hidden_states)
    assert back.inputs_metadata["case"] == "thd-short" and back.inputs_metadata["dtype"] == "BF16"
    tensors, meta = back.ranks["cp1"][0]
    assert torch.equal(tensors["out"], out) and torch.equal(tensors["grad_hidden"], -out)
    assert all(torch.equal(tensors["grad::" + n], g) for n, g in grads.items())
    (read,) = images.stages_of(tensors, meta)
    assert (read.name, read.rows, read.cols, read.summed) == ("stage::g", [5, 0, 9], [7, 1], True)
    assert torch.equal(read.data, stage.data.double())
    assert back.meta["adapter"] == "test" and back.meta["modes"]["cp1"]["stages"] is True


def test_another_image_in_the_same_directory_is_refused_and_nothing_changes(tmp_path):
    case = cases.make_case("thd-short", 0, "fp32")
    T, hidden = case.hidden_states.shape[0], case.geometry.hidden_size
    dump = images.RankDump("cp1", 0, 1, torch.zeros(T, 1, hidden), torch.zeros(T, 1, hidden), {})
    images.write_image(tmp_path, case, "py", "test:cpu", [dump])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other = cases.make_case("thd-short", 1, "fp32")
    with pytest.raises(images.ImageError, match="holds an image with seed 0, not 1: dump into a fresh --out"):
        images.write_image(tmp_path, other, "py", "test:cpu", [dump])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert json.loads((tmp_path / "meta.json").read_text())["seed"] == 0


def test_reading_a_directory_without_inputs_names_the_fix(tmp_path):
    with pytest.raises(images.ImageError, match="holds no inputs.safetensors: pass a directory written by"):
        images.read_image(tmp_path)


def multi_rank_image(directory, world=2):
    """A chunkwise dump of thd-short on `world` ranks as the bridge writes one (values not judged here)."""
    case = cases.make_case("thd-short", 0, "fp32")
    rows, hidden = case.hidden_states.shape[0] // world, case.geometry.hidden_size
    grads = {n: torch.full(t.shape, 0.5, dtype=torch.float32) for n, t in case.params.items()}
    dumps = [images.RankDump("chunkwise", r, world, torch.zeros(rows, 1, hidden), torch.zeros(rows, 1, hidden), grads)
             for r in range(world)]
    images.write_image(directory, case, "py", "test:cpu", dumps)
    return case, dumps


def test_every_rank_file_carries_the_run_id_meta_json_declares(tmp_path):
    multi_rank_image(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    run = meta["modes"]["chunkwise"]["run"]
    assert meta["modes"]["chunkwise"]["world"] == 2 and len(run) == 16
    for r in range(2):
        assert safetensors_file.read_safetensors(images.rank_path(tmp_path, "chunkwise", r))[1]["run"] == run
    assert len(images.read_image(tmp_path).ranks["chunkwise"]) == 2


def test_a_redump_replaces_every_rank_file_and_its_run(tmp_path):
    multi_rank_image(tmp_path, 4)
    first = json.loads((tmp_path / "meta.json").read_text())["modes"]["chunkwise"]["run"]
    multi_rank_image(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.glob("chunkwise.rank*")) == [
        "chunkwise.rank0.safetensors", "chunkwise.rank1.safetensors"]
    assert json.loads((tmp_path / "meta.json").read_text())["modes"]["chunkwise"]["run"] != first


def test_the_cpp_readers_refuse_a_python_image_with_a_rank_file_of_another_run(gdnv, tmp_path):
    multi_rank_image(tmp_path / "a")
    multi_rank_image(tmp_path / "b")
    (tmp_path / "a" / "chunkwise.rank1.safetensors").write_bytes(
        (tmp_path / "b" / "chunkwise.rank1.safetensors").read_bytes())
    with pytest.raises(images.ImageError, match="chunkwise.rank1.safetensors: written by run .* a file of another"):
        images.read_image(tmp_path / "a")
    oracle = gdnv("probe", "oracle", "--dir", tmp_path / "a")
    assert oracle.returncode == 2, oracle.stdout + oracle.stderr
    assert "chunkwise.rank1.safetensors:*: STRUCTURAL MISMATCH: written by run" in oracle.stdout


def test_a_write_cut_short_leaves_its_mode_undeclared(gdnv, tmp_path, monkeypatch):
    multi_rank_image(tmp_path)
    real = images.write_atomic

    def fail_on_rank1(path, data):
        if path.name == "chunkwise.rank1.safetensors":
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(images, "write_atomic", fail_on_rank1)
    with pytest.raises(OSError, match="disk full"):
        multi_rank_image(tmp_path)
    assert "chunkwise" not in json.loads((tmp_path / "meta.json").read_text())["modes"]
    oracle = gdnv("probe", "oracle", "--dir", tmp_path)
    assert oracle.returncode == 2, oracle.stdout + oracle.stderr
    assert "without a chunkwise entry in meta.json" in oracle.stdout


def test_reading_an_image_refuses_a_rank_file_meta_json_does_not_declare(tmp_path):
    multi_rank_image(tmp_path)
    orphan = tmp_path / "chunkwise.rank2.safetensors"
    orphan.write_bytes((tmp_path / "chunkwise.rank1.safetensors").read_bytes())
    with pytest.raises(images.ImageError, match="chunkwise.rank2.safetensors: not a rank file meta.json declares"):
        images.read_image(tmp_path)
    orphan.unlink()
    (tmp_path / "chunkwise.rank1.safetensors").unlink()
    with pytest.raises(images.ImageError, match="chunkwise.rank1.safetensors missing: meta.json declares chunkwise"):
        images.read_image(tmp_path)
