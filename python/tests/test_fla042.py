"""FLA 0.4.2, the release users pin (the first with `fla.ops.cp`), under the FLA gate in its own environment,
.venv-fla042 (torch 2.14.1, triton 3.8.0: FLA 0.4.2 does not import under the bridge's triton 3.9.0); `./run
test` makes it, `./run fla042` too (docs/fla.md, "FLA 0.4.2")."""

from __future__ import annotations

import os
import subprocess

from conftest import REPO


def test_the_quick_fla_gate_passes_on_fla_042(fla042_python, gdnv_bin):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([str(fla042_python), "-m", "gdn_verify.fla_gate", "--quick", "--dtypes", "fp32",
                        "--gdn-verify", str(gdnv_bin)], capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "    fla: 0.4.2 from " in r.stdout and "(triton 3.8.0, torch 2.14.1" in r.stdout, r.stdout
    assert "FLA KCP W=2 (fp32) ... ok" in r.stdout and r.stdout.rstrip().endswith("PASS"), r.stdout
