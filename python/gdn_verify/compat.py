"""python -m gdn_verify.compat: every adapter's tests on the versions this interpreter has, one verdict each.

`./run compat` runs it in a separate virtual environment holding the newest releases of torch,
transformers, flash-linear-attention and megatron-core (docs/DESIGN.md §14), so a release that breaks an
adapter is named before users meet it:

    compat: python 3.12.1, torch 2.15.0, triton 3.9.0, transformers 5.25.0, kernels 0.19.1, ...
    hf-qwen3-next: works (17 passed)
    fla: works (28 passed)
    megatron: BROKEN (3 of 17 failed): test_megatron_adapter.py::test_gathered_shards_...[1]: AttributeError: ...

`--adapters fla` judges only those named: `./run compat` then runs the FLA adapter's tests again in
.venv-fla042, on FLA 0.4.2 (the release users pin) and its torch and triton, with the versions line of that
environment (docs/fla.md, "FLA 0.4.2"). Exit code 0 when every adapter judged works, 1 otherwise, 3 on bad input.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from gdn_verify import cli

TESTS = Path(__file__).resolve().parents[1] / "tests"
# Each adapter's tests, as globs under python/tests.
ADAPTER_TESTS = {
    "hf-qwen3-next": ("test_hf_qwen3_next*.py",),
    "fla": ("test_fla*.py", "test_kernel*.py"),
    "megatron": ("test_megatron*.py", "test_distributed*.py"),
}
DISTRIBUTIONS = ("torch", "triton", "transformers", "kernels", "flash-linear-attention", "megatron-core")


@dataclass
class Verdict:
    """What one adapter's tests did: counts and the failures with their one-line reasons."""

    passed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)  # "<test id>: <exception line>"

    @property
    def works(self) -> bool:
        return not self.failures and self.passed > 0

    def line(self, adapter: str) -> str:
        counts = f"{self.passed} passed" + (f", {self.skipped} skipped" if self.skipped else "")
        if self.works:
            return f"{adapter}: works ({counts})"
        if not self.failures:
            return f"{adapter}: BROKEN (no test ran: {counts})"
        total = self.passed + len(self.failures)
        return f"{adapter}: BROKEN ({len(self.failures)} of {total} failed): {self.failures[0]}"


class _Collector:
    """A pytest plugin keeping each test's outcome and, for a failure, its test id and exception line."""

    def __init__(self) -> None:
        self.verdict = Verdict()

    def _failed(self, report) -> None:
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = crash.message if crash else str(report.longrepr).strip().splitlines()[-1]
        self.verdict.failures.append(f"{report.nodeid.split('/')[-1]}: {reason.splitlines()[0]}")

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self._failed(report)
        elif report.skipped and report.when in ("setup", "call"):
            self.verdict.skipped += 1
        elif report.passed and report.when == "call":
            self.verdict.passed += 1

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self._failed(report)


def check(files: list[Path]) -> Verdict:
    """Runs the tests in `files` in this process; their verdict."""
    collector = _Collector()
    if files:
        pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "--tb=no", *map(str, files)],
                     plugins=[collector])
    return collector.verdict


def adapter_files(adapter: str, tests: Path = TESTS) -> list[Path]:
    return sorted({f for pattern in ADAPTER_TESTS[adapter] for f in tests.glob(pattern)})


def versions() -> str:
    found = []
    for dist in DISTRIBUTIONS:
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            found.append(f"{dist} (not installed)")
    return f"compat: python {platform.python_version()}, " + ", ".join(found)


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m gdn_verify.compat")
    parser.add_argument("--adapters", default=",".join(ADAPTER_TESTS),
                        help=f"comma-separated, of {', '.join(ADAPTER_TESTS)} (default: all)")
    try:
        adapters = parser.parse_args(argv).adapters.split(",")
        unknown = [a for a in adapters if a not in ADAPTER_TESTS]
        if unknown:
            raise cli.BadInput(f"--adapters: unknown {', '.join(unknown)}: give some of {', '.join(ADAPTER_TESTS)}")
    except cli.BadInput as e:
        return cli.error(str(e))
    verdicts = {adapter: check(adapter_files(adapter)) for adapter in adapters}
    print(versions())
    for adapter, verdict in verdicts.items():
        print(verdict.line(adapter))
    return 0 if all(v.works for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
