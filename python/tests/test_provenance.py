"""meta.json's "library" (gdn_verify.provenance, docs/DESIGN.md §14): the package a process imported, its
version, its own checkout's commit and a hash of its GDN sources; a planted copy first on the path is told
apart from the installed release, a venv inside another repository names no commit, and every adapter's
images record it (a world's from its ranks)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_verify import provenance
from gdn_verify.adapters.fla.adapter import GDN_SOURCES

PYTHON = Path(__file__).resolve().parents[1]
# A process's view of an adapter's library, printed as JSON.
LIBRARY = ("import json, sys; from gdn_verify.adapters import ADAPTERS; "
           "print(json.dumps(ADAPTERS.get(sys.argv[1]).library()))")


def library_in_subprocess(adapter: str, *first: Path) -> dict:
    """ADAPTERS.get(adapter).library() in a fresh interpreter with `first` ahead of everything on its path."""
    path = os.pathsep.join([*map(str, first), str(PYTHON), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", LIBRARY, adapter], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=path))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def installed(package: str) -> Path:
    """Where `package` is installed, found without importing it (a skip when it is not)."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:  # a dotted name whose parent is missing
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        pytest.skip(f"{package} is not installed")
    return Path(locations[0]).resolve()


def toy_package(root: Path, source: str = "x = 1\n") -> Path:
    """root/toylib: a package with a version and one GDN source file."""
    (root / "toylib" / "ops").mkdir(parents=True)
    (root / "toylib" / "__init__.py").write_text("__version__ = '1.2.3'\n")
    (root / "toylib" / "ops" / "gdn.py").write_text(source)
    return root / "toylib"


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True).stdout.strip()


def commit_all(repo: Path) -> str:
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    return git(repo, "rev-parse", "HEAD")


def test_a_planted_copy_of_fla_first_on_the_path_is_the_library_recorded(tmp_path):
    """The copy's path and its hash, not the installed one's (computed here without importing fla: this
    process's FLA must be imported under Triton's interpreter, by the tests that run it)."""
    release = installed("fla")
    copy = tmp_path / "fla"
    shutil.copytree(release, copy, ignore=shutil.ignore_patterns("__pycache__"))
    layer = copy / "layers" / "gated_deltanet.py"
    layer.write_bytes(layer.read_bytes() + b"#")
    files = provenance.sources(release.parent, GDN_SOURCES)
    found = library_in_subprocess("fla", tmp_path)
    assert Path(found["path"]) == copy.resolve() and found["files"] == len(files) > 10
    assert found["source_sha256"] == provenance.source_sha256(tmp_path, files)
    assert found["source_sha256"] != provenance.source_sha256(release.parent, files)
    assert "commit" not in found  # a copy in no git tree


def test_source_sha256_is_sha256sums_listing_of_the_sorted_files(tmp_path, monkeypatch):
    toy_package(tmp_path, "y = 2\n")
    (tmp_path / "toylib" / "a.py").write_text("a = 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = provenance.library("toylib", ("toylib/ops/*.py", "toylib/a.py", "toylib/absent/*.py"))
    listing = "".join(f"{hashlib.sha256((tmp_path / f).read_bytes()).hexdigest()}  {f}\n"
                      for f in ("toylib/a.py", "toylib/ops/gdn.py"))
    assert found == {"name": "toylib", "version": "1.2.3", "path": str((tmp_path / "toylib").resolve()),
                     "source_sha256": hashlib.sha256(listing.encode()).hexdigest(), "files": 2}
    sys.modules.pop("toylib")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_commit_is_the_librarys_own_checkout_never_a_repository_holding_a_venv(tmp_path):
    checkout = tmp_path / "checkout"
    toy_package(checkout)
    head = commit_all(checkout)
    assert provenance.checkout_commit(checkout.resolve()) == head
    outer = tmp_path / "outer"
    site = outer / ".venv" / "lib" / "site-packages"
    toy_package(site)
    commit_all(outer)
    assert provenance.checkout_commit(site.resolve()) is None
    src = tmp_path / "srclayout"
    toy_package(src / "src")
    head = commit_all(src)
    assert provenance.checkout_commit((src / "src").resolve()) == head  # transformers' src/ layout


def test_the_single_process_dumps_record_the_library_they_imported(python_dump, tmp_path):
    """hf-qwen3-next and fla --core torch (transformers and FLA as the dump process imported them)."""
    for adapter, extra, package in [("hf-qwen3-next", (), "transformers"), ("fla", ("--core", "torch"), "fla")]:
        out = tmp_path / adapter
        r = python_dump("--adapter", adapter, "--case", "thd-short", *extra, "--out", out)
        assert r.returncode == 0, r.stderr[-2000:]
        library = json.loads((out / "meta.json").read_text())["library"]
        assert library["name"] == package and Path(library["path"]) == installed(package), library
        assert library["files"] >= 1 and len(library["source_sha256"]) == 64


def test_megatrons_version_names_no_commit_of_the_repository_holding_it(python_dump, tmp_path):
    """megatron's package_info appends the HEAD of whatever git tree holds it: off (NO_VCS_VERSION); a world's
    ranks record the library they imported."""
    megatron = installed("megatron.core")
    out = tmp_path / "m"
    r = python_dump("--adapter", "megatron", "--case", "sbhd", "--core", "torch-chunk", "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "meta.json").read_text())
    assert "+" not in meta["versions"]["megatron.core"], meta["versions"]
    library = meta["library"]
    assert library["version"] == meta["versions"]["megatron.core"] and Path(library["path"]) == megatron
    assert "commit" not in library and library["files"] >= 1  # installed in a venv: no checkout of its own
    kernels = library["kernels"]  # the FLA whose Triton ops the layer ran
    assert kernels["name"] == "fla" and Path(kernels["path"]) == installed("fla") and kernels["files"] >= 1, kernels


def test_fla_sources_cover_the_layer_and_its_kernels():
    root = installed("fla").parent
    files = provenance.sources(root, GDN_SOURCES)
    for wanted in ("fla/layers/gated_deltanet.py", "fla/ops/gated_delta_rule/chunk.py", "fla/ops/cp/__init__.py"):
        assert wanted in files, files
