"""The fla adapter on flash-linear-attention's real GatedDeltaNet layer, on CPU.

FLA's layer forward is Triton throughout, so on a CPU the adapter runs the layer's torch submodules with
FLA's pure-torch references (gdn_verify/adapters/fla/); its image must pass `probe oracle` with every
stage, and a wrong mapping must fail it at the right stage.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from gdn_verify import names
from gdn_verify.cases import make_case
from gdn_verify.images import RankDump, write_image

fla_layers = pytest.importorskip("fla.layers.gated_deltanet")
from gdn_verify.adapters import fla  # noqa: E402

FLA = fla.FlaAdapter()


def image(tmp_path, case_name: str, dtype: str, module=None):
    """The fla adapter's cp1 image of the case, with stages."""
    case = make_case(case_name, 0, dtype)
    m = module or FLA.build_module(case.geometry, case.torch_dtype)
    FLA.load_megatron_params(m, case.params)
    r = FLA.run(m, case, core="torch")
    write_image(tmp_path, case, "fla", "cpu", [RankDump("cp1", 0, 1, r.out, r.grad_hidden, r.grads, r.stages)],
                extra_meta={"adapter": "fla", "path": r.path})
    return tmp_path, r


@pytest.mark.parametrize("case,dtype", [("thd-short", "fp32"), ("thd-odd", "fp32"), ("sbhd", "fp32"),
                                        ("thd-odd", "bf16")])
def test_fla_image_passes_the_oracle_with_every_stage(gdnv, tmp_path, case, dtype):
    d, r = image(tmp_path, case, dtype)
    assert r.path == "torch"
    res = gdnv("probe", "oracle", "--dir", d)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "29 tensors compared" in res.stdout  # out, grad_hidden, 7 grads, 10 stages, 10 stage grads


def test_q_and_k_projections_swapped_fail_at_the_in_proj_stage(gdnv, tmp_path, monkeypatch):
    """The loading direction of the mapping wrong: Megatron's q rows into k_proj and k rows into q_proj."""
    right = FLA.from_megatron

    def swapped(params, geometry):
        state = right(params, geometry)
        q, k = state["attn.q_proj.weight"], state["attn.k_proj.weight"]
        return dict(state, **{"attn.q_proj.weight": k, "attn.k_proj.weight": q})

    monkeypatch.setattr(FLA, "from_megatron", swapped)
    d, _ = image(tmp_path, "thd-odd", "fp32")
    res = gdnv("probe", "oracle", "--dir", d)
    assert res.returncode == 1
    assert "first divergence: stage::in_proj (forward" in res.stdout


def real_layer(**options) -> "fla.FlaGdn":
    layer = fla_layers.GatedDeltaNet(hidden_size=16, head_dim=4, expand_v=2, num_heads=2, num_v_heads=4,
                                     norm_eps=1e-6, **options)
    return fla.FlaGdn(torch.nn.RMSNorm(16, eps=1e-6), layer)


@pytest.mark.parametrize("conv_bias", [False, True])
def test_mapping_is_lossless_both_ways(conv_bias):
    model = real_layer(conv_bias=conv_bias)
    g = fla.geometry_of(model)
    assert (g.Hk, g.Hv, g.dk, g.dv, g.conv_bias) == (2, 4, 4, 8, conv_bias)
    state = dict(model.state_dict())
    params = FLA.to_megatron(state, g)
    assert {n: tuple(t.shape) for n, t in params.items()} == {n: names.param_shape(g, n) for n in names.param_names(g)}
    back = FLA.from_megatron(params, g)
    assert set(back) == set(state) and all(torch.equal(back[n], state[n]) for n in state)
    again = FLA.to_megatron(back, g)
    assert all(torch.equal(again[n], params[n]) for n in params)


def test_in_proj_sections_are_fla_projections_in_megatrons_order():
    model = real_layer()
    g = fla.geometry_of(model)
    params = FLA.to_megatron(dict(model.state_dict()), g)
    for section, proj in [("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("z", "g_proj"), ("beta", "b_proj"),
                          ("alpha", "a_proj")]:
        rows = g.section(section)
        assert torch.equal(params[names.IN_PROJ][rows.start:rows.stop], getattr(model.attn, proj).weight)


REFUSED = [
    (dict(use_gate=False), "use_gate=False: Megatron's layer always gates its output norm"),
    (dict(use_short_conv=False), "use_short_conv=False"),
    (dict(allow_neg_eigval=True), "allow_neg_eigval=True: FLA then takes beta = 2 sigmoid"),
    (dict(output_gate_activation="sigmoid"), "output_gate_activation='sigmoid'"),
]


@pytest.mark.parametrize("options,message", REFUSED)
def test_options_whose_math_differs_are_refused_naming_the_option(options, message):
    missing = set(options) - set(inspect.signature(fla_layers.GatedDeltaNet.__init__).parameters)
    if missing:  # FLA 0.4.2's layer has no output_gate_activation: its gate is always swish, Megatron's
        pytest.skip(f"this FLA's GatedDeltaNet takes no {', '.join(sorted(missing))}")
    with pytest.raises(fla.FlaAdapterError, match=message):
        fla.geometry_of(real_layer(**options))


def test_fewer_value_than_key_heads_is_refused():
    layer = fla_layers.GatedDeltaNet(hidden_size=16, head_dim=4, num_heads=4, num_v_heads=2)
    with pytest.raises(fla.FlaAdapterError, match="num_v_heads=2 with num_heads=4"):
        fla.geometry_of(fla.FlaGdn(torch.nn.RMSNorm(16, eps=1e-5), layer))


def test_different_norm_eps_is_refused():
    model = real_layer()
    model.attn_norm = torch.nn.RMSNorm(16, eps=1e-5)
    with pytest.raises(fla.FlaAdapterError, match="one layernorm_epsilon for both norms"):
        fla.geometry_of(model)


def test_fp64_is_refused_because_fla_computes_in_fp32():
    with pytest.raises(fla.FlaAdapterError, match="use --dtype fp32 or bf16"):
        FLA.build_module(make_case("thd-short").geometry, torch.float64)
