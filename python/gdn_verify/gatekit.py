"""What the third-party gates (fla_gate, megatron_gate) share: the step record, the progress lines and
table, the JUnit, the reproduce commands, the common options, the gdn-verify binary and a reader's
verdict. Output and JUnit follow `gdn-verify gate` (cli/gate.cpp, docs/gate.md): a line per step as it
ends, then the table, then PASS or FAIL; exit 0 when every step passes, 1 on any failure, 3 on bad
input (docs/DESIGN.md §5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from xml.sax.saxutils import escape, quoteattr

from gdn_verify import cli
from gdn_verify.exits import EXIT_FAIL, EXIT_PASS
from gdn_verify.world import RankFailed

READER_TIMEOUT = 600  # seconds one `gdn-verify probe` reader may take


@dataclass(frozen=True)
class Suite:
    """A gate's names: `name` its testsuite and classname (and the summary line's), `title` its testsuites."""

    name: str
    title: str


@dataclass(frozen=True)
class Verdict:
    """A reader's verdict; `line` says why: the first divergence, the structural mismatches, the error
    line, else the summary."""

    passed: bool
    line: str


@dataclass
class Step:
    """One row of the table: its cases, a failure per failing case (its lines: "case: why", then the
    commands that reproduce it), notes shown under its progress line, and why it was skipped."""

    name: str
    cases: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skip: str = ""
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        return "skip" if self.skip else "FAIL" if self.failures else "pass"

    def record(self, case: str, why: str | None, reproduce: str = "") -> None:
        """Counts one case: passed (`why` None) or failed, why, with the commands that reproduce it."""
        self.cases += 1
        if why is not None:
            self.failures.append(f"{case}: {why}" + (f"\n{reproduce}" if reproduce else ""))


Work = Callable[[Step], None]


def run_steps(plan: list[tuple[str, Work]], out: TextIO) -> list[Step]:
    """Runs each (name, work) in order, timing it; prints its line as `gdn-verify gate` does, whole when the
    step ends (the libraries a step imports write warnings to stderr as it runs)."""
    steps = []
    for i, (name, work) in enumerate(plan):
        step, t0 = Step(name), time.monotonic()
        work(step)
        step.seconds = time.monotonic() - t0
        steps.append(step)
        verdict = {"skip": "skipped", "FAIL": "FAIL", "pass": "ok"}[step.verdict]
        print(f"[{i + 1}/{len(plan)}] {name} ... {verdict}", file=out, flush=True)
        for line in ([step.skip] if step.skip else []) + step.notes + "\n".join(step.failures).splitlines():
            print("    " + line, file=out, flush=True)
    return steps


def table(steps: list[Step]) -> str:
    """The step table, as `gdn-verify gate` prints it."""
    rows = [f"{'step':<28}{'cases':>8}{'result':>8}{'time':>10}"]
    rows += [f"{s.name:<28}{s.cases:>8}{s.verdict:>8}{s.seconds:>9.2f}s" for s in steps]
    return "\n".join(rows)


def junit(suite: Suite, steps: list[Step], total: float) -> str:
    """One testsuite, one testcase per step, as `gdn-verify gate --junit` (cli/gate.cpp)."""
    failures, skipped = sum(bool(s.failures) for s in steps), sum(bool(s.skip) for s in steps)
    head = f'tests="{len(steps)}" failures="{failures}" skipped="{skipped}" time="{total:.3f}"'
    rows = ['<?xml version="1.0" encoding="UTF-8"?>', f"<testsuites name={quoteattr(suite.title)} {head}>",
            f"  <testsuite name={quoteattr(suite.name)} {head}>"]
    for s in steps:
        body = (f"<skipped message={quoteattr(s.skip)}/>" if s.skip else
                f'<failure message="{len(s.failures)} of {s.cases} cases failed">{escape(chr(10).join(s.failures))}'
                "</failure>" if s.failures else "")
        rows.append(f"    <testcase classname={quoteattr(suite.name)} name={quoteattr(s.name)} "
                    f'time="{s.seconds:.3f}">{body}<system-out>{s.cases} cases</system-out></testcase>')
    return "\n".join(rows + ["  </testsuite>", "</testsuites>", ""])


def finish(suite: Suite, args: argparse.Namespace, steps: list[Step], started: float, out: TextIO) -> int:
    """Prints the table and the verdict, writes --junit; the gate's exit code."""
    from gdn_verify.safetensors_file import write_atomic

    total = time.monotonic() - started
    failed = sum(bool(s.failures) for s in steps)
    print(f"\n{table(steps)}\n{suite.name}{' --quick' if args.quick else ''}: {len(steps)} steps, {failed} failed, "
          f"{total:.1f} s\n{'FAIL' if failed else 'PASS'}", file=out)
    if args.junit:
        write_atomic(Path(args.junit), junit(suite, steps, total).encode())
    return EXIT_FAIL if failed else EXIT_PASS


def reproduce(dumps: list[str], reader: str, out: str, env: str = "") -> list[str]:
    """The commands that rebuild a case's image in `out` (a `python -m gdn_verify.dump` per options string
    of `dumps`, each after `env`) and judge it with `gdn-verify probe <reader>`."""
    judge = f"gdn-verify probe {reader} --dir {out}"
    return [f"{env}python -m gdn_verify.dump {d} --out {out}" for d in dumps] + [judge]


def add_options(p: argparse.ArgumentParser, quick: str) -> None:
    """The options every gate takes; `quick` says what --quick runs."""
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--junit", default=None, metavar="FILE", help="also write the result as JUnit XML to FILE")
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="write the images into DIR (a fresh or empty directory) and keep them")
    p.add_argument("--gdn-verify", dest="binary", default=None, metavar="PATH",
                   help="the gdn-verify binary (default $GDNV_BIN, then gdn-verify on PATH, then the repository's "
                        "build/gdn-verify)")


def main(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """Parses argv and runs the gate; bad input and a failed rank are one `error:` line."""
    try:
        return run(parser.parse_args(argv))
    except cli.BadInput as e:
        return cli.error(str(e))
    except RankFailed as e:
        cli.error(str(e))
        return e.exit_code


@contextmanager
def scratch(keep: str | None, prefix: str) -> Iterator[Path]:
    """--keep DIR (fresh or empty; kept), else a temporary directory removed at the end."""
    if not keep:
        with tempfile.TemporaryDirectory(prefix=prefix) as directory:
            yield Path(directory)
        return
    root = Path(keep)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise cli.BadInput(f"--keep {keep} is not a fresh or empty directory: give a fresh directory")
    root.mkdir(parents=True, exist_ok=True)
    yield root


def find_binary(given: str | None) -> str:
    """--gdn-verify, else $GDNV_BIN, else gdn-verify on PATH, else the repository's build/gdn-verify (found
    from the current directory up, then from this source file up: an installed package has no repository)."""
    for where, path in (("--gdn-verify", given), ("GDNV_BIN", os.environ.get("GDNV_BIN"))):
        if path:
            if not _executable(Path(path)):
                raise cli.BadInput(f"{where} {path}: no gdn-verify binary there: build it (cmake --build build "
                                   "--target gdn-verify) or give its path")
            return path
    on_path = shutil.which("gdn-verify")
    if on_path:
        return on_path
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for d in (start, *start.parents):
            if (d / "python" / "gdn_verify").is_dir() and _executable(d / "build" / "gdn-verify"):
                return str(d / "build" / "gdn-verify")
    raise cli.BadInput("no gdn-verify binary: build it (cmake --build build --target gdn-verify), or pass "
                       "--gdn-verify PATH or set GDNV_BIN")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


# `probe cross-mode` writes no --json (cli/probe.cpp): its verdict is read from its exit code and text.
def judge(binary: str, reader: str, directory: Path) -> Verdict:
    """`gdn-verify probe <reader> --dir D --json FILE`, read from FILE (docs/json_format.md)."""
    with tempfile.TemporaryDirectory(prefix="gdnv-verdict-") as tmp:
        report = Path(tmp) / "report.json"
        r = subprocess.run([binary, "probe", reader, "--dir", str(directory), "--json", str(report)],
                           capture_output=True, text=True, timeout=READER_TIMEOUT)
        return read_verdict(r.returncode, report.read_text() if report.is_file() else None, r.stderr)


def read_verdict(returncode: int, report: str | None, errors: str) -> Verdict:
    """A reader's verdict from its JSON report. Without one the reader refused its input (exit 3, one
    `error:` line, nothing written) or died: a failing case naming its last line on stderr."""
    if report is None:
        lines = errors.strip().splitlines()
        return Verdict(False, lines[-1] if lines else f"exit {returncode}")
    r = json.loads(report)
    if returncode == EXIT_PASS and r["pass"]:
        return Verdict(True, r["summary"])
    if r["structural_mismatch"]:
        return Verdict(False, _structural([f"{_label(t)}: {t['structure']}" for t in r["tensors"] if "structure" in t]))
    if r.get("first_failure"):  # cross-mode: the first divergence, else the first deviation ratio over its bound
        return Verdict(False, r["first_failure"])
    return Verdict(False, r["first_divergence"]["line"] if r.get("first_divergence") else r["summary"])


def _label(tensor: dict) -> str:
    """A tensor as the text report names it: file:name, or the name alone."""
    return f"{tensor['file']}:{tensor['name']}" if tensor.get("file") else tensor["name"]


def _structural(problems: list[str]) -> str:
    return "structural mismatch: " + "; ".join(problems)
