"""gdn_verify.compat: one verdict per adapter, naming the first failing test and its exception."""

from __future__ import annotations

from pathlib import Path

from gdn_verify import compat


def test_a_failing_test_is_named_with_its_exception_line(tmp_path):
    (tmp_path / "test_lib.py").write_text(
        "def test_runs():\n    pass\n\n"
        "def test_wrapper():\n    raise AttributeError(\"'Func' object has no attribute '__wrapped__'\")\n")
    verdict = compat.check([tmp_path / "test_lib.py"])
    assert not verdict.works
    assert verdict.line("hf-qwen3-next") == ("hf-qwen3-next: BROKEN (1 of 2 failed): test_lib.py::test_wrapper: "
                                             "AttributeError: 'Func' object has no attribute '__wrapped__'")


def test_an_import_error_at_collection_is_a_failure(tmp_path):
    (tmp_path / "test_gone.py").write_text("import megatron.core.no_such_module\n")
    line = compat.check([tmp_path / "test_gone.py"]).line("megatron")
    assert line.startswith("megatron: BROKEN (1 of 1 failed): test_gone.py: ") and "ModuleNotFoundError" in line, line


def test_passing_tests_work_and_no_tests_is_not_working(tmp_path):
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    assert compat.check([tmp_path / "test_ok.py"]).line("fla") == "fla: works (1 passed)"
    assert not compat.check([]).works


def test_every_adapter_has_tests():
    for adapter in compat.ADAPTER_TESTS:  # this checkout's tests: the installed package has none beside it
        assert compat.adapter_files(adapter, Path(__file__).parent), adapter


def test_an_unknown_adapter_is_one_error_line(capsys):
    assert compat.main(["--adapters", "fla,mamba"]) == 3
    assert capsys.readouterr().err == "error: --adapters: unknown mamba: give some of hf-qwen3-next, fla, megatron\n"
