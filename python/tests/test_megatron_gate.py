"""python -m gdn_verify.megatron_gate: its controls, bugs planted in a copy of Megatron-Core, are caught with a
first divergence naming the stage and the computing rank; every bug class has a plant for every Megatron
shape it runs in; bad input.

The controls copy the Megatron under test to a temp dir, plant one bug of gdn_verify.megatron_controls in its
sources, start gloo ranks that import the copy, and judge each CP image against the unmodified Megatron's
cp1 with `gdn-verify probe cross-mode`. The installed 0.19.2 runs headwise only; the chunkwise controls run
on ../shared/megatron-lm/5139086e in test_megatron_shapes.py. The table and JUnit both gates share are
tested in test_gatekit.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("megatron.core.ssm.gated_delta_net")
from gdn_verify import megatron_controls  # noqa: E402
from gdn_verify import megatron_gate as megatron_gate_module  # noqa: E402
from gdn_verify.gatekit import Step  # noqa: E402

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "megatron-lm"
# The bug classes each Megatron shape runs: 0.19.2 has the all-to-all (headwise) CP only.
HEADWISE = ["head_perm_back", "thd_zigzag_off_by_one"]
EVERY = HEADWISE + ["conv_halo_dropped", "state_dropped", "conversion_off_by_one"]


def test_every_headwise_control_is_caught_on_the_installed_megatron(megatron_gate):
    step = Step("controls")
    megatron_gate_module.run_controls(megatron_gate, megatron_gate_module.checkout_of(None), step)
    assert step.cases == 2 and not step.failures, step.failures
    controls = {c.name: c for c in megatron_controls.CONTROLS}
    for name, note in zip(HEADWISE, step.notes):
        assert note.startswith(f"{name} (") and f"caught: {controls[name].first}" in note, note


@pytest.mark.parametrize("tree,classes", [("5139086e", EVERY), ("dev-d48bd6be", EVERY)])
def test_every_bug_class_has_a_plant_for_each_megatron_shape(tree, classes):
    if not (SHARED / tree).is_dir():
        pytest.skip(f"{SHARED / tree} is absent (the Megatron-LM snapshots of shared/megatron-lm)")
    planted = [c.name for c in megatron_controls.CONTROLS if megatron_controls.applicable(c, SHARED / tree)]
    assert planted == classes


def test_the_installed_megatron_has_a_plant_of_each_headwise_class():
    planted = [c.name for c in megatron_controls.CONTROLS
               if megatron_controls.applicable(c, megatron_gate_module.checkout_of(None))]
    assert planted == HEADWISE


def test_a_plant_applies_only_where_its_text_stands_once(tmp_path):
    gdn = tmp_path / "megatron" / "core" / "ssm" / "gated_delta_net.py"
    gdn.parent.mkdir(parents=True)
    state = next(c for c in megatron_controls.CONTROLS if c.name == "state_dropped")
    gdn.write_text("x = 1\n")
    assert megatron_controls.applicable(state, tmp_path) is None
    gdn.write_text(state.plants[0].right * 2)
    assert megatron_controls.applicable(state, tmp_path) is None
    gdn.write_text("y = 2\n" + state.plants[0].right)
    plant = megatron_controls.applicable(state, tmp_path)
    assert plant is state.plants[0]
    copy = megatron_controls.planted_copy(tmp_path / "copy", tmp_path, plant)
    assert (copy / plant.file).read_text() == "y = 2\n" + plant.wrong


@pytest.mark.parametrize("args,message", [
    (["--gdn-verify", "/nonexistent/gdn-verify"],
     "error: --gdn-verify /nonexistent/gdn-verify: no gdn-verify binary there"),
    (["--megatron", "/nonexistent"],
     "error: --megatron /nonexistent holds neither megatron/core/ssm/gated_delta_net.py nor megatron/core/ssm/"),
])
def test_bad_input_is_one_line_exit_3(gdnv_bin, capsys, args, message):
    assert megatron_gate_module.main(["--gdn-verify", str(gdnv_bin), *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
