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


def survey(gdnv_bin, *args: str) -> tuple[int, list[str]]:
    import io

    from gdn_verify import noise_survey

    out = io.StringIO()
    options = noise_survey.parser().parse_args(["--gdn-verify", str(gdnv_bin), *args])
    return noise_survey.run(options, out), out.getvalue().splitlines()


def test_the_survey_counts_an_unmodified_librarys_tensors_and_the_ones_outside(gdnv_bin, monkeypatch):
    """Hugging Face's torch layer on thd-short: every tensor within the bound (0 outside); at 0.01 x the spread
    with no floor the same seed is a false alarm, named, and the survey exits 1."""
    rc, lines = survey(gdnv_bin, "--adapter", "hf-qwen3-next", "--case", "thd-short", "--seeds", "3")
    assert rc == 0 and len(lines) == 2 and lines[0].startswith("seed 3: 29 tensors, largest error/spread "), lines
    bound = "min(class gate, max(20 x own spread, 1.38e-07))"
    assert lines[1].startswith(f"1 seeds, 29 tensors: 0 outside {bound}; "), lines
    monkeypatch.setattr(noise, "M", 0.01)
    monkeypatch.setattr(noise, "FLOOR", 0.0)
    rc, lines = survey(gdnv_bin, "--adapter", "hf-qwen3-next", "--case", "thd-short", "--seeds", "3")
    assert rc == 1 and "; OUTSIDE: " in lines[0] and " 1 outside " in lines[1], lines
    assert lines[2].startswith("  seed 3: ") and " > 0.01 x its own spread " in lines[2], lines


@pytest.mark.parametrize("args,message", [
    (["--seeds", "5-2"], "--seeds '5-2': give FIRST-LAST (e.g. 0-19) or one seed"),
    (["--seeds", "x"], "--seeds 'x': give FIRST-LAST (e.g. 0-19) or one seed"),
    (["--dtype", "fp64"], "--dtype fp64: the spread is measured in ulps of fp32 or bf16 storage"),
    (["--seed", "4"], "--seed 4: the survey runs every seed of --seeds FIRST-LAST; drop --seed"),
    (["--case", "nope"], "unknown --case 'nope': use "),
    (["--world", "2"], "--world: adapter hf-qwen3-next has no CPU context parallelism here"),
])
def test_the_survey_refuses_bad_input_in_one_line(gdnv_bin, capsys, args, message):
    from gdn_verify import noise_survey

    assert noise_survey.main(["--gdn-verify", str(gdnv_bin), "--adapter", "hf-qwen3-next", *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
