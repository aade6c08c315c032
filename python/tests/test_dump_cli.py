"""python -m gdn_verify.dump: one command from a library's module to a judged image; bad input exits 3."""

from __future__ import annotations

import json

import pytest

from gdn_verify import dump


def test_dump_writes_an_image_probe_oracle_passes(python_dump, gdnv, tmp_path):
    out = tmp_path / "hf"
    r = python_dump("--adapter", "hf-qwen3-next", "--case", "thd-short", "--seed", "0", "--dtype", "fp32",
                    "--out", out)
    assert r.returncode == 0, r.stderr
    assert "hf-qwen3-next (torch path) on case thd-short" in r.stdout
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["adapter"], meta["path"], meta["backend"], meta["dtype"]) == ("hf-qwen3-next", "torch",
                                                                                "hf-qwen3-next:cpu", "F32")
    assert meta["notes"]["core"] == "chunk" and "one sequence per call" in meta["notes"]["thd"]
    assert meta["decay_class"] == "cumsum-decay"  # transformers' chunked core (docs/DESIGN.md §4)
    judged = gdnv("probe", "oracle", "--dir", out)
    assert judged.returncode == 0, judged.stdout[-2000:]


BAD = [
    (["--case", "thd-long"], "unknown --case 'thd-long': use thd-gva, thd-short, thd-odd, sbhd"),
    (["--dtype", "fp16"], "unknown --dtype 'fp16': use fp64, fp32, bf16"),
    (["--seed", "-1"], "--seed '-1' is not an integer in [0, 2^64)"),
    (["--adapter", "jax"], "unknown --adapter 'jax': use hf-qwen3-next, fla, megatron"),
    (["--device", "tpu9"], "--device 'tpu9' is not a torch device"),
    (["--core", "fused"], "unknown --core 'fused' for hf-qwen3-next: use chunk or recurrent"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[b[0][0] for b in BAD])
def test_bad_input_is_one_error_line_exit_3_nothing_written(capsys, tmp_path, extra, message):
    out = tmp_path / "img"
    args = {"--adapter": "hf-qwen3-next", "--case": "thd-short", "--out": str(out)}
    for flag, value in zip(extra[::2], extra[1::2]):
        args[flag] = value
    argv = [x for kv in args.items() for x in kv] + (extra if len(extra) % 2 else [])
    assert dump.main(argv) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not out.exists()


def test_out_that_is_a_file_is_refused(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert dump.main(["--adapter", "hf-qwen3-next", "--out", str(f)]) == 3
    assert capsys.readouterr().err.strip() == f"error: --out '{f}' is a file: give a directory"


def test_another_image_into_the_same_directory_is_refused_before_running(capsys, tmp_path):
    out = tmp_path / "img"
    common = ["--adapter", "hf-qwen3-next", "--case", "thd-short", "--no-stages", "--out", str(out)]
    assert dump.main(common) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert dump.main(common + ["--seed", "1"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and err.endswith("holds an image with seed 0, not 1: dump into a fresh --out directory")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
