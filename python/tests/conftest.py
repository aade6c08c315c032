"""Shared fixtures: the gdn-verify binary the Python images are judged by, and a way to run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# ./run fla042's environment (FLA 0.4.2 with its own torch and triton), where ./run puts it.
FLA042_VENV = REPO / os.environ.get("GDNV_FLA042_VENV", ".venv-fla042")


@pytest.fixture(scope="session")
def gdnv_bin() -> Path:
    """The built gdn-verify: $GDNV_BIN, else build/gdn-verify under the repository root."""
    path = Path(os.environ.get("GDNV_BIN", REPO / "build" / "gdn-verify"))
    if not path.is_file():
        pytest.fail(f"no gdn-verify binary at {path}: build it (cmake --build build --target gdn-verify) "
                    "or point GDNV_BIN at one")
    return path


@pytest.fixture(scope="session")
def fla042_python() -> Path:
    """.venv-fla042's Python (FLA 0.4.2, docs/fla.md); the test skips, naming how to make it, without one."""
    python = FLA042_VENV / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {FLA042_VENV}: make it with ./run fla042 (FLA 0.4.2 and its torch and triton, 2-6 GB)")
    return python


@pytest.fixture(scope="session")
def gdnv(gdnv_bin):
    """gdnv(*args) runs the binary and returns the CompletedProcess (text stdout, stderr)."""

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(gdnv_bin), *map(str, args)], capture_output=True, text=True, timeout=300)

    return run


@pytest.fixture(scope="session")
def cpp_image(gdnv, tmp_path_factory):
    """cpp_image(case, seed, dtype, *extra) is a directory holding the C++ cp1 dump of that case (cached)."""
    made: dict[tuple, Path] = {}

    def dump(case: str, seed: int = 0, dtype: str = "fp32", *extra: str) -> Path:
        key = (case, seed, dtype, extra)
        if key not in made:
            out = tmp_path_factory.mktemp(f"cpp-{case}-{dtype}")
            r = gdnv("probe", "dump", "--mode", "cp1", "--image", "cpp", "--out", out, "--case", case,
                     "--seed", seed, "--dtype", dtype, *extra)
            assert r.returncode == 0, r.stderr
            made[key] = out
        return made[key]

    return dump


@pytest.fixture(scope="session")
def python_dump():
    """python_dump(*args) runs `python -m gdn_verify.dump` with this interpreter."""

    def run(*args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.run([sys.executable, "-m", "gdn_verify.dump", *map(str, args)], capture_output=True,
                              text=True, timeout=300, env=env)

    return run


@pytest.fixture(scope="session")
def megatron_gate(gdnv_bin, tmp_path_factory):
    """One megatron_gate.Gate on the installed Megatron for the session: its worlds (a rank's start is most of
    a small case's time) and its cp1 images are shared by the Megatron layer and gate tests."""
    pytest.importorskip("megatron.core.ssm.gated_delta_net")
    from gdn_verify import megatron_gate as gate_module

    gate = gate_module.Gate(str(gdnv_bin), None, tmp_path_factory.mktemp("megatron_gate"))
    yield gate
    gate.close()
