"""python -m gdn_verify.dump: one command from a library's module to a judged image; bad input exits 3."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdn_verify import dump, images


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
    (["--nudge", "0"], "--nudge 0 with --dtype fp32: give a positive number of ulps of an fp32 or bf16 case"),
    (["--nudge", "2", "--dtype", "fp64"], "--nudge 2 with --dtype fp64: give a positive number of ulps"),
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
    assert err.startswith("error: ")
    assert err.endswith("holds an image with seed 0, not 1: dump into a fresh --out directory")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def expect_one_error_line(capsys, argv, message):
    assert dump.main(argv) == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_full_width_seed_digits_are_refused(capsys, tmp_path):
    out = tmp_path / "img"
    expect_one_error_line(capsys, ["--adapter", "hf-qwen3-next", "--seed", "１２", "--out", str(out)],
                          "--seed '１２' is not an integer in [0, 2^64)")
    assert not out.exists()


@pytest.mark.parametrize("where", ["under-file", "loop", "too-long", "read-only"])
def test_an_out_that_cannot_be_written_is_one_error_line(capsys, tmp_path, where):
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    out = {"under-file": tmp_path / "file" / "img", "loop": tmp_path / "loop1", "too-long": tmp_path / ("n" * 300),
           "read-only": Path("/proc/gdnv-dump/img")}[where]
    expect_one_error_line(capsys, ["--adapter", "hf-qwen3-next", "--case", "thd-short", "--out", str(out)],
                          f"--out '{out}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "loop1", "loop2"]


@pytest.mark.parametrize("content", [b"[1, 2]\n", b'{"modes": []}\n', b'{"image": "\xff\xfe"}\n'],
                         ids=["list", "modes-list", "not-utf8"])
def test_a_bad_meta_json_is_one_error_line_and_kept(capsys, tmp_path, content):
    out = tmp_path / "img"
    out.mkdir()
    (out / "meta.json").write_bytes(content)
    expect_one_error_line(capsys, ["--adapter", "hf-qwen3-next", "--case", "thd-short", "--out", str(out)],
                          "meta.json: ")
    assert (out / "meta.json").read_bytes() == content and sorted(p.name for p in out.iterdir()) == ["meta.json"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible: --device cuda is valid here")
def test_device_cuda_without_a_gpu_is_one_error_line(capsys, tmp_path):
    out = tmp_path / "img"
    expect_one_error_line(capsys, ["--adapter", "hf-qwen3-next", "--device", "cuda", "--out", str(out)],
                          "--device cuda: torch sees 0 CUDA device(s)")
    assert not out.exists()


def test_a_full_disk_is_one_error_line(capsys, tmp_path, monkeypatch):
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(images, "write_atomic", full)
    out = tmp_path / "img"
    expect_one_error_line(capsys, ["--adapter", "hf-qwen3-next", "--case", "thd-short", "--no-stages",
                                   "--out", str(out)], "No space left on device")


def test_a_redump_with_another_core_is_refused_not_replaced(capsys, tmp_path):
    out = tmp_path / "img"
    common = ["--adapter", "hf-qwen3-next", "--case", "thd-short", "--no-stages", "--out", str(out)]
    assert dump.main(common + ["--core", "recurrent"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    expect_one_error_line(capsys, common + ["--core", "chunk"], 'holds an image with core "recurrent", not "chunk"')
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


SIGTERM_MID_WRITE = """
import os, signal, sys
from gdn_verify import dump, images
real = images.os.replace
def replace(src, dst):
    os.kill(os.getpid(), signal.SIGTERM)  # terminated while the temp file exists
    real(src, dst)
images.os.replace = replace
sys.exit(dump.main(sys.argv[1:]))
"""


def test_sigterm_during_the_write_leaves_no_temp_file(tmp_path):
    out = tmp_path / "img"
    env = dict(os.environ, PYTHONPATH=str(Path(dump.__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", SIGTERM_MID_WRITE, "--adapter", "hf-qwen3-next", "--case", "thd-short",
                        "--no-stages", "--out", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr[-2000:]
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
