"""FLA 0.4.2, the release users pin (the first with `fla.ops.cp`), under the FLA gate in its own environment,
.venv-fla042 (torch 2.14.1, triton 3.8.0: FLA 0.4.2 does not import under the bridge's triton 3.9.0); `./run
test` makes it, `./run fla042` too (docs/fla.md, "FLA 0.4.2")."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import REPO


def test_the_quick_fla_gate_passes_on_fla_042(fla042_python, gdnv_bin):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([str(fla042_python), "-m", "gdn_verify.fla_gate", "--quick", "--dtypes", "fp32",
                        "--gdn-verify", str(gdnv_bin)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "    fla: 0.4.2 from " in r.stdout and "(triton 3.8.0, torch 2.14.1" in r.stdout, r.stdout
    for step in ("FLA layer cp1", "FLA KCP layer W=4", "FLA KCP steps W=4"):
        assert f"{step} (fp32) ... ok" in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("PASS"), r.stdout


def test_megatrons_chunkwise_runs_on_fla_042_and_names_it(fla042_python, gdnv_bin, tmp_path):
    """The pairing users run: Megatron-LM 5139086e's chunkwise (FLA's CP context handed to FLA 0.4.2's kernels)
    at W = 2 passes the oracle and its own cp1, and the image names FLA 0.4.2 as the kernels it ran."""
    tree = REPO.parent / "shared" / "megatron-lm" / "5139086e"
    if not tree.is_dir():
        pytest.skip(f"{tree} is absent: the Megatron-LM snapshot with linear_cp_mode")
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{REPO / 'python'}")
    for mode in (("--mode", "cp1"), ("--mode", "chunkwise", "--world", "2")):
        r = subprocess.run([str(fla042_python), "-m", "gdn_verify.dump", "--adapter", "megatron", "--case",
                            "thd-short", *mode, "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                           env=env)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    for probe in ("oracle", "cross-mode"):
        r = subprocess.run([str(gdnv_bin), "probe", probe, "--dir", str(tmp_path)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.rstrip().splitlines()[-2] == "PASS", r.stdout[-3000:]
        assert r.stdout.startswith(f"library: megatron.core 0.19.0 at {tree.resolve()}/megatron/core"), r.stdout[:300]
        assert "; kernels: fla 0.4.2 at " in r.stdout.splitlines()[0], r.stdout[:300]
