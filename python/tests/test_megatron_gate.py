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
from gdn_verify import megatron_controls, noise  # noqa: E402
from gdn_verify import megatron_gate as megatron_gate_module  # noqa: E402
from gdn_verify.gatekit import Step  # noqa: E402
from gdn_verify.megatron_gate import Case  # noqa: E402
from gdn_verify.world import RankFailed  # noqa: E402

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "megatron-lm"
# The bug classes each Megatron shape runs: 0.19.2 has the all-to-all (headwise) CP only.
HEADWISE = ["head_perm_back", "thd_zigzag_off_by_one", "conv_bias_split"]
EVERY = HEADWISE + ["conv_halo_dropped", "state_dropped", "conversion_off_by_one"]


def test_every_headwise_control_is_caught_on_the_installed_megatron(megatron_gate):
    step = Step("controls")
    megatron_gate_module.run_controls(megatron_gate, megatron_gate_module.checkout_of(None), step)
    assert step.cases == 3 and not step.failures, step.failures
    controls = {c.name: c for c in megatron_controls.CONTROLS}
    for name, note in zip(HEADWISE, step.notes):
        assert note.startswith(f"{name} (") and f"caught: {controls[name].first}" in note, note


def test_the_oracle_step_holds_fp32_cp1_to_megatrons_own_spread(megatron_gate, monkeypatch):
    """Unmodified Megatron meets min(class gate, 20 x its spread); at 0.01 x (no floor) the same images fail,
    with the command that rebuilds image and twin: the twin is dumped, compared and judged."""
    case = [Case("thd-gva", "fp32", "fla-triton", own_spread=True)]
    assert case[0] in megatron_gate_module.ORACLE
    step = Step("oracle")
    megatron_gate_module.run_cases(megatron_gate, case, "cp1", "oracle", step)
    assert step.cases == 2 and not step.failures, step.failures
    monkeypatch.setattr(noise, "M", 0.01)
    monkeypatch.setattr(noise, "FLOOR", 0.0)
    tight = Step("oracle at 0.01 x the spread")
    megatron_gate_module.run_cases(megatron_gate, case, "cp1", "oracle", tight)
    assert tight.cases == 2 and len(tight.failures) == 1, tight.failures
    assert tight.failures[0].startswith("thd-gva-fp32-fla-triton-W1 own spread: ") and " > 0.01 x its own spread " in \
        tight.failures[0] and "python -m gdn_verify.dump --adapter megatron --case thd-gva " in tight.failures[0], \
        tight.failures[0]


def rank_full_grads(rank, parts):
    """A bf16 parameter whose gradient is parts[r] on CP rank r, summed by the adapter (params.full_grads)."""
    import torch

    from gdn_verify.adapters.megatron import groups, params

    groups.initialize(tp=1, cp=rank.world)
    module = torch.nn.Linear(1, 2, bias=False).to(torch.bfloat16)
    module.weight.grad = torch.full((2, 1), parts[rank.rank], dtype=torch.bfloat16)
    return params.full_grads(module)["weight"]


def test_megatrons_rank_partials_are_summed_in_fp32_not_in_the_layers_dtype(megatron_gate):
    """bf16 partials 1 and 2^-9 sum to 1 + 2^-9 in fp32; a bf16 sum would round it back to 1 (ties to even)."""
    import torch

    for total in megatron_gate.world(2).run(rank_full_grads, (1.0, 2.0 ** -9)):
        assert total.dtype == torch.float32 and torch.equal(total, torch.full((2, 1), 1 + 2.0 ** -9)), total


def test_a_gradient_left_empty_on_a_rank_is_one_line_naming_the_parameter_and_the_rank(megatron_gate, tmp_path):
    """conv1d.bias's CP-local slice cut from autograd on CP rank 1, in a copy of the installed Megatron: the dump
    ends in one line naming the parameter and the rank, exit 2 (a gradient on the oracle's side only), nothing
    written."""
    right = "                self.conv1d.bias,\n"
    wrong = "                self.conv1d.bias if self.pg_collection.cp.rank() == 0 else self.conv1d.bias.detach(),\n"
    plant = megatron_controls.Plant("megatron/core/ssm/gated_delta_net/gdn.py", right, wrong)
    checkout = megatron_gate_module.checkout_of(None)
    assert (checkout / plant.file).read_text().count(right) == 1
    root = megatron_controls.planted_copy(tmp_path / "planted", checkout, plant)
    with pytest.raises(RankFailed) as failed:
        megatron_gate.dump(Case("mgt-prod", "fp32", "fla-triton", world=2), "headwise", tmp_path / "image", str(root))
    assert str(failed.value) == ("rank 1 of 2: rank_dump: GradientNotReached: grad of conv1d.bias is None on CP rank 1 "
                                 "of 2 (not reached by autograd on this rank)")
    assert failed.value.exit_code == 2 and not (tmp_path / "image").exists()


def test_the_matrix_runs_production_head_dims_a_conv_bias_and_a_sequence_through_three_or_more_spans():
    """mgt-prod in every step and in --quick: dk = dv = 128, a conv bias (conv_bias_split's case), and at
    chunkwise W = 4 a sequence computed on at least three ranks' contiguous spans."""
    spec = megatron_gate_module.case_spec("mgt-prod")
    g = spec.geometry
    assert (g.dk, g.dv, g.conv_bias) == (128, 128, True)
    span = sum(spec.lengths) // 4
    starts = [sum(spec.lengths[:i]) for i in range(len(spec.lengths))]
    assert max(len({t // span for t in range(b, b + n)}) for b, n in zip(starts, spec.lengths)) >= 3
    for cases in (megatron_gate_module.ORACLE, megatron_gate_module.CP, megatron_gate_module.QUICK_CP):
        assert any(c.case == "mgt-prod" for c in cases)
    assert {(c.dtype, c.world) for c in megatron_gate_module.CHUNKWISE if c.case == "mgt-prod"} == {("fp32", 4),
                                                                                                   ("bf16", 2)}
    bias = next(c for c in megatron_controls.CONTROLS if c.name == "conv_bias_split")
    assert megatron_gate_module.case_spec(bias.case[0]).geometry.conv_bias


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
