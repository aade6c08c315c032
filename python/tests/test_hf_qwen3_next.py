"""The real Hugging Face Qwen3-Next GatedDeltaNet on CPU, judged by `gdn-verify probe oracle`."""

from __future__ import annotations

import pytest
import torch

from gdn_verify import cases, images
from gdn_verify.adapters import hf_qwen3_next as hf
from gdn_verify.names import Geometry

# The case's parameters are loaded once per (case, dtype): make_case is pure Python.
_CASES: dict[tuple[str, str], cases.Case] = {}


def case_of(name: str, dtype: str = "fp32") -> cases.Case:
    if (name, dtype) not in _CASES:
        _CASES[name, dtype] = cases.make_case(name, 0, dtype)
    return _CASES[name, dtype]


def dump(case: cases.Case, out, core: str = "chunk") -> None:
    module = hf.build_module(case.geometry, case.torch_dtype)
    hf.load_megatron_params(module, case.params)
    r = hf.run(module, case, stages=True, core=core)
    images.write_image(out, case, "hf", "hf-qwen3-next:cpu", [images.RankDump("cp1", 0, 1, r.out, r.grad_hidden,
                                                                                r.grads, r.stages)])


@pytest.mark.parametrize("name", ["thd-gva", "thd-short", "sbhd"])
def test_hf_layer_passes_the_oracle_with_every_stage(gdnv, tmp_path, name):
    dump(case_of(name), tmp_path, core="recurrent")
    r = gdnv("probe", "oracle", "--dir", tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "29 tensors compared" in r.stdout  # out, grad_hidden, 7 gradients, 10 stages and their gradients


def test_hf_chunked_core_passes_the_oracle_on_the_weak_gate_case(gdnv, tmp_path):
    dump(case_of("thd-short"), tmp_path, core="chunk")
    r = gdnv("probe", "oracle", "--dir", tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]


def swapped_qk(rows: list[int], geometry: Geometry) -> list[int]:
    """in_proj_qkvz's rows with each key head's q and k groups swapped: a wrong conversion."""
    dk, width = geometry.dk, len(rows) // geometry.Hk
    out = []
    for head in range(geometry.Hk):
        group = rows[head * width:(head + 1) * width]
        out += group[dk:2 * dk] + group[:dk] + group[2 * dk:]
    return out


def test_swapped_q_and_k_groups_diverge_first_at_in_proj(gdnv, tmp_path, monkeypatch):
    correct = hf.qkvz_rows
    monkeypatch.setattr(hf, "qkvz_rows", lambda g: swapped_qk(correct(g), g))
    dump(case_of("thd-short"), tmp_path, core="recurrent")
    r = gdnv("probe", "oracle", "--dir", tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "first divergence: stage::in_proj (forward, rank 0 of 1, rows 0..15)" in r.stdout


@pytest.mark.parametrize("name", ["thd-gva", "sbhd"])
def test_mapping_round_trips_bit_for_bit(name):
    g = case_of(name).geometry
    gen = torch.Generator().manual_seed(0)
    params = {n: torch.randn(t.shape, generator=gen, dtype=torch.float64) for n, t in case_of(name).params.items()}
    params["in_proj.layer_norm_weight"] = 0.5 + 1.5 * torch.rand(g.hidden_size, generator=gen, dtype=torch.float64)
    back = hf.to_megatron(hf.from_megatron(params, g), g)
    assert back.keys() == params.keys()
    assert all(torch.equal(back[n], params[n]) for n in params)
    module = hf.build_module(g, torch.float64)
    state = hf.from_megatron(params, g)
    assert state.keys() == module.state_dict().keys()
    again = hf.from_megatron(hf.to_megatron(state, g), g)
    assert all(torch.equal(again[n], state[n]) for n in state)


def test_in_proj_groups_cover_every_megatron_row_once():
    g = Geometry(64, 4, 8, 16, 16)
    assert sorted(hf.qkvz_rows(g) + hf.ba_rows(g)) == list(range(g.in_proj_dim))


def test_gradients_map_without_the_norm_shift():
    g = Geometry(8, 1, 1, 2, 2)
    grads = {n: torch.ones(t.shape) for n, t in hf.build_module(g, torch.float32).state_dict().items()}
    assert torch.equal(hf.to_megatron(grads, g, gradients=True)["in_proj.layer_norm_weight"], torch.ones(8))
    assert torch.equal(hf.to_megatron(grads, g)["in_proj.layer_norm_weight"], torch.full((8,), 2.0))


def test_cpu_runs_the_pure_torch_path_even_with_kernels_installed():
    module = hf.build_module(Geometry(8, 1, 1, 2, 2), torch.float32)
    assert hf.path(module) == "torch"


def test_conv_bias_is_refused_naming_the_option():
    with pytest.raises(hf.AdapterError, match="conv_bias=true: Qwen3NextGatedDeltaNet's conv1d has no bias"):
        hf.build_module(Geometry(8, 1, 1, 2, 2, conv_bias=True), torch.float32)
