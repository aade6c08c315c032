"""Which library computed an image (docs/DESIGN.md §14), for meta.json's "library": a version alone cannot tell
a user's checkout, or a planted copy first on sys.path, from the installed release.

    library("fla", ("fla/layers/gated_deltanet.py", "fla/ops/gated_delta_rule/**/*.py"))
    -> {"name": "fla", "version": "0.6.0", "path": ".../site-packages/fla", "source_sha256": "1a2b...",
        "files": 14}  (+ "commit" when the package sits in its own git checkout)

It must run in the process that imported the library (for a world, on the ranks): `path` is the package
this process's import system found. `source_sha256` is what `sha256sum` gives for the GDN source files,
listed relative to the directory holding the top-level package, sorted: `cd ROOT && sha256sum FILES... |
sha256sum`, so anyone can recompute it (docs/json_format.md).
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

GIT_TIMEOUT = 10.0  # seconds; git on a local tree answers at once


def library(import_name: str, gdn_files: Sequence[str]) -> dict:
    """`import_name` as this process imports it: name, version, the imported package's directory, the commit
    of its own checkout (left out otherwise), and the sha256 of the files `gdn_files` (globs relative to the
    directory holding the top-level package, e.g. "fla/ops/cp/*.py") match, and how many they match."""
    module = importlib.import_module(import_name)
    package = (Path(module.__file__).parent if module.__file__ else Path(next(iter(module.__path__)))).resolve()
    root = package.parents[import_name.count(".")]  # holds the top-level package (site-packages, a checkout)
    files = sources(root, gdn_files)
    found = {"name": import_name, "version": str(getattr(module, "__version__", "unknown")), "path": str(package),
             "source_sha256": source_sha256(root, files), "files": len(files)}
    commit = checkout_commit(root)
    if commit:
        found["commit"] = commit
    return found


def sources(root: Path, globs: Sequence[str]) -> list[str]:
    """The files under `root` the globs match, as sorted relative POSIX paths (a glob matching nothing, e.g. a
    file another release of the library does not have, adds nothing)."""
    return sorted({p.relative_to(root).as_posix() for g in globs for p in root.glob(g) if p.is_file()})


def source_sha256(root: Path, files: Sequence[str]) -> str:
    """sha256 of `sha256sum`'s listing of `files` (relative to `root`, in this order): "<hex>  <path>\\n" each."""
    listing = "".join(f"{hashlib.sha256((root / f).read_bytes()).hexdigest()}  {f}\n" for f in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def checkout_commit(root: Path) -> str | None:
    """HEAD of the git tree holding `root` when that tree is the library's own checkout: its top is `root`
    (the package at the top, Megatron-LM's and FLA's layout) or root's parent for a `src/` layout
    (transformers'). A parent repository that merely holds a virtual environment names its own commit, not
    the library's: None, as for no git at all."""
    top = git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() not in {root, *([root.parent] if root.name == "src" else [])}:
        return None
    return git(root, "rev-parse", "HEAD")


def git(where: Path, *args: str) -> str | None:
    """git's one-line answer in `where`, None when git is missing or refuses (not a repository)."""
    try:
        done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None
