"""gdn_verify.gatekit, what fla_gate and megatron_gate share: a reader's verdict read from reports like
`gdn-verify probe <reader> --json` writes (no binary run), the step record, progress lines, table and
JUnit of both gates' suites, the reproduce commands, the gdn-verify lookup, --keep and bad input.
"""

from __future__ import annotations

import io
import json
import re
from argparse import Namespace
from pathlib import Path

import pytest

from gdn_verify import cli, fla_gate, gatekit, megatron_gate
from gdn_verify.gatekit import Step, Verdict

DIVERGENCE = ("first divergence: stage::conv (forward, rank 1 of 2, rows 12..14): rel_rms 5.379e-01 > gate "
              "1.000e-05")
MISSING = "missing: meta.json declares chunkwise on 2 rank(s); dump --mode chunkwise again"


Mismatch = tuple[str, str, str]  # file, name, what


def probe_json(tmp_path: Path, name: str, passed: bool, failed: int = 0, structural: tuple[Mismatch, ...] = (),
               divergence: str | None = None) -> str:
    """A report as `probe oracle --json` writes it (docs/json_format.md), written to tmp_path and read back."""
    tensors = [{"file": "chunkwise.rank0.safetensors", "name": "out", "result": "FAIL" if failed else "pass"}]
    tensors += [{"file": f, "name": n, "result": "STRUCT", "structure": what} for f, n, what in structural]
    first = None if divergence is None else {
        "tensor": "stage::conv", "direction": "forward", "rank": 1, "world": 2, "rows": [12, 14],
        "metric": "rel_rms", "value": 0.5379, "gate": 1e-05, "line": divergence, "dump": "chunkwise"}
    report = {"name": "oracle img", "policy": "oracle", "compared": 1, "bitwise": 0, "failed": failed,
              "structural_mismatch": bool(structural), "pass": passed, "tensors": tensors,
              "summary": f"oracle img: 1 tensors compared, 0 bitwise identical, {failed} outside tolerance",
              "first_divergence": first, "rank_tables": []}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path.read_text()


def judged(verdict: Verdict) -> Step:
    step = Step("FLA KCP W=2,4 (fp32)")
    step.record("fla-spans W=2 oracle", None if verdict.passed else verdict.line, "reproduce: rm -rf /tmp/x")
    return step


def test_a_passing_report_is_a_passing_case(tmp_path):
    v = gatekit.read_verdict(0, probe_json(tmp_path, "pass", True), "")
    assert v == Verdict(True, "oracle img: 1 tensors compared, 0 bitwise identical, 0 outside tolerance")
    step = judged(v)
    assert (step.verdict, step.cases, step.failures) == ("pass", 1, [])


def test_a_numeric_failure_is_its_first_divergence_line(tmp_path):
    v = gatekit.read_verdict(1, probe_json(tmp_path, "numeric", False, failed=1, divergence=DIVERGENCE), "")
    assert v == Verdict(False, DIVERGENCE)
    step = judged(v)
    assert step.verdict == "FAIL" and step.failures == [f"fla-spans W=2 oracle: {DIVERGENCE}\nreproduce: rm -rf /tmp/x"]


def test_a_failure_naming_no_divergence_is_its_summary(tmp_path):
    v = gatekit.read_verdict(1, probe_json(tmp_path, "summary", False, failed=1), "")
    assert v == Verdict(False, "oracle img: 1 tensors compared, 0 bitwise identical, 1 outside tolerance")


def test_a_structural_mismatch_lists_every_mismatch_before_any_divergence(tmp_path):
    report = probe_json(tmp_path, "structural", False, failed=1, divergence=DIVERGENCE,
                        structural=(("chunkwise.rank1.safetensors", "*", MISSING), ("", "inputs", "only in REF")))
    v = gatekit.read_verdict(2, report, "")
    assert v == Verdict(False, f"structural mismatch: chunkwise.rank1.safetensors:*: {MISSING}; inputs: only in REF")
    assert judged(v).failures == [f"fla-spans W=2 oracle: {v.line}\nreproduce: rm -rf /tmp/x"]


@pytest.mark.parametrize("returncode", [1, 2, 3, 124, -9])
def test_every_nonzero_exit_fails_even_under_a_passing_report(tmp_path, returncode):
    """A reader killed or failing after it wrote a passing report: the exit code and the report disagree."""
    v = gatekit.read_verdict(returncode, probe_json(tmp_path, "pass", True), "")
    assert v == Verdict(False, f"exit {returncode} with a report that says pass: oracle img: 1 tensors compared, 0 "
                               "bitwise identical, 0 outside tolerance")


def test_exit_0_under_a_failing_report_fails(tmp_path):
    v = gatekit.read_verdict(0, probe_json(tmp_path, "numeric", False, failed=1, divergence=DIVERGENCE), "")
    assert v == Verdict(False, "exit 0 with a report that says FAIL: oracle img: 1 tensors compared, 0 bitwise "
                               "identical, 1 outside tolerance")


def test_bad_input_is_the_readers_error_line():
    error = "error: DIR 'x' holds no inputs.safetensors: pass a directory written by 'gdn-verify probe dump'"
    assert gatekit.read_verdict(3, None, error + "\n") == Verdict(False, error)
    assert gatekit.read_verdict(3, None, "") == Verdict(False, "exit 3")


def test_a_cross_mode_failing_only_on_a_deviation_ratio_is_that_ratios_line(tmp_path):
    """`probe cross-mode --json` adds `first_failure`: with no divergence against cp1, the first deviation
    ratio over its bound, which the summary (every tensor passed) would hide."""
    ratio = ("deviation chunkwise out: rel_rms 3.000e-05 vs oracle, cp1 1.000e-05, bound 2.000e-05  FAIL")
    report = json.loads(probe_json(tmp_path, "ratio", False))
    report.update(first_failure=ratio, deviation_ratios=[{"mode": "chunkwise", "tensor": "out", "pass": False,
                                                          "line": ratio}])
    assert gatekit.read_verdict(1, json.dumps(report), "") == Verdict(False, ratio)
    report.update(first_failure=DIVERGENCE)
    assert gatekit.read_verdict(1, json.dumps(report), "") == Verdict(False, DIVERGENCE)


def steps() -> list[Step]:
    note = Step("controls", 2, notes=["head_perm_back (sbhd-fp32-torch-chunk-W2): caught: first divergence: x"],
                seconds=35.5)
    return [Step("oracle", 2, seconds=1.25), Step("cp-vs-cp1", 3, ["a: first divergence: <out> & \"q\"\n  repro a",
                                                                    "b: error: x"], seconds=2.0),
            Step("chunkwise", skip="this Megatron has no linear_cp_mode", seconds=0.4), note]


def test_progress_lines_show_skips_notes_and_each_failure_with_its_commands():
    def copy(step: Step) -> None:  # each work fills its step as steps() has it
        model = next(s for s in steps() if s.name == step.name)
        step.cases, step.failures, step.notes, step.skip = model.cases, model.failures, model.notes, model.skip

    out = io.StringIO()
    ran = gatekit.run_steps([(s.name, copy) for s in steps()], out)
    assert [s.verdict for s in ran] == ["pass", "FAIL", "skip", "pass"]
    assert out.getvalue() == (
        "[1/4] oracle ... ok\n"
        "[2/4] cp-vs-cp1 ... FAIL\n"
        "    a: first divergence: <out> & \"q\"\n"
        "      repro a\n"
        "    b: error: x\n"
        "[3/4] chunkwise ... skipped\n"
        "    this Megatron has no linear_cp_mode\n"
        "[4/4] controls ... ok\n"
        "    head_perm_back (sbhd-fp32-torch-chunk-W2): caught: first divergence: x\n")


def test_the_table_and_summary_as_gdn_verify_gate_prints_them(tmp_path):
    assert gatekit.table(steps()) == (
        "step                           cases  result      time\n"
        "oracle                             2    pass     1.25s\n"
        "cp-vs-cp1                          3    FAIL     2.00s\n"
        "chunkwise                          0    skip     0.40s\n"
        "controls                           2    pass    35.50s")
    out = io.StringIO()
    rc = gatekit.finish(megatron_gate.SUITE, Namespace(quick=True, junit=str(tmp_path / "j.xml")), steps(), 0.0, out)
    assert rc == 1 and re.fullmatch(r"megatron_gate --quick: 4 steps, 1 failed, [0-9.]+ s\nFAIL\n",
                                    out.getvalue().split("35.50s\n")[1])
    total = re.search(r'time="([0-9.]+)"', (tmp_path / "j.xml").read_text())
    assert total and (tmp_path / "j.xml").read_text() == gatekit.junit(megatron_gate.SUITE, steps(), float(total[1]))


def test_junit_of_the_megatron_gate():
    assert gatekit.junit(megatron_gate.SUITE, steps(), 39.15) == (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<testsuites name="megatron gate" tests="4" failures="1" skipped="1" time="39.150">\n'
        '  <testsuite name="megatron_gate" tests="4" failures="1" skipped="1" time="39.150">\n'
        '    <testcase classname="megatron_gate" name="oracle" time="1.250"><system-out>2 cases</system-out>'
        '</testcase>\n'
        '    <testcase classname="megatron_gate" name="cp-vs-cp1" time="2.000"><failure message="2 of 3 cases failed">'
        'a: first divergence: &lt;out&gt; &amp; "q"\n  repro a\nb: error: x</failure><system-out>3 cases</system-out>'
        '</testcase>\n'
        '    <testcase classname="megatron_gate" name="chunkwise" time="0.400"><skipped message="this Megatron has no '
        'linear_cp_mode"/><system-out>0 cases</system-out></testcase>\n'
        '    <testcase classname="megatron_gate" name="controls" time="35.500"><system-out>2 cases</system-out>'
        '</testcase>\n'
        '  </testsuite>\n'
        '</testsuites>\n')


def test_junit_of_the_fla_gate():
    failing = Step("FLA KCP W=2 (fp32)", 2, [f"fla-quick W=2 oracle: {DIVERGENCE}\nreproduce: rm -rf /tmp/fla-fp32-w2"],
                   seconds=9.5)
    assert gatekit.junit(fla_gate.SUITE, [Step("FLA layer cp1 (fp32)", 1, seconds=4.25), failing], 13.75) == (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<testsuites name="gdn-verify fla_gate" tests="2" failures="1" skipped="0" time="13.750">\n'
        '  <testsuite name="fla_gate" tests="2" failures="1" skipped="0" time="13.750">\n'
        '    <testcase classname="fla_gate" name="FLA layer cp1 (fp32)" time="4.250"><system-out>1 cases</system-out>'
        '</testcase>\n'
        '    <testcase classname="fla_gate" name="FLA KCP W=2 (fp32)" time="9.500"><failure message="1 of 2 cases '
        f'failed">fla-quick W=2 oracle: {DIVERGENCE.replace(">", "&gt;")}\nreproduce: rm -rf /tmp/fla-fp32-w2'
        '</failure><system-out>2 cases</system-out></testcase>\n'
        '  </testsuite>\n'
        '</testsuites>\n')


def test_each_gates_reproduce_commands():
    geometry = ("--format thd --lengths 24,136 --hidden 32 --num-key-heads 1 --num-value-heads 3 --key-head-dim 16 "
                "--value-head-dim 32 --conv-width 4 --conv-bias --gates weak --dtype bf16 --out "
                "/tmp/fla-quick-bf16-layer-w2")
    assert fla_gate.reproduce(fla_gate.QUICK, "bf16", "layer", 2, "cross-mode") == (
        "reproduce: rm -rf /tmp/fla-quick-bf16-layer-w2 && python -m gdn_verify.dump --adapter fla --world 1 --core "
        f"layer {geometry} && python -m gdn_verify.dump --adapter fla --world 2 --core layer {geometry} && gdn-verify "
        "probe cross-mode --dir /tmp/fla-quick-bf16-layer-w2")
    dump = ("  PYTHONPATH=/m:$PYTHONPATH python -m gdn_verify.dump --adapter megatron --case sbhd --dtype fp32 --core "
            "torch-chunk --mode {} --world {} --tp 2 --out /tmp/sbhd-fp32-torch-chunk-W4-tp2")
    assert megatron_gate.reproduce(megatron_gate.CP[-1], ["cp1", "headwise"], "cross-mode", "/m") == "\n".join(
        [dump.format("cp1", 2), dump.format("headwise", 4), "  gdn-verify probe cross-mode --dir "
                                                             "/tmp/sbhd-fp32-torch-chunk-W4-tp2"])


def fake_binary(directory: Path) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gdn-verify"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_binary_is_the_option_then_gdnv_bin_then_path_then_the_repository_above_the_cwd(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "python" / "gdn_verify").mkdir(parents=True)
    built, on_path = fake_binary(repo / "build"), fake_binary(tmp_path / "bin")
    env, given = fake_binary(tmp_path / "env"), fake_binary(tmp_path / "given")
    monkeypatch.chdir(repo / "python")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("GDNV_BIN", env)
    assert gatekit.find_binary(given) == given
    assert gatekit.find_binary(None) == env
    monkeypatch.delenv("GDNV_BIN")
    assert gatekit.find_binary(None) == on_path
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gatekit.find_binary(None) == built


@pytest.mark.parametrize("where", ["--gdn-verify", "GDNV_BIN"])
def test_a_binary_named_but_missing_is_bad_input(tmp_path, monkeypatch, where):
    missing = str(tmp_path / "nothing")
    monkeypatch.setenv("GDNV_BIN", missing)
    with pytest.raises(cli.BadInput, match=f"^{where} {re.escape(missing)}: no gdn-verify binary there"):
        gatekit.find_binary(missing if where == "--gdn-verify" else None)


def test_keep_takes_a_fresh_or_empty_directory_and_keeps_it(tmp_path):
    with gatekit.scratch(str(tmp_path / "new"), "x-") as root:
        (root / "image").mkdir()
    assert (tmp_path / "new" / "image").is_dir()
    (tmp_path / "file").touch()
    for taken in (tmp_path / "new", tmp_path / "file"):
        with pytest.raises(cli.BadInput, match="is not a fresh or empty directory"):
            with gatekit.scratch(str(taken), "x-"):
                pass
    with gatekit.scratch(None, "gdnv-test-") as temporary:
        assert temporary.is_dir()
    assert not temporary.exists()


@pytest.mark.parametrize("gate", [fla_gate, megatron_gate])
@pytest.mark.parametrize("option", ["--bogus", "--gdnv"])
def test_an_unknown_option_is_one_line_exit_3(capsys, gate, option):
    assert gate.main([option, "x"]) == 3
    err = capsys.readouterr().err
    prog = f"python -m {gate.__name__}"
    assert err == f"error: unrecognized arguments: {option} x: see {prog} --help\n", err


def test_an_error_line_escapes_control_characters(capsys):
    assert cli.error("bad\nname\x1b") == 3
    assert capsys.readouterr().err == "error: bad\\nname\\x1b\n"


@pytest.mark.parametrize("reader", ["oracle", "cross-mode"])
def test_judge_reads_each_readers_json_from_the_real_binary(gdnv_bin, gdnv, tmp_path, monkeypatch, reader):
    """A C++ image, right and with a planted fault: the verdict is the one the reader's JSON carries, and its
    reason the first-divergence line the text report prints."""
    for name, fault in (("good", None), ("bad", "conv_halo_wrong_rank")):
        for mode in ("cp1", "chunkwise"):
            if fault and mode == "chunkwise":
                monkeypatch.setenv("GDNV_FAULT", fault)
            r = gdnv("probe", "dump", "--mode", mode, "--world", "inproc:2" if mode == "chunkwise" else "inproc:1",
                     "--image", name, "--stages",
                     "--case", "thd-short", "--out", tmp_path / name)
            monkeypatch.delenv("GDNV_FAULT", raising=False)
            assert r.returncode == 0, r.stderr
    assert gatekit.judge(str(gdnv_bin), reader, tmp_path / "good").passed
    bad = gatekit.judge(str(gdnv_bin), reader, tmp_path / "bad")
    text = gdnv("probe", reader, "--dir", tmp_path / "bad").stdout
    assert not bad.passed and bad.line.startswith("first divergence: stage::conv") and f"\n{bad.line}\n" in text, text
