"""python -m gdn_verify.dump --adapter megatron: bad combinations are one `error:` line, exit 3, nothing
written (run in process: every refusal comes before a rank starts)."""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core")
from gdn_verify import dump  # noqa: E402
from gdn_verify.adapters import megatron  # noqa: E402


@pytest.mark.parametrize("args,message", [
    (["--mode", "headwise", "--world", "3", "--tp", "2"], "megatron: --world 3 is not a multiple of --tp 2"),
    (["--mode", "headwise", "--world", "2", "--tp", "2"],
     "megatron: --mode headwise needs CP = world / tp >= 2, got 1"),
    (["--mode", "cp1", "--world", "2"], "megatron: --mode cp1 runs CP = 1, not world / tp = 2: use --world 1"),
    (["--mode", "zigzag", "--world", "2"], "megatron: unknown --mode 'zigzag': use cp1, headwise, chunkwise"),
    (["--core", "nope"], "unknown --core 'nope' for megatron: use fla-triton or torch-chunk"),
    (["--device", "cuda:0"], "--device cuda:0: --adapter megatron runs on the CPU's gloo ranks"),
    # Megatron's own configuration check, run in this process on the config the ranks would build
    (["--mode", "headwise", "--world", "4", "--lengths", "64", "--num-key-heads", "2", "--num-value-heads", "4"],
     "megatron: Megatron's configuration check refuses --mode headwise at TP 1 x CP 4: "
     "self.linear_num_key_heads=2 must be a multiple of"),
    # Megatron's forward-time rules, restated so they refuse before any rank starts
    (["--case", "thd-gva", "--core", "torch-chunk"], "megatron: thd-deterministic: Megatron's forward asserts"),
    (["--mode", "headwise", "--world", "4", "--lengths", "36,28"], "megatron: zigzag-lengths: Megatron's zigzag"),
])
def test_bad_megatron_combination_is_one_line_exit_3_nothing_written(tmp_path, capsys, args, message):
    out = tmp_path / "img"
    case = [] if "--case" in args or "--lengths" in args else ["--case", "sbhd"]
    assert dump.main(["--adapter", "megatron", *case, "--out", str(out), *args]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not out.exists()


def test_chunkwise_without_linear_cp_mode_names_the_megatron_that_has_it(tmp_path, capsys):
    if megatron.has_linear_cp_mode():
        pytest.skip("this Megatron has linear_cp_mode: chunkwise runs")
    out = tmp_path / "img"
    assert dump.main(["--adapter", "megatron", "--mode", "chunkwise", "--world", "2", "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert err == ("error: megatron: --mode chunkwise needs a Megatron-Core with TransformerConfig.linear_cp_mode "
                   "(Megatron-LM's development branch; no PyPI release has it): put that checkout first on "
                   "PYTHONPATH, or use --mode headwise (the released all-to-all scheme)\n")
    assert not out.exists()


def test_tp_on_an_adapter_without_tensor_parallelism_is_refused(tmp_path, capsys):
    assert dump.main(["--adapter", "fla", "--tp", "2", "--out", str(tmp_path / "img")]) == 3
    assert "error: --tp: adapter fla has no tensor parallelism here" in capsys.readouterr().err
