"""What every `python -m gdn_verify.<command>` shares on its command line: bad input is one line
`error: ...` on stderr naming the fix, exit 3, as the C++ CLI (docs/DESIGN.md §5)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from gdn_verify.exits import EXIT_BAD_INPUT


class BadInput(Exception):
    """A command-line mistake: printed as one `error:` line, exit 3."""


class Parser(argparse.ArgumentParser):
    """argparse whose errors (an unknown option, a missing value) are BadInput, not argparse's exit 2."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{message}: see {self.prog} --help")


def error(message: str) -> int:
    """One line on stderr, control characters escaped (messages quote paths and metadata); exit 3."""
    print("error: " + "".join(c if c.isprintable() else repr(c)[1:-1] for c in message), file=sys.stderr)
    return EXIT_BAD_INPUT
