"""The Megatron-LM trees our users' stacks carry (../shared/megatron-lm: commit 5139086e, the dev branch head),
judged as the 0.19.2 release is: cp1, headwise and chunkwise on THD and SBHD with every stage, each CP image
against the oracle and Megatron's own cp1; the chunkwise controls planted in copies of the tree caught at
their stage and computing rank; and every rule refused in one line before any rank starts.

Each tree runs in a subprocess (this process may hold 0.19.2), through the gate's own code: one world per size
and tree, reused across cases, on the small probe cases (docs/megatron.md). Skipped, naming why, where the
snapshots are absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")
from gdn_verify import megatron_controls  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "megatron-lm"

RUN = """
import json, sys, tempfile
from pathlib import Path
from gdn_verify import megatron_controls, megatron_gate
from gdn_verify.gatekit import Step
from gdn_verify.megatron_gate import Case
tree, binary, controls = sys.argv[1], sys.argv[2], sys.argv[3:]
cases = {"chunkwise": [Case("thd-short", "fp32", "fla-triton", world=2), Case("sbhd", "fp32", "fla-triton", world=2)],
         "headwise": [Case("thd-short", "fp32", "fla-triton", world=2)]}
megatron_controls.CONTROLS = tuple(c for c in megatron_controls.CONTROLS if c.name in controls)
with tempfile.TemporaryDirectory() as scratch:
    gate = megatron_gate.Gate(binary, tree, Path(scratch))
    steps = {}
    try:
        for mode, cs in cases.items():
            for reader in ("oracle", "cross-mode"):
                steps[f"{mode} {reader}"] = step = Step(f"{mode}-{reader}")
                megatron_gate.run_cases(gate, cs, mode, reader, step)
        steps["controls"] = step = Step("controls")
        megatron_gate.run_controls(gate, Path(tree), step)
    finally:
        gate.close()
print(json.dumps({n: {"cases": s.cases, "failures": s.failures, "notes": s.notes} for n, s in steps.items()}))
"""


def tree(name: str) -> Path:
    path = SHARED / name
    if not (path / "megatron").is_dir():
        pytest.skip(f"{path} is absent: the Megatron-LM snapshots live in shared/megatron-lm beside the repository")
    return path


def python(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("name,controls", [
    ("5139086e", ["conv_halo_dropped", "state_dropped", "conversion_off_by_one"]),
    ("dev-d48bd6be", []),
])
def test_every_mode_passes_with_stages_and_every_chunkwise_control_is_caught(gdnv_bin, name, controls):
    r = python("-c", RUN, str(tree(name)), str(gdnv_bin), *controls, timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    steps = json.loads(r.stdout.strip().splitlines()[-1])
    for step, s in steps.items():
        assert not s["failures"], f"{name} {step}: {s['failures']}"
    assert steps["chunkwise cross-mode"]["cases"] == 2 and steps["headwise oracle"]["cases"] == 1
    firsts = {c.name: c.first for c in megatron_controls.CONTROLS}
    assert [n.split(" ")[0] for n in steps["controls"]["notes"]] == controls
    for note in steps["controls"]["notes"]:
        assert f"caught: {firsts[note.split(' ')[0]]}" in note, note


RULES = [
    (["--mode", "chunkwise", "--world", "2", "--case", "sbhd", "--core", "torch-chunk"],
     "megatron: chunkwise-deterministic: chunkwise CP passes FLA's cp_context"),
    (["--mode", "chunkwise", "--world", "2", "--format", "sbhd", "--seq-len", "64", "--batch", "2"],
     "megatron: chunkwise-sbhd-batch: Megatron's chunkwise CP with SBHD input requires micro_batch_size == 1"),
    (["--mode", "chunkwise", "--world", "4", "--tp", "2", "--lengths", "64", "--num-key-heads", "1",
      "--num-value-heads", "2"],
     "megatron: Megatron's configuration check refuses --mode chunkwise at TP 2 x CP 2: "
     "num_attention_heads (1) must be a multiple of tensor_model_parallel_size (2)"),
    (["--mode", "headwise", "--world", "4", "--lengths", "64", "--num-key-heads", "2", "--num-value-heads", "4"],
     "megatron: Megatron's configuration check refuses --mode headwise at TP 1 x CP 4: "
     "self.linear_num_key_heads=2 must be a multiple of linear_head_parallel_size=4"),
]


@pytest.mark.parametrize("args,message", RULES, ids=[m.split(":")[1].strip() for _, m in RULES])
def test_a_rule_is_refused_in_one_line_before_any_rank_starts(tmp_path, args, message):
    out = tmp_path / "img"
    code = ("import sys; from gdn_verify.adapters import megatron; megatron.import_from(sys.argv[1]); "
            "from gdn_verify import dump; sys.exit(dump.main(sys.argv[2:]))")
    r = python("-c", code, str(tree("5139086e")), "--adapter", "megatron", "--out", str(out), *args)
    assert r.returncode == 3, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), r.stderr[-2000:]
    assert not out.exists()
