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
# one image per case holding cp1 and every CP mode at W = 2, each judged by both readers
images = {"thd-short": (Case("thd-short", "fp32", "fla-triton", world=2), ("headwise", "chunkwise")),
          "sbhd": (Case("sbhd", "fp32", "fla-triton", world=2), ("chunkwise",))}
megatron_controls.CONTROLS = tuple(c for c in megatron_controls.CONTROLS if c.name in controls)
verdicts, modes = {}, {}
with tempfile.TemporaryDirectory() as scratch:
    gate = megatron_gate.Gate(binary, tree, Path(scratch))
    try:
        for name, (case, cp_modes) in images.items():
            image = Path(scratch) / name
            for mode in ("cp1", *cp_modes):
                gate.dump(case, mode, image)
            modes[name] = sorted(json.loads((image / "meta.json").read_text())["modes"])
            for reader in ("oracle", "cross-mode"):
                v = gate.judge(reader, image)
                verdicts[f"{name} {reader}"] = None if v.passed else v.line
        step = Step("controls")
        megatron_gate.run_controls(gate, Path(tree), step)
    finally:
        gate.close()
print(json.dumps({"verdicts": verdicts, "modes": modes, "controls": {"failures": step.failures, "notes": step.notes}}))
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
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["modes"] == {"thd-short": ["chunkwise", "cp1", "headwise"], "sbhd": ["chunkwise", "cp1"]}
    assert result["verdicts"] == {f"{case} {reader}": None for case in ("thd-short", "sbhd")
                                  for reader in ("oracle", "cross-mode")}, result["verdicts"]
    assert not result["controls"]["failures"], result["controls"]["failures"]
    firsts = {c.name: c.first for c in megatron_controls.CONTROLS}
    assert [n.split(" ")[0] for n in result["controls"]["notes"]] == controls
    for note in result["controls"]["notes"]:
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


REFUSE = """
import contextlib, io, json, sys
from pathlib import Path
from gdn_verify.adapters import megatron
megatron.import_from(sys.argv[1])
from gdn_verify import dump
answers = []
for i, args in enumerate(json.loads(sys.argv[2])):
    out, err = Path(sys.argv[3]) / str(i), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = dump.main(["--adapter", "megatron", "--out", str(out), *args])
    answers.append({"code": code, "stderr": err.getvalue(), "written": out.exists()})
print(json.dumps(answers))
"""


def test_every_rule_is_refused_in_one_line_before_any_rank_starts(tmp_path):
    """Each of RULES in one process (this process may hold 0.19.2): exit 3, one line naming the rule, nothing
    written."""
    r = python("-c", REFUSE, str(tree("5139086e")), json.dumps([args for args, _ in RULES]), str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    for (args, message), answer in zip(RULES, json.loads(r.stdout.strip().splitlines()[-1]), strict=True):
        lines = answer["stderr"].strip().splitlines()
        assert answer["code"] == 3 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), (args, answer)
        assert not answer["written"], args
