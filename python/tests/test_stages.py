"""StageRecorder: stage pieces become the one [rows, cols] block per rank the image holds."""

from __future__ import annotations

import pytest
import torch

from gdn_verify.stages import StageRecorder, l2_normalised


def test_pieces_merge_in_row_and_column_order_whatever_order_they_arrive():
    rec = StageRecorder()
    rec.record("in_proj", torch.full((1, 2), 3.0), [5], [0, 1])
    rec.record("in_proj", torch.full((2, 1), 2.0), [0, 1], [4])
    rec.record("in_proj", torch.full((2, 2), 1.0), [0, 1], [0, 1])
    rec.record("in_proj", torch.full((1, 1), 4.0), [5], [4])
    (stage,) = rec.stages()
    assert (stage.name, stage.rows, stage.cols) == ("stage::in_proj", [0, 1, 5], [0, 1, 4])
    assert torch.equal(stage.data, torch.tensor([[1.0, 1, 2], [1, 1, 2], [3, 3, 4]], dtype=torch.float64))


def test_gradient_reaching_a_recorded_tensor_is_its_stage_grad():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * 3
    rec = StageRecorder()
    rec.record("conv", y, [7, 8], [0, 1])
    (y * torch.tensor([[1.0, 0.0], [0.0, 2.0]])).sum().backward()
    stages = {s.name: s for s in rec.stages()}
    assert torch.equal(stages["stage_grad::conv"].data, torch.tensor([[1.0, 0], [0, 2]], dtype=torch.float64))
    assert torch.equal(x.grad, torch.tensor([[3.0, 0], [0, 6]]))  # the hook leaves the gradient as it was


def test_the_gradient_at_q_and_k_is_named_for_the_conv_section_it_is_taken_wrt():
    q = torch.tensor([[3.0, 4.0]], requires_grad=True)
    rec = StageRecorder()
    rec.record("q", q, [0], [0, 1], value=l2_normalised(q))
    (q * torch.tensor([[1.0, 2.0]])).sum().backward()
    stages = {s.name: s for s in rec.stages()}
    assert set(stages) == {"stage::q", "stage_grad::conv_q"}  # never stage_grad::q: stage::q is normalised
    assert torch.equal(stages["stage::q"].data, l2_normalised(q))
    assert torch.equal(stages["stage_grad::conv_q"].data, torch.tensor([[1.0, 2.0]], dtype=torch.float64))


def test_pieces_covering_different_columns_are_refused():
    rec = StageRecorder()
    rec.record("q", torch.zeros(1, 2), [0], [0, 1])
    rec.record("q", torch.zeros(1, 1), [1], [0])
    with pytest.raises(ValueError, match="pieces of different rows cover different columns"):
        rec.stages()


def test_l2_normalised_uses_the_cores_epsilon():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    expected = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64) / torch.sqrt(
        torch.tensor([[25.0 + 1e-6], [1e-6]], dtype=torch.float64))
    assert torch.equal(l2_normalised(x), expected)
