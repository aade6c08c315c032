"""gdn_verify.noise: the nudged twin of a case, the spread of two runs, and the gate that spread sets
(known answers from constructed reports, as `probe oracle --json` writes them)."""

from __future__ import annotations

import pytest
import torch

from gdn_verify import cases, noise


@pytest.mark.parametrize("dtype,bits", [("fp32", torch.int32), ("bf16", torch.int16)])
def test_nudging_moves_every_nonzero_value_by_exactly_ulps_representable_steps_and_keeps_zeros(dtype, bits):
    storage = cases.DTYPES[dtype]
    t = cases.rounded(torch.tensor([1.0, -3.5, 0.0, 1e-3, -2.0**-20, 7.25]).double(), storage)
    moved = noise.nudged(t, storage, seed=5, name="x", ulps=2)
    steps = (moved.to(storage).view(bits).to(torch.int64) - t.to(storage).view(bits).to(torch.int64)).tolist()
    assert steps[2] == 0 and moved[2] == 0
    assert all(abs(s) == 2 for i, s in enumerate(steps) if i != 2) and {1, -1} <= {s // 2 for s in steps if s}
    assert torch.equal(moved, noise.nudged(t, storage, seed=5, name="x", ulps=2))  # same seed, same bits
    assert not torch.equal(moved, noise.nudged(t, storage, seed=6, name="x", ulps=2))


def test_a_perturbed_case_moves_inputs_and_every_parameter_and_nothing_else():
    case = cases.make_case_from_geometry(cases.case_spec("thd-short"), 0, "fp32")
    twin = noise.perturbed(case, 0)
    assert twin.cu_seqlens == case.cu_seqlens and twin.spec == case.spec
    for a, b in [(case.hidden_states, twin.hidden_states), (case.grad_output, twin.grad_output),
                 *((case.params[n], twin.params[n]) for n in case.params)]:
        assert a.shape == b.shape and not torch.equal(a, b)
        assert ((a - b).abs() <= 2 * torch.finfo(torch.float32).eps * a.abs()).all()


def report(*tensors: tuple[str, float, float]) -> dict:
    """`probe oracle --json`'s tensors: (name, rel_rms, error_ratio = rel_rms / class gate)."""
    return {"tensors": [{"name": n, "rel_rms": e, "error_ratio": r} for n, e, r in tensors]}


def test_every_tensor_within_m_times_its_spread_passes():
    r = report(("out", 5e-7, 0.05), ("grad::A_log", 5e-7, 5e-7 / 3e-4))
    assert noise.first_outside(r, {"out": 6e-7, "grad::A_log": 1e-6}) is None


def test_the_first_tensor_beyond_m_times_its_spread_is_named_with_its_numbers():
    r = report(("out", 5e-7, 0.05), ("grad::A_log", 3e-5, 3e-5 / 3e-4), ("grad::dt_bias", 4e-5, 0.1))
    line = noise.first_outside(r, {"out": 6e-7, "grad::A_log": 1e-6, "grad::dt_bias": 1e-6})
    assert line == ("grad::A_log: rel_rms 3.000e-05 > 20 x its own spread 1.000e-06 (2 ulps; class gate "
                    "3.000e-04)")
    assert noise.first_outside(report(("grad::A_log", 1.9e-5, 1.9e-5 / 3e-4)), {"grad::A_log": 1e-6}) is None


def test_the_class_gate_caps_the_spread_and_a_spread_of_zero_keeps_the_floor():
    wide = report(("out", 2e-5, 2.0))  # class gate 1e-5: a spread of 1e-4 does not loosen it
    assert (noise.first_outside(wide, {"out": 1e-4}) or "").startswith("out: rel_rms 2.000e-05")
    assert noise.first_outside(report(("out", 1e-7, 0.01)), {"out": 0.0}) is None  # under 4 delta_32
    assert noise.first_outside(report(("out", 2e-7, 0.02)), {"out": 0.0}) is not None


def test_the_spread_is_the_twins_rel_rms_against_the_run():
    run = {"out": torch.tensor([3.0, 4.0]), "zero": torch.zeros(2)}
    twin = {"out": torch.tensor([3.0, 4.5]), "zero": torch.ones(2)}
    s = noise.spreads(run, twin)
    assert s["out"] == pytest.approx((0.25 / 2) ** 0.5 / (25 / 2) ** 0.5) and s["zero"] == 0.0
