"""FLA's real Triton kernels on a CPU under Triton's interpreter (gdn_verify.triton_cpu), judged by gdn-verify.

Layer: `python -m gdn_verify.dump --adapter fla` (core triton) on a small case, fp32 and bf16, judged by
`probe oracle`. Kernels: `python -m gdn_verify.kernel` (FLA's chunk_gated_delta_rule forward and backward,
fused_recurrent_gated_delta_rule forward, causal_conv1d forward and backward with initial and final
state), judged by `reference` + `compare`. Each runs in its own process: the interpreter must be on
before triton is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

pytest.importorskip("fla")
pytest.importorskip("triton")


def kernel_check(gdnv_bin, out, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), GDNV_BIN=str(gdnv_bin))
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-W", "ignore", "-m", "gdn_verify.kernel", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_fla_layer_with_its_triton_kernels_passes_the_oracle(python_dump, gdnv, tmp_path, dtype):
    r = python_dump("--adapter", "fla", "--case", "thd-short", "--dtype", dtype, "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["path"] == "fla-triton" and meta["decay_class"] == "cumsum-decay"
    assert "range-var-tensor" in meta["notes"]["triton_cpu_shims"]  # the interpreter ran FLA's kernels
    res = gdnv("probe", "oracle", "--dir", tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "9 tensors compared" in res.stdout  # out, grad_hidden, 7 parameter gradients


def test_fla_layer_torch_core_stays_an_option(python_dump, tmp_path):
    r = python_dump("--adapter", "fla", "--core", "torch", "--case", "thd-short", "--out", tmp_path, "--no-stages")
    assert r.returncode == 0, r.stderr[-3000:]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["path"] == "torch" and meta["decay_class"] == "product-of-decays"


# A dump under either autotune rule, then each autotuned kernel's config: every config ties under the first rule,
# so min() keeps the first.
DUMP_UNDER_RULE = """
import gc, json, sys
from gdn_verify import dump, triton_shims
if sys.argv[1] == "first":
    triton_shims._programs = lambda tuner, kwargs, config: 0
code = dump.main(sys.argv[2:])
from triton.runtime.autotuner import Autotuner
tuners = [t for t in gc.get_objects() if isinstance(t, Autotuner) and getattr(t, "best_config", None)]
print(json.dumps({t.base_fn.__name__: t.best_config.kwargs for t in tuners}))
sys.exit(code)
"""


def test_fewest_programs_config_gives_fla_layer_the_bits_of_its_first_config(tmp_path):
    from gdn_verify import safetensors_file

    configs, tensors = {}, {}
    for rule in ("fewest", "first"):
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
        r = subprocess.run([sys.executable, "-c", DUMP_UNDER_RULE, rule, "--adapter", "fla", "--case", "thd-gva",
                            "--dtype", "fp32", "--out", str(tmp_path / rule)],
                           capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        configs[rule] = json.loads(r.stdout.splitlines()[-1])
        files = (tmp_path / rule).glob("*.safetensors")
        tensors[rule] = {f"{f.name}:{name}": safetensors_file.tensor_bytes(t) for f in files
                         for name, t in safetensors_file.read_safetensors(f)[0].items()}
    # the kernels whose configs tile only rows or channels, each computed alone: fewer, larger programs
    changed = {k: [configs["first"][k], v] for k, v in configs["fewest"].items() if configs["first"][k] != v}
    assert changed == {"causal_conv1d_fwd_kernel": [{"BD": 16}, {"BD": 64}],
                       "causal_conv1d_bwd_kernel": [{"BD": 16}, {"BD": 64}],
                       "layer_norm_gated_fwd_kernel": [{"BT": 16}, {"BT": 64}],
                       "l2norm_fwd_kernel": [{"BT": 8}, {"BT": 128}], "l2norm_bwd_kernel": [{"BT": 8}, {"BT": 128}]}
    assert sum(k.startswith("cp1.rank0.safetensors:") for k in tensors["first"]) == 9  # out, every gradient
    assert tensors["fewest"] == tensors["first"]


@pytest.mark.parametrize("op,compared", [("chunk", 8), ("fused_recurrent", 2)])
def test_fla_triton_gated_delta_rule_kernels_pass_the_fp32_kernel_gate(gdnv_bin, tmp_path, op, compared):
    r = kernel_check(gdnv_bin, tmp_path, "--op", op)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{compared} tensors compared, 0 bitwise identical, 0 outside tolerance" in r.stdout


def test_fla_conv_backward_drops_the_final_states_slot_0_gradient_and_the_verdict_names_its_rows(gdnv_bin, tmp_path):
    # Sequences of 2, 35 and 133 tokens, W = 4: FLA writes x[len - W] into final-state slot 0 (as the
    # oracle, bitwise) but its backward leaves that slot's dht out of dx. Sequence 0 is shorter than W,
    # so its slot 0 holds an initial-state slot, whose gradient FLA does pass on (dh0 passes).
    # FLA 0.4.2 also gets sequence 0 wrong: dx at its two tokens, and dh0 at slots 2 and 3, which lack exactly
    # dht's slots 0 and 1 (docs/fla.md, "FLA 0.4.2"); 0.6.0 passes them.
    r = kernel_check(gdnv_bin, tmp_path, "--op", "conv1d")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "final_state: pass, bitwise yes" in r.stdout
    rows = "dx: rows over the gate 1e-05 (per-row rms error / tensor rms): "
    slot0 = "token 33 (sequence 1, position 31), token 166 (sequence 2, position 129)\n"
    if "dh0: pass" in r.stdout:
        assert "6 tensors compared, 1 bitwise identical, 1 outside tolerance" in r.stdout
        assert rows + slot0 in r.stdout
    else:
        assert "6 tensors compared, 1 bitwise identical, 2 outside tolerance" in r.stdout
        assert rows + "token 0 (sequence 0, position 0), token 1 (sequence 0, position 1), " + slot0 in r.stdout
        assert "dh0: rows over the gate 1e-05 (per-row rms error / tensor rms): (sequence 0, slot 2), " \
               "(sequence 0, slot 3)\n" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--op", "conv2d"], "unknown --op 'conv2d': use chunk, fused_recurrent, conv1d"),
    (["--op", "chunk", "--dtype", "fp16"], "unknown --dtype 'fp16': use fp32, bf16"),
    (["--op", "chunk", "--seed", "-1"], "--seed '-1' is not an integer in [0, 2^63): e.g. --seed 0"),
    (["--op", "chunk", "--gdn-verify", "/nonexistent/gdn-verify"],
     "--gdn-verify '/nonexistent/gdn-verify' is not an executable: build gdn-verify and pass its path (or set "
     "GDNV_BIN)"),
    (["--dtype", "fp32"], "the following arguments are required: --op: see python -m gdn_verify.kernel --help"),
])
def test_kernel_check_bad_input_is_one_line_exit_3(gdnv_bin, tmp_path, capsys, args, message):
    from gdn_verify import kernel

    # every check runs before the interpreter is enabled or anything is written, so in-process is safe
    assert kernel.main(["--out", str(tmp_path / "out"), "--gdn-verify", str(gdnv_bin), *args]) == 3
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_kernel_check_out_that_is_a_file_is_bad_input(gdnv_bin, tmp_path, capsys):
    from gdn_verify import kernel

    (tmp_path / "f").write_text("")
    assert kernel.main(["--op", "chunk", "--out", str(tmp_path / "f"), "--gdn-verify", str(gdnv_bin)]) == 3
    assert capsys.readouterr().err == f"error: --out '{tmp_path / 'f'}' is a file: give a directory\n"
