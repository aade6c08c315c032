"""python -m gdn_verify.compat: every adapter's tests on the versions this interpreter has, one verdict each.

`./run compat` runs it in a separate virtual environment holding the newest releases of torch,
transformers, flash-linear-attention and megatron-core (docs/DESIGN.md §14), so a release that breaks an
adapter is named before users meet it:

    compat: python 3.12.1, torch 2.15.0, transformers 5.25.0, flash-linear-attention 0.6.0, megatron-core 0.19.2
    hf-qwen3-next: works (17 passed)
    fla: BROKEN (1 of 12 failed): test_fla_adapter.py::test_x: AttributeError: 'Func' object has no attribute ...

Exit code 0 when every adapter works, 1 otherwise.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

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


def main() -> int:
    verdicts = {adapter: check(adapter_files(adapter)) for adapter in ADAPTER_TESTS}
    print(versions())
    for adapter, verdict in verdicts.items():
        print(verdict.line(adapter))
    return 0 if all(v.works for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
