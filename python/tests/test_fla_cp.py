"""FLA's KCP across gloo processes, judged by gdn-verify; the FLA gate; bugs planted in a copy of FLA.

The gate's full matrix (gdn_verify.fla_gate: FLA's layer and its steps, W = 1, 2, 4, fp32 and bf16, and
FLA's kernels) must pass on the installed FLA. Each negative control copies the installed `fla` package
into a temporary directory, plants one bug in its source, and runs `python -m gdn_verify.fla_gate --quick`
in a subprocess with the copy first on PYTHONPATH: the gate must fail with the first-divergence line
naming the stage and the rank the bug reaches first, in the form that runs the bug.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from gdn_verify import cases, fla_gate, gatekit
from gdn_verify.adapters.fla import FlaAdapter
from gdn_verify.world import World

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("fla")


def env_with(*paths: Path) -> dict[str, str]:
    """This environment with `paths` first on PYTHONPATH, then our package."""
    parts = [str(p) for p in paths] + [str(REPO / "python"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in parts if p))


def test_the_gate_passes_the_installed_fla_and_writes_junit(gdnv_bin, tmp_path):
    out = io.StringIO()
    args = Namespace(quick=False, dtypes="fp32,bf16", junit=str(tmp_path / "fla.xml"), keep=str(tmp_path / "images"),
                     binary=str(gdnv_bin))
    rc = fla_gate.run(args, out)
    text = out.getvalue()
    assert rc == 0, text
    assert "fla_gate: 7 steps, 0 failed" in text and text.rstrip().endswith("PASS")
    steps = [f"{what} ({d})" for d in ("fp32", "bf16") for what in ("FLA layer cp1", "FLA KCP layer W=2,4",
                                                                    "FLA KCP steps W=2,4")] + ["FLA kernels (fp32)"]
    for step in steps:
        assert f"{step} ... ok" in text, text
    images = {p.name for p in (tmp_path / "images").iterdir()}
    for case, dtype, form in (("fla-spans", "fp32", "steps"), ("fla-wide", "fp32", "layer"),
                              ("fla-quick", "bf16", "layer"), ("fla-quick", "bf16", "steps")):
        assert {f"{case}-{dtype}-{form}-w{w}" for w in (1, 2, 4)} <= images, images
    assert {f"kernel-{op}" for op in fla_gate.KERNEL_OPS} <= images
    junit = (tmp_path / "fla.xml").read_text()
    assert 'tests="7" failures="0" skipped="0"' in junit and 'name="FLA KCP steps W=2,4 (bf16)"' in junit
    layer_form_is_flas_own_forward(tmp_path / "images" / "fla-quick-fp32-layer-w1", tmp_path / "here")


def layer_form_is_flas_own_forward(image: Path, here: Path) -> None:
    """The KCP layer form runs GatedDeltaNet.forward itself: at W = 1 (no CP context to hand over) the gate's
    image holds the single-process `--adapter fla` dump's tensors bit for bit (one thread, as the ranks run)."""
    from safetensors.torch import load_file

    r = subprocess.run([sys.executable, "-m", "gdn_verify.dump", "--adapter", "fla",
                        *cases.geometry_case_name(fla_gate.QUICK).split(), "--dtype", "fp32", "--out", str(here)],
                       capture_output=True, text=True, timeout=600, env=dict(env_with(), OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    single, gate = (load_file(d / "cp1.rank0.safetensors") for d in (here, image))
    assert sorted(single) == sorted(gate) and len(single) == 10  # out, grad_hidden, 8 gradients (conv bias)
    for name, t in single.items():
        assert torch.equal(t.reshape(-1).view(torch.int32), gate[name].reshape(-1).view(torch.int32)), name


def test_the_gate_refuses_an_unknown_dtype_in_one_line(capsys):
    assert fla_gate.main(["--dtypes", "fp16"]) == 3
    err = capsys.readouterr().err
    assert err == "error: --dtypes fp16: give a comma-separated list of fp32, bf16\n"


# (the sites the bug may be planted at, the first the installed FLA holds: FLA 0.6.0's, then 0.4.2's, each (file
# under fla/, its source text, the planted text); the first-divergence lines the gate must print: the oracle's,
# then cross-mode's against the same FLA's cp1, which does not judge the boundary state; the steps the bug
# leaves passing)
KCP_ONLY = ("FLA layer cp1 (fp32)",)
PLANTS = {
    # KCP drops the state carried from rank 0: rank 1's first sequence starts from zero
    "kcp_state_dropped": (
        (("ops/cp/chunk_delta_h.py", "num_ranks=context.pre_num_ranks_dev if use_graph else context.pre_num_ranks,",
          "num_ranks=0,"),
         ("ops/cp/chunk_delta_h.py", "pre_or_post_num_ranks=context.pre_num_ranks,", "pre_or_post_num_ranks=0,")),
        ("oracle: first divergence: stage::boundary_state (forward, rank 1 of 4",
         "cross-mode: first divergence: stage::core (forward, rank 1 of 4"), KCP_ONLY),
    # the conv halo comes from the wrong rank: rank 1 reads its own tail instead of rank 0's
    "conv_halo_wrong_rank": (
        (("ops/cp/comm.py", "return gathered[rank - 1].clone()", "return gathered[rank].clone()"),),
        ("oracle: first divergence: stage::conv (forward, rank 1 of 4",
         "cross-mode: first divergence: stage::conv (forward, rank 1 of 4"), KCP_ONLY),
    # the CP chunk-state kernel decays each token's update by the wrong base: e^(g_last - g_t) for 2^(...) where
    # its g is in log2 units (0.6.0), 2^(...) for e^(...) where it is not (0.4.2's forward, which takes the merged
    # kernel: its first b_v decay); the first occurrence is the zero-initial-state part h_local of the summary
    "chunk_state_decay_exponent": (
        (("ops/cp/chunk_fwd.py", "exp2(b_g_last - b_g)", "tl.exp(b_g_last - b_g)"),
         ("ops/cp/chunk_delta_h.py", "                    b_v = b_v * tl.where(m_t, exp(b_g_last - b_g), 0)",
          "                    b_v = b_v * tl.where(m_t, exp2(b_g_last - b_g), 0)")),
        ("oracle: first divergence: stage::boundary_state (forward, rank 1 of 4",
         "cross-mode: first divergence: stage::gated_norm (forward, rank 1 of 4"), KCP_ONLY),
    # build_cp_context raises on rank 1 only (test_a_failing_rank_...)
    "rank1_refuses": (
        (("ops/cp/context.py",
          "    _validate_cp_kwargs(use_tf32x3_affine_chain=use_tf32x3_affine_chain, **kwargs)\n"
          "    if world_size is None:",
          "    _validate_cp_kwargs(use_tf32x3_affine_chain=use_tf32x3_affine_chain, **kwargs)\n"
          "    if dist.get_rank(group=group) == 1:\n        raise ValueError('planted: rank 1 refuses its span')\n"
          "    if world_size is None:"),
         ("ops/cp/context.py", "    return get_cp_cu_seqlens(cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, group=group,",
          "    if dist.get_rank(group=group) == 1:\n        raise ValueError('planted: rank 1 refuses its span')\n"
          "    return get_cp_cu_seqlens(cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, group=group,")),
        (), ()),
    # the layer's default path (state_v_first) stores each chunk's state in [K, V] order where its readers
    # take [V, K]: only GatedDeltaNet.forward's own call runs it, so the steps form passes
    "state_v_first_store_transposed": (
        (("ops/common/chunk_delta_h.py",
          "            p_h1 = h + i_t_int64 * HV*K*V + o_v[:, None] * K + o_k1[None, :]",
          "            p_h1 = h + i_t_int64 * HV*K*V + o_v[:, None] + o_k1[None, :] * V"),),
        ("fla-quick: first divergence: out (forward, rank 0 of 1, rows 88..159)",
         "fla-quick W=4 cross-mode: first divergence: deviation chunkwise out"),
        ("FLA KCP steps W=4 (fp32)",)),
    # KCP's backward composes the following ranks' summaries left to right instead of right to left: the
    # same at W = 2 (one following rank), wrong where a sequence runs through three ranks or more
    "kcp_backward_merge_order": (
        (("ops/cp/chunk_merge.py", "                i_r = rank + NR - i_s\n",
          "                i_r = rank + 1 + i_s\n"),),
        ("fla-quick W=4 oracle: first divergence: stage_grad::boundary_state (backward, rank 0 of 4, rows 1..1)",
         "fla-quick W=4 oracle: first divergence: grad_hidden (backward, rank 0 of 4, "), KCP_ONLY),
    # dg rounded to fp16 before its reverse cumsum: fla-wide's grad::A_log moves by 8.3e-4, 0.3 of its class gate
    # under weak gates, ~530 x FLA's own spread
    "dg_fp16": (
        (("ops/gated_delta_rule/chunk.py",
          "    dg = chunk_local_cumsum(dg, chunk_size=chunk_size, reverse=True,",
          "    dg = chunk_local_cumsum(dg.half().float(), chunk_size=chunk_size, reverse=True,"),), (), ()),
    # the L2 norm's eps added outside the root, 1 / (|x| + eps): 1e-7 relative where |x|^2 ~ K, O(1) where |x|^2 ~ eps
    "l2norm_eps_outside_root": (
        (("modules/norm/l2norm.py", "    b_rstd = 1 / tl.sqrt(tl.sum(b_x * b_x, 1) + eps)\n",
          "    b_rstd = 1 / (tl.sqrt(tl.sum(b_x * b_x, 1)) + eps)\n"),), (), ()),
    # the gradient through the chunk's last decay (dg_last) added to its second-to-last row, not its last
    "dg_last_row_off_by_one": (
        (("ops/common/chunk_o.py", "b_dg = tl.where(o_t < min(i_t * BT + BT, T) - 1, b_dg, b_dg + b_dg_last)",
          "b_dg = tl.where(o_t != min(i_t * BT + BT, T) - 2, b_dg, b_dg + b_dg_last)"),), (), ()),
    # the initial state's gradient written to the next value head's slot (the chunk kernel's dh0 offset)
    "initial_state_grad_head": (
        (("ops/common/chunk_delta_h.py", "        dh0 += i_nh * K*V\n",
          "        dh0 += (i_n * HV + (i_h + 1) % HV) * K*V\n"),), (), ()),
}


def planted_copy(tmp_path: Path, name: str) -> Path:
    """The installed fla package copied under tmp_path with PLANTS[name] planted at its first site this FLA holds
    (the site's first occurrence)."""
    import fla

    root = tmp_path / "site"
    shutil.copytree(Path(fla.__file__).parent, root / "fla", ignore=shutil.ignore_patterns("__pycache__"))
    for where, source, planted in PLANTS[name][0]:
        path = root / "fla" / where
        if path.is_file() and source in (text := path.read_text()):
            path.write_text(text.replace(source, planted, 1))
            return root
    raise AssertionError(f"no site of plant {name} in this FLA ({', '.join(w for w, _, _ in PLANTS[name][0])}): "
                         "update the plant")


@pytest.mark.parametrize("plant", [p for p in PLANTS if PLANTS[p][1]])
def test_a_bug_planted_in_a_copy_of_fla_fails_the_gate_at_its_stage_and_rank(gdnv_bin, tmp_path, plant):
    root = planted_copy(tmp_path, plant)
    r = subprocess.run([sys.executable, "-m", "gdn_verify.fla_gate", "--quick", "--dtypes", "fp32", "--gdn-verify",
                        str(gdnv_bin)],
                       capture_output=True, text=True, timeout=900, env=env_with(root))
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"from {root / 'fla'}" in r.stdout  # the planted copy ran, not the installed package
    _, lines, passing = PLANTS[plant]
    for step in passing:
        assert f"{step} ... ok" in r.stdout, r.stdout
    for line in lines:
        assert line in r.stdout, r.stdout
    assert "python -m gdn_verify.dump --adapter fla --world 1 --core " in r.stdout


@pytest.mark.parametrize("plant,first", [("initial_state_grad_head", "1 outside tolerance; dh0 rel_rms "),
                                         ("l2norm_eps_outside_root", "8 outside tolerance; dbeta rel_rms 1.")])
def test_a_bug_the_layer_cannot_show_fails_the_gates_kernel_step(gdnv_bin, tmp_path, plant, first):
    """The layer at cp1 has no initial state, and its q, k rows are far from the L2 norm's eps; the kernel step
    gives the chunk kernel an initial state, dht, and rows with |x|^2 ~ eps (gdn_verify.kernel.TINY)."""
    root = planted_copy(tmp_path, plant)
    step = gatekit.Step("FLA kernels (fp32)")
    with World(1, env=FlaAdapter.rank_env, path=[str(root)]) as world:
        fla_gate.kernels_step(world, tmp_path, str(gdnv_bin), "fp32", step, ops=("chunk",))
    assert step.cases == 1 and len(step.failures) == 1, step.failures
    why = step.failures[0].splitlines()[0]
    assert why.startswith("chunk: outputs.safetensors: 8 tensors compared, 0 bitwise identical, " + first), why


@pytest.mark.parametrize("plant,spec,own_spread,first", [
    # passes the class gates (grad::A_log at ~0.3 of its gate), not FLA's own spread (the full gate's layer step;
    # on the case parameters fla-wide's error moves ~500 x its spread, fla-quick's stays under 20 x)
    ("dg_fp16", fla_gate.WIDE, True, "fla-wide own spread: grad::A_log: rel_rms 8.3"),
    # the --quick gate's first step (fla-quick at cp1, no own spread): 136 tokens, three chunks
    ("dg_last_row_off_by_one", fla_gate.QUICK, False,
     "fla-quick: first divergence: grad_hidden (backward, rank 0 of 1, rows 87..151): rel_rms 4.4")])
def test_a_dg_bug_fails_the_layer_step(gdnv_bin, tmp_path, plant, spec, own_spread, first):
    root = planted_copy(tmp_path, plant)
    step = gatekit.Step("FLA layer cp1 (fp32)")
    with World(1, env=FlaAdapter.rank_env, path=[str(root)]) as world:
        matrix = fla_gate.Matrix(world, tmp_path, str(gdnv_bin))
        fla_gate.layer_step(matrix, fla_gate.DtypePlan("fp32", (spec,), (), own_spread=own_spread), step)
    assert step.cases == 1 + own_spread and len(step.failures) == 1, step.failures
    assert step.failures[0].startswith(first), step.failures
    if own_spread:  # caught by the spread alone: the error is inside the class gate
        m = re.search(r"rel_rms ([0-9.e+-]+) > 20 x its own spread [0-9.e+-]+ \(2 ulps; class gate ([0-9.e+-]+)\)",
                      step.failures[0])
        assert m and float(m[1]) < float(m[2]), step.failures


@pytest.mark.parametrize("args,message", [
    (["--world", "2", "--mode", "cp1"], "--mode cp1 with --world 2: FLA's KCP is the chunkwise mode at --world > 1"),
    (["--world", "0"], "--world 0: give the number of CP ranks, at least 1"),
    (["--mode", "chunkwise"], "--mode chunkwise needs --world N (the CP ranks)"),
    (["--world", "4", "--case", "thd-odd"], "thd-odd at --world 4: 17 tokens are not divisible by W = 4"),
    (["--world", "2", "--lengths", "40,90"], "sequence of 90 tokens is not divisible by 2W = 4"),
    (["--world", "2", "--adapter", "hf-qwen3-next"], "only --adapter fla (FLA's KCP under Triton's interpreter)"),
])
def test_a_world_dump_refuses_bad_input_in_one_line_writing_nothing(tmp_path, capsys, args, message):
    from gdn_verify import dump

    adapter = [] if "--adapter" in args else ["--adapter", "fla"]
    assert dump.main([*adapter, *args, "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_failing_rank_is_one_line_naming_it_and_nothing_is_written(tmp_path):
    """A planted copy whose CP context raises on rank 1 only: the dump names rank 1, exits 3, writes nothing."""
    root = planted_copy(tmp_path, "rank1_refuses")
    r = subprocess.run([sys.executable, "-m", "gdn_verify.dump", "--adapter", "fla", "--world", "2", "--case",
                        "thd-short", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                       env=env_with(root))
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("error: rank 1 of 2: rank_run: ValueError: planted: rank 1 refuses its span"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_the_ranks_parameter_gradients_are_summed_in_fp32_not_in_the_layers_dtype():
    """bf16 partials 1 and 2^-9 sum to 1 + 2^-9 in fp32; a bf16 sum would round it back to 1 (ties to even)."""
    from gdn_verify import cases
    from gdn_verify.adapters.fla import kcp

    case = cases.make_case_from_geometry(cases.case_spec("thd-short"), 0, "bf16")
    T, hidden = kcp.tokens(case), case.geometry.hidden_size
    half = T // 2
    runs = [kcp.SpanRun(list(range(r * half, (r + 1) * half)), torch.zeros(half, hidden, dtype=torch.bfloat16),
                        torch.zeros(half, hidden, dtype=torch.bfloat16),
                        {"A_log": torch.full((2,), part, dtype=torch.bfloat16)}, None, [], {}, {}, 0.0)
            for r, part in enumerate((1.0, 2.0 ** -9))]
    for dump in kcp.rank_dumps(case, runs):
        assert dump.grads["A_log"].dtype == torch.float32
        assert torch.equal(dump.grads["A_log"], torch.full((2,), 1 + 2.0 ** -9, dtype=torch.float32))

