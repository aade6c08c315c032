"""Adapters between a library's GatedDeltaNet and Megatron's parameter names (docs/DESIGN.md §1.3).

Each adapter is a class implementing `base.Adapter` (the contract `runner`, and through it
`python -m gdn_verify.dump`, calls), registered in ADAPTERS under its --adapter name. Its module
imports without its library, so the registry, the dump's option checks and the conformance test
(python/tests/test_adapters.py) need none;
`ADAPTERS.load(name)` refuses with the pip package to install when the library is missing.
"""

from __future__ import annotations

import os

# Megatron's package_info appends `git rev-parse --short HEAD`, run beside the installed package, to its
# __version__: the commit of whatever repository holds the environment (ours, for a venv inside it). Off here,
# before any adapter imports megatron, and so on every rank (a World inherits this environment); meta.json's
# "library" records the commit of Megatron's own checkout (gdn_verify.provenance, docs/DESIGN.md §14).
os.environ["NO_VCS_VERSION"] = "1"

from gdn_verify.adapters.base import (
                                     DECAY_CLASSES,
                                     MODES,
                                     Adapter,
                                     AdapterError,
                                     DecayClass,
                                     ImageRun,
                                     Request,
                                     Run,
                                     WorldPlan,
)
from gdn_verify.adapters.fla import FlaAdapter
from gdn_verify.adapters.hf_qwen3_next import HfQwen3NextAdapter
from gdn_verify.adapters.megatron import MegatronAdapter
from gdn_verify.adapters.registry import Registry

ADAPTERS = Registry([HfQwen3NextAdapter, FlaAdapter, MegatronAdapter])

__all__ = ["ADAPTERS", "DECAY_CLASSES", "MODES", "Adapter", "AdapterError", "DecayClass", "ImageRun", "Registry",
           "Request", "Run", "WorldPlan"]
