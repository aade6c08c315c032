"""FLA's KCP across gloo processes, judged by gdn-verify; the FLA gate; bugs planted in a copy of FLA.

The gate's full matrix (fla-spans: a 264-token sequence through all four ranks, 80-token spans, GVA,
conv bias; W = 1, 2, 4; fp32 and bf16) must pass on the installed FLA. Each negative control copies the
installed `fla` package into a temporary directory, plants one bug in its source, and runs
`python -m gdn_verify.fla_gate --quick` in a subprocess with the copy first on PYTHONPATH: the gate
must fail with the first-divergence line naming the stage and the rank the bug reaches first.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from gdn_verify import fla_gate

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
    assert "fla_gate: 4 steps, 0 failed" in text and text.rstrip().endswith("PASS")
    for step in ("FLA layer cp1 (fp32)", "FLA KCP W=2,4 (fp32)", "FLA layer cp1 (bf16)", "FLA KCP W=2,4 (bf16)"):
        assert f"{step} ... ok" in text, text
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [
        "fla-quick-bf16-w1", "fla-quick-bf16-w2", "fla-quick-bf16-w4",
        "fla-spans-fp32-w1", "fla-spans-fp32-w2", "fla-spans-fp32-w4",
        "fla-strong-fp32-w1", "fla-strong-fp32-w2", "fla-strong-fp32-w4"]
    assert len(list((tmp_path / "images" / "fla-spans-fp32-w4").glob("chunkwise.rank*.safetensors"))) == 4
    junit = (tmp_path / "fla.xml").read_text()
    assert 'tests="4" failures="0" skipped="0"' in junit and 'name="FLA KCP W=2,4 (bf16)"' in junit


def test_the_gate_refuses_an_unknown_dtype_in_one_line(capsys):
    assert fla_gate.main(["--dtypes", "fp16"]) == 3
    err = capsys.readouterr().err
    assert err == "error: --dtypes fp16: give a comma-separated list of fp32, bf16\n"


# (the sites the bug may be planted at, the first the installed FLA holds: FLA 0.6.0's, then 0.4.2's, each (file
# under fla/, its source text, the planted text); the first-divergence lines the gate must print: the oracle's,
# then cross-mode's against the same FLA's cp1, which does not judge the boundary state)
PLANTS = {
    # KCP drops the state carried from rank 0: rank 1's first sequence starts from zero
    "kcp_state_dropped": (
        (("ops/cp/chunk_delta_h.py", "num_ranks=context.pre_num_ranks_dev if use_graph else context.pre_num_ranks,",
          "num_ranks=0,"),
         ("ops/cp/chunk_delta_h.py", "pre_or_post_num_ranks=context.pre_num_ranks,", "pre_or_post_num_ranks=0,")),
        ("oracle: first divergence: stage::boundary_state (forward, rank 1 of 2",
         "cross-mode: first divergence: stage::core (forward, rank 1 of 2")),
    # the conv halo comes from the wrong rank: rank 1 reads its own tail instead of rank 0's
    "conv_halo_wrong_rank": (
        (("ops/cp/comm.py", "return gathered[rank - 1].clone()", "return gathered[rank].clone()"),),
        ("oracle: first divergence: stage::conv (forward, rank 1 of 2",
         "cross-mode: first divergence: stage::conv (forward, rank 1 of 2")),
    # the CP chunk-state kernel decays each token's update by the wrong base: e^(g_last - g_t) for 2^(...) where
    # its g is in log2 units (0.6.0), 2^(...) for e^(...) where it is not (0.4.2's forward, which takes the merged
    # kernel: its first b_v decay); the first occurrence is the zero-initial-state part h_local of the summary
    "chunk_state_decay_exponent": (
        (("ops/cp/chunk_fwd.py", "exp2(b_g_last - b_g)", "tl.exp(b_g_last - b_g)"),
         ("ops/cp/chunk_delta_h.py", "                    b_v = b_v * tl.where(m_t, exp(b_g_last - b_g), 0)",
          "                    b_v = b_v * tl.where(m_t, exp2(b_g_last - b_g), 0)")),
        ("oracle: first divergence: stage::boundary_state (forward, rank 1 of 2",
         "cross-mode: first divergence: stage::gated_norm (forward, rank 1 of 2")),
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
        ()),
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
    assert "FLA layer cp1 (fp32) ... ok" in r.stdout  # the plants are in KCP's code only
    for line in PLANTS[plant][1]:
        assert line in r.stdout, r.stdout
    assert "reproduce: rm -rf /tmp/fla-fp32-w2 && python -m gdn_verify.dump --adapter fla --world 1" in r.stdout


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
