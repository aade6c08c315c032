"""python -m gdn_verify.megatron_gate: its negative controls inside a copy of Megatron-Core are caught with
a first divergence naming the stage and rank; its table, JUnit and bad input.

The controls copy the installed megatron package to a temp dir, plant gdn_verify.megatron_gate.PLANTS in
its GatedDeltaNet source (the inverse all-to-all head permutation on the way back; the THD zigzag split off
by one chunk), start gloo ranks that import the copy, and judge each headwise image against the
unmodified Megatron's cp1 with `gdn-verify probe cross-mode`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("megatron.core.ssm.gated_delta_net")
from gdn_verify import megatron_gate  # noqa: E402
from gdn_verify.megatron_gate import CONTROLS, Gate, Step  # noqa: E402


def test_every_planted_megatron_bug_fails_cross_mode_naming_stage_and_rank(gdnv_bin, tmp_path, capsys):
    gate = Gate(gdnv_bin, None, tmp_path)
    step = Step("controls")
    try:
        megatron_gate.run_controls(gate, step, megatron_gate.megatron_dir(None))
    finally:
        gate.close()
    out = capsys.readouterr().out
    assert step.cases == len(CONTROLS) == 2 and not step.failed, out
    for _, bug, first in CONTROLS:
        assert f"controls {bug} " in out and first in out


def test_planting_refuses_a_megatron_without_the_planted_line(tmp_path):
    (tmp_path / "src" / "core" / "ssm" / "gated_delta_net").mkdir(parents=True)
    (tmp_path / "src" / "core" / "ssm" / "gated_delta_net" / "common.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="head_perm_back: the planted line is not in this Megatron's"):
        megatron_gate.planted_copy(tmp_path / "copy", tmp_path / "src")


def test_table_and_junit_count_passes_failures_and_skips():
    steps = [Step("oracle", 2, seconds=1.5), Step("cp-vs-cp1", 3, ["a: first divergence: out\n  repro"], seconds=2.0),
             Step("chunkwise", 0, skip_reason="no linear_cp_mode")]
    table = megatron_gate.table(steps)
    assert "oracle" in table and "FAIL" in table and "skip" in table and "(no linear_cp_mode)" in table
    suite = ET.fromstring(megatron_gate.junit(steps, 3.5)).find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    failure, skipped = cases["cp-vs-cp1"].find("failure"), cases["chunkwise"].find("skipped")
    assert failure is not None and failure.text == "a: first divergence: out\n  repro"
    assert skipped is not None and skipped.get("message") == "no linear_cp_mode"
    assert cases["oracle"].find("failure") is None


@pytest.mark.parametrize("args,message", [
    (["--gdnv", "/nonexistent/gdn-verify"], "error: no gdn-verify binary at /nonexistent/gdn-verify"),
    (["--megatron", "/nonexistent"], "error: --megatron /nonexistent holds no megatron/core/ssm/gated_delta_net/"),
])
def test_bad_input_is_one_line_exit_3(gdnv_bin, capsys, args, message):
    assert megatron_gate.main(["--gdnv", str(gdnv_bin), *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
