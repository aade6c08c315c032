"""The CPU shims Megatron-Core's GatedDeltaNet needs (gdn_verify/adapters/megatron/cpu_shims.py): each fixes a
failure shown here without it, and the installed megatron-core is the pinned one (never a silent downgrade).

One fresh interpreter (the shims are process-wide) tries each call without its shim, then installs the
shim and tries again; each test reads its shim's two outcomes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, torch
from gdn_verify.adapters.megatron import cpu_shims
out = {}

def attempt(name, call):
    try:
        out.setdefault(name, []).append(["ok", call()])
    except Exception as e:
        out.setdefault(name, []).append(["error", f"{type(e).__name__}: {e}"])

allocate = lambda: str(torch.empty(3, device=torch.cuda.current_device()).device)
attempt("current_device_is_cpu", allocate)
cpu_shims.current_device_is_cpu()
attempt("current_device_is_cpu", allocate)

from torch._dynamo.utils import counters
formula = lambda x: -x.exp() * torch.nn.functional.softplus(x + 1.0)
x = torch.linspace(-3, 3, 101)
def captured():
    before = sum(counters["stats"].values())
    assert torch.equal(torch.compile(lambda t: formula(t), backend="eager")(x), formula(x))
    return sum(counters["stats"].values()) - before
attempt("eager_jit_fuser", captured)
cpu_shims.eager_jit_fuser()
attempt("eager_jit_fuser", captured)

print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcomes() -> dict:
    """shim -> [[status, value] without it, [status, value] with it]."""
    if torch.cuda.is_available():
        pytest.skip("the shims are for machines without a GPU")
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_installed_megatron_core_is_the_version_run_pins():
    found = re.search(r"megatron-core==([0-9.]+)", (REPO / "run").read_text())
    assert found is not None
    pin = found.group(1)
    assert pin == "0.19.2"
    assert importlib.metadata.version("megatron-core") == pin


def test_current_device_allocation_fails_without_a_driver_and_lands_on_the_cpu_with_the_shim(outcomes):
    without, with_shim = outcomes["current_device_is_cpu"]
    assert without[0] == "error" and "Found no NVIDIA driver" in without[1]
    assert with_shim == ["ok", "cpu"]


def test_torch_compile_captures_without_the_shim_and_runs_the_ops_as_written_with_it(outcomes):
    without, with_shim = outcomes["eager_jit_fuser"]
    assert without[0] == "ok" and without[1] > 0  # TorchDynamo captured a graph
    assert with_shim == ["ok", 0]  # nothing captured; the values were equal to the eager formula either way
