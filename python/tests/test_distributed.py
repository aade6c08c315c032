"""The torchrun example's per-rank writing (python/examples/megatron_cp_dump.py), on CPU with gloo.

Megatron-Core's CP needs GPUs, so the module here is the one allowed stand-in: a token-local layer
(out = hidden * in_proj.layer_norm_weight, every other parameter multiplied by 0), whose right answer on
any rank's rows is known. Each process writes its rank file; every rank's rows must be the ones
`gdn-verify layout` lists for the zigzag layout, and the parameter gradients summed over the ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gdn_verify import names
from gdn_verify.cases import make_case
from gdn_verify.layouts import contiguous_rows, zigzag_rows

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import megatron_cp_dump  # noqa: E402

WORKER = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    from pathlib import Path
    sys.path.insert(0, {examples!r})
    import megatron_cp_dump as ex
    from gdn_verify.cases import make_case

    class StandIn(torch.nn.Module):
        def __init__(self, params):
            super().__init__()
            for name, t in params.items():
                owner = self
                *path, leaf = name.split(".")
                for p in path:
                    if not hasattr(owner, p):
                        owner.add_module(p, torch.nn.Module())
                    owner = getattr(owner, p)
                owner.register_parameter(leaf, torch.nn.Parameter(t.to(torch.float32)))

    def forward(module, case, hidden):
        zero = sum((p * 0).sum() for n, p in module.named_parameters() if n != "in_proj.layer_norm_weight")
        return hidden * module.in_proj.layer_norm_weight.to(hidden.dtype) + zero

    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    for case_name, mode in (("thd-gva", "chunkwise"), ("sbhd", "headwise")):
        case = make_case(case_name, 0, "fp32")
        directory = out / case_name
        directory.mkdir(parents=True, exist_ok=True)
        ex.dump_rank(directory, case, mode, StandIn(case.params), forward)
    dist.destroy_process_group()
""")


def run_world(tmp_path: Path, world: int) -> Path:
    """W worker processes of the example's dump_rank over gloo; the directory they wrote."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(examples=str(EXAMPLES)))
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), str(tmp_path / "store"),
                               str(tmp_path / "out")], env=env, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(errors)
    return tmp_path / "out"


def layout_rows(gdnv, case, world: int, rank: int) -> list[int]:
    where = (["--cu-seqlens", ",".join(map(str, case.cu_seqlens))] if case.cu_seqlens
             else ["--seq-len", str(case.spec.seq_len)])
    r = gdnv("layout", "--layout", "zigzag", "--cp", world, "--rank", rank, *where)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["indices"]


@pytest.mark.parametrize("world", [4])
def test_each_rank_writes_the_zigzag_rows_layout_lists_and_cp_summed_grads(gdnv, tmp_path, world):
    out = run_world(tmp_path, world)
    for case_name, mode in (("thd-gva", "chunkwise"), ("sbhd", "headwise")):
        case = make_case(case_name, 0, "fp32")
        w = case.params[names.IN_PROJ_NORM].to(torch.float32)
        hidden = case.hidden_states.reshape(-1, case.geometry.hidden_size).to(torch.float32)
        grad_out = case.grad_output.reshape(hidden.shape).to(torch.float32)
        summed = torch.zeros_like(w)
        for rank in range(world):
            f = load_file(out / case_name / f"{mode}.rank{rank}.safetensors")
            rows = layout_rows(gdnv, case, world, rank)
            assert torch.equal(f["out"], hidden[rows] * w), (case_name, rank)
            assert torch.equal(f["grad_hidden"], grad_out[rows] * w), (case_name, rank)
            summed += (grad_out[rows] * hidden[rows]).sum(0)
            assert torch.equal(f["grad::" + names.OUT_PROJ], torch.zeros(names.param_shape(case.geometry,
                                                                                            names.OUT_PROJ)))
        for rank in range(world):
            f = load_file(out / case_name / f"{mode}.rank{rank}.safetensors")
            torch.testing.assert_close(f["grad::" + names.IN_PROJ_NORM], summed, rtol=1e-5, atol=1e-5)
        meta = json.loads((out / case_name / "meta.json").read_text())
        assert meta["modes"][mode]["world"] == world and meta["case"] == case_name
        assert (out / case_name / "inputs.safetensors").exists()


@pytest.mark.parametrize("case_name,world", [("thd-gva", 1), ("thd-gva", 2), ("thd-gva", 8), ("sbhd", 4)])
def test_zigzag_rows_equal_gdn_verify_layout(gdnv, case_name, world):
    case = make_case(case_name, 0, "fp32")
    for rank in range(world):
        assert zigzag_rows(case, world, rank) == layout_rows(gdnv, case, world, rank)


def test_lengths_not_divisible_by_2w_are_refused():
    with pytest.raises(ValueError, match="not divisible by 2W = 4"):
        zigzag_rows(make_case("thd-odd", 0, "fp32"), 2, 0)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_contiguous_rows_equal_gdn_verify_layout(gdnv, world):
    case = make_case("thd-gva", 0, "fp32")
    for rank in range(world):
        r = gdnv("layout", "--layout", "contiguous", "--cp", world, "--rank", rank, "--cu-seqlens",
                 ",".join(map(str, case.cu_seqlens)))
        assert r.returncode == 0, r.stderr
        assert list(contiguous_rows(case.cu_seqlens[-1], world, rank)) == json.loads(r.stdout)["indices"]


def test_a_total_not_divisible_by_w_has_no_contiguous_layout():
    with pytest.raises(ValueError, match="224 tokens are not divisible by W = 3"):
        contiguous_rows(224, 3, 0)
