"""python -m gdn_verify.megatron_gate: its negative controls inside a copy of Megatron-Core are caught with
a first divergence naming the stage and rank; its bad input.

The controls copy the installed megatron package to a temp dir, plant gdn_verify.megatron_gate.PLANTS in
its GatedDeltaNet source (the inverse all-to-all head permutation on the way back; the THD zigzag split off
by one chunk), start gloo ranks that import the copy, and judge each headwise image against the
unmodified Megatron's cp1 with `gdn-verify probe cross-mode`. The table and JUnit both gates share are
tested in test_gatekit.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core.ssm.gated_delta_net")
from gdn_verify import cli, megatron_gate  # noqa: E402
from gdn_verify.gatekit import Step  # noqa: E402
from gdn_verify.megatron_gate import CONTROLS, Gate  # noqa: E402


def test_every_planted_megatron_bug_fails_cross_mode_naming_stage_and_rank(gdnv_bin, tmp_path):
    gate = Gate(str(gdnv_bin), None, tmp_path)
    step = Step("controls")
    try:
        megatron_gate.run_controls(gate, megatron_gate.megatron_dir(None), step)
    finally:
        gate.close()
    assert step.cases == len(CONTROLS) == 2 and not step.failures, step.failures
    assert len(step.notes) == 2, step.notes
    for (c, bug, first), note in zip(CONTROLS, step.notes):
        assert note.startswith(f"{bug} ({c.label}): caught: {first}"), note


def test_planting_refuses_a_megatron_without_the_planted_line(tmp_path):
    (tmp_path / "src" / "core" / "ssm" / "gated_delta_net").mkdir(parents=True)
    (tmp_path / "src" / "core" / "ssm" / "gated_delta_net" / "common.py").write_text("x = 1\n")
    with pytest.raises(cli.BadInput, match="head_perm_back: the planted line is not in this Megatron's"):
        megatron_gate.planted_copy(tmp_path / "copy", tmp_path / "src")


@pytest.mark.parametrize("args,message", [
    (["--gdn-verify", "/nonexistent/gdn-verify"],
     "error: --gdn-verify /nonexistent/gdn-verify: no gdn-verify binary there"),
    (["--megatron", "/nonexistent"], "error: --megatron /nonexistent holds no megatron/core/ssm/gated_delta_net/"),
])
def test_bad_input_is_one_line_exit_3(gdnv_bin, capsys, args, message):
    assert megatron_gate.main(["--gdn-verify", str(gdnv_bin), *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
