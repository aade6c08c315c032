"""The real Hugging Face Qwen3-Next GatedDeltaNet on CPU, judged by `gdn-verify probe oracle`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gdn_verify import cases, images
from gdn_verify.adapters import hf_qwen3_next as hf
from gdn_verify.adapters import hf_qwen3_next_params as hf_params
from gdn_verify.names import Geometry

HF = hf.HfQwen3NextAdapter()

# The case's parameters are loaded once per (case, dtype): make_case is pure Python.
_CASES: dict[tuple[str, str], cases.Case] = {}


def case_of(name: str, dtype: str = "fp32") -> cases.Case:
    if (name, dtype) not in _CASES:
        _CASES[name, dtype] = cases.make_case(name, 0, dtype)
    return _CASES[name, dtype]


def dump(case: cases.Case, out, core: str = "chunk") -> None:
    module = HF.build_module(case.geometry, case.torch_dtype)
    HF.load_megatron_params(module, case.params)
    r = HF.run(module, case, stages=True, core=core)
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
    correct = hf_params.qkvz_rows
    monkeypatch.setattr(hf_params, "qkvz_rows", lambda g: swapped_qk(correct(g), g))
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
    back = HF.to_megatron(HF.from_megatron(params, g), g)
    assert back.keys() == params.keys()
    assert all(torch.equal(back[n], params[n]) for n in params)
    module = HF.build_module(g, torch.float64)
    state = HF.from_megatron(params, g)
    assert state.keys() == module.state_dict().keys()
    again = HF.from_megatron(HF.to_megatron(state, g), g)
    assert all(torch.equal(again[n], state[n]) for n in state)


def test_in_proj_groups_cover_every_megatron_row_once():
    g = Geometry(64, 4, 8, 16, 16)
    assert sorted(hf_params.qkvz_rows(g) + hf_params.ba_rows(g)) == list(range(g.in_proj_dim))


def test_gradients_map_without_the_norm_shift():
    g = Geometry(8, 1, 1, 2, 2)
    grads = {n: torch.ones(t.shape) for n, t in HF.build_module(g, torch.float32).state_dict().items()}
    assert torch.equal(HF.to_megatron(grads, g, gradients=True)["in_proj.layer_norm_weight"], torch.ones(8))
    assert torch.equal(HF.to_megatron(grads, g)["in_proj.layer_norm_weight"], torch.full((8,), 2.0))


def test_cpu_runs_the_pure_torch_path_even_with_kernels_installed():
    module = HF.build_module(Geometry(8, 1, 1, 2, 2), torch.float32)
    assert hf.path(module) == "torch"


def test_conv_bias_is_refused_naming_the_option():
    with pytest.raises(hf.AdapterError, match="conv_bias=true: Qwen3NextGatedDeltaNet's conv1d has no bias"):
        HF.build_module(Geometry(8, 1, 1, 2, 2, conv_bias=True), torch.float32)


def test_hf_image_compares_directly_with_the_cpp_image_of_the_same_case(gdnv, cpp_image, tmp_path):
    dump(case_of("thd-gva"), tmp_path, core="recurrent")
    r = gdnv("probe", "compare", "--ref", cpp_image("thd-gva", 0, "fp32", "--stages"), "--cand", tmp_path,
             "--policy", "cp1-vs-old")
    assert r.returncode == 0, r.stdout[-3000:]


def dump_declared(case: cases.Case, out, core: str = "chunk") -> None:
    """dump() with the decay class the adapter declares for `core` in meta.json, as gdn_verify.dump writes it."""
    module = HF.build_module(case.geometry, case.torch_dtype)
    HF.load_megatron_params(module, case.params)
    r = HF.run(module, case, stages=False, core=core)
    images.write_image(out, case, "hf", "hf-qwen3-next:cpu",
                       [images.RankDump("cp1", 0, 1, r.out, r.grad_hidden, r.grads, None)],
                       extra_meta={"decay_class": r.decay_class})


# transformers' default chunked core forms its decays from fp32 chunk-local cumsums: its grad::A_log and
# grad::dt_bias (2.5e-5) are outside our fp32 gate (1e-5), inside the cumsum-decay class's (docs/DESIGN.md §4).
@pytest.mark.parametrize("name", ["thd-gva", "sbhd"])
def test_the_default_chunked_core_passes_by_its_declared_cumsum_decay_class(gdnv, tmp_path, name):
    dump_declared(case_of(name), tmp_path)
    r = gdnv("probe", "oracle", "--dir", tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    assert ("declared cumsum-decay; meets product-of-decays gates: no (2 outside); meets cumsum-decay gates: yes"
            in r.stdout)


class HubFunc:
    """A kernel-hub wrapper as transformers 5.25 applies it (kernels' `Func`): callable, no `__wrapped__`."""

    def __init__(self, f) -> None:
        self.f = f

    def __call__(self, *args, **kwargs):
        return self.f(*args, **kwargs)


def test_functions_wrapped_without_wrapped_attribute_still_run(gdnv, tmp_path, monkeypatch):
    mod = hf.transformers_module("cpu")
    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn"):
        monkeypatch.setattr(mod, name, HubFunc(getattr(mod, name)))
    dump(case_of("thd-short"), tmp_path, core="chunk")
    r = gdnv("probe", "oracle", "--dir", tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]


def planted_transformers(tmp_path, old: str, new: str):
    """A copy of the installed transformers (files linked, the Qwen3-Next modeling file copied) with `old`
    replaced by `new` in that file; the directory to put first on PYTHONPATH."""
    import transformers

    root = tmp_path / "site"
    src = Path(transformers.__file__).parent
    shutil.copytree(src, root / "transformers", copy_function=os.symlink, ignore=shutil.ignore_patterns("__pycache__"))
    modeling = root / "transformers" / "models" / "qwen3_next" / "modeling_qwen3_next.py"
    text = (src / "models" / "qwen3_next" / "modeling_qwen3_next.py").read_text()
    assert text.count(old) == 1, old
    modeling.unlink()
    modeling.write_text(text.replace(old, new))
    return root


# Bugs planted in transformers' chunked core: the key's decay to the chunk's end, e^{gamma_C - gamma_i}, with
# its exponent negated (overflows to inf); the within-chunk decays' exponents 0.1% too large (out's rel_rms
# 1.6e-4, 16x its gate).
PLANTED = {
    "wrong-decay-sign": ("(cum_decay[..., -1:] - cum_decay).exp()", "(cum_decay - cum_decay[..., -1:]).exp()",
                         "first divergence: out (forward, rank 0 of 1, rows"),
    "decay-exponent-0.1%-off": ("pairwise_decay = pairwise_decay.exp()",
                                "pairwise_decay = (pairwise_decay * 1.001).exp()",
                                "first divergence: out (forward, rank 0 of 1, rows 1..223): rel_rms"),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_a_bug_planted_in_a_copy_of_transformers_fails_its_declared_class(gdnv, tmp_path, bug):
    old, new, divergence = PLANTED[bug]
    site = planted_transformers(tmp_path, old, new)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(Path(__file__).parents[1])]))
    out = tmp_path / "img"
    d = subprocess.run([sys.executable, "-m", "gdn_verify.dump", "--adapter", "hf-qwen3-next", "--case", "thd-gva",
                        "--no-stages", "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert d.returncode == 0, d.stderr
    assert json.loads((out / "meta.json").read_text())["decay_class"] == "cumsum-decay"
    r = gdnv("probe", "oracle", "--dir", out)
    assert r.returncode == 1, r.stdout[-3000:]
    assert "meets cumsum-decay gates: no" in r.stdout and divergence in r.stdout, r.stdout[-3000:]
