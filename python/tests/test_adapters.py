"""Every registered adapter class against the contract of gdn_verify.adapters.base.Adapter, with no adapter's
library needed: the classes are checked, never instantiated on a module, so the test also runs (and is
run, below) where transformers, flash-linear-attention and megatron-core are not installed."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_verify import adapters
from gdn_verify.adapters import DECAY_CLASSES, MODES, Adapter, AdapterError

CLASSES = adapters.ADAPTERS.classes()
IDS = [cls.name for cls in CLASSES]
# The calls gdn_verify.adapters.runner makes, each with the base class's parameters.
CONTRACT = ["prepare", "build_module", "from_megatron", "to_megatron", "load_megatron_params", "run", "run_here",
            "plan", "check_world", "run_world"]
# What an adapter that runs on several processes (`world_run`) must provide itself.
WORLD_CONTRACT = ["plan", "check_world", "run_world"]
# The adapters' libraries (top-level packages and the modules the classes name).
LIBRARIES = ["transformers", "fla", "megatron", "megatron.core"]


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_every_registered_class_implements_every_contract_method(cls):
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    assert not missing, f"adapter {cls.name} ({cls.__module__}) lacks {', '.join(missing)}"
    assert isinstance(cls(), Adapter)


@pytest.mark.parametrize("method", CONTRACT)
@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_every_contract_method_takes_the_base_parameters_in_order(cls, method):
    """One signature style: the base's parameters, names, kinds and defaults alike, first and in order (their
    types mypy checks); an adapter's own extras only keyword-only with a default (megatron's cp_mode)."""
    base = list(inspect.signature(getattr(Adapter, method)).parameters.values())
    own = list(inspect.signature(getattr(cls, method)).parameters.values())
    shape = [[(p.name, p.kind, p.default) for p in ps] for ps in (base, own[:len(base)])]
    assert shape[1] == shape[0], f"{cls.name}.{method}{inspect.signature(getattr(cls, method))}"
    extras = own[len(base):]
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extras), \
        f"{cls.name}.{method}: extra parameters {[p.name for p in extras]} must be keyword-only with defaults"


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_every_class_declares_its_name_package_cores_decay_classes_and_modes(cls):
    assert adapters.ADAPTERS.get(cls.name) is cls
    assert cls.package and cls.import_name
    assert list(cls.cores), f"{cls.name}: no core-op form"
    assert list(cls.decay_classes) == list(cls.cores), f"{cls.name}: one decay class per core-op form"
    assert set(cls.decay_classes.values()) <= set(DECAY_CLASSES), cls.decay_classes
    assert cls.modes[0] == "cp1" and set(cls.modes) <= set(MODES), cls.modes
    assert cls.core(None) == next(iter(cls.cores))


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_every_class_declares_its_gdn_sources_inside_its_package(cls):
    """meta.json's "library" hashes them (gdn_verify.provenance): globs relative to the directory holding the
    top-level package, so each names a file of that package."""
    top = cls.import_name.split(".")[0]
    assert cls.gdn_sources and all(g.startswith(f"{top}/") for g in cls.gdn_sources), cls.gdn_sources


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_class_runs_on_several_processes_exactly_when_it_declares_so(cls):
    """`world_run` says what the run on gloo ranks is; the class then plans, checks and runs it, else the
    base's one-process plan stands (python -m gdn_verify.dump --world names only the adapters that have one)."""
    own = [m for m in WORLD_CONTRACT if inspect.getattr_static(cls, m) is not inspect.getattr_static(Adapter, m)]
    assert own == (WORLD_CONTRACT if cls.world_run else []), f"{cls.name}: world_run {cls.world_run!r}, overrides {own}"
    assert set(cls.modes) - {"cp1"} == set() or cls.world_run, f"{cls.name}: CP modes {cls.modes} without a world run"


def test_the_registry_refuses_an_unknown_name_and_a_second_class_of_one_name():
    with pytest.raises(AdapterError, match="unknown --adapter 'jax': use hf-qwen3-next, fla, megatron"):
        adapters.ADAPTERS.get("jax")
    with pytest.raises(ValueError, match="adapter name 'fla' is registered twice"):
        adapters.Registry([CLASSES[1], CLASSES[1]])


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_an_unknown_core_is_refused_naming_the_forms(cls):
    with pytest.raises(AdapterError, match=f"unknown --core 'fused' for {cls.name}: use {' or '.join(cls.cores)}"):
        cls.core("fused")


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_missing_library_is_refused_naming_the_pip_package(monkeypatch, cls):
    for name in LIBRARIES:
        monkeypatch.setitem(sys.modules, name, None)  # None: not importable
    assert not cls.is_available()
    with pytest.raises(AdapterError, match=f"adapter '{cls.name}' needs {cls.package} .*: pip install {cls.package}$"):
        adapters.ADAPTERS.load(cls.name)


def test_this_file_passes_with_no_adapter_library_importable():
    """The tests above in a fresh interpreter in which none of the libraries can be imported."""
    blocked = f"import sys; sys.modules.update(dict.fromkeys({LIBRARIES!r}))"
    run = (f"{blocked}; import pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {__file__!r}, "
           "'-k', 'not no_adapter_library']))")
    python = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=python + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
