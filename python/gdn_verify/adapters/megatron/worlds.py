"""A world's run: every rank of a gdn_verify.world.World runs the mode, the parent gathers the image."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gdn_verify.adapters.base import ImageRun, WorldPlan
from gdn_verify.adapters.megatron.capability import import_from, linear_cp_mode_for
from gdn_verify.adapters.megatron.groups import initialize
from gdn_verify.adapters.megatron.layer import DECAY_CLASS, PATH_NOTE, path
from gdn_verify.adapters.megatron.ranks import rank_run
from gdn_verify.cases import Case
from gdn_verify.world import Rank, World

if TYPE_CHECKING:  # the adapter module imports this one
    from gdn_verify.adapters.megatron.adapter import MegatronAdapter

# The environment of every rank: FLA's Triton kernels under Triton's interpreter.
RANK_ENV = {"TRITON_INTERPRET": "1"}


def rank_dump(rank: Rank, adapter: MegatronAdapter, case: Case, plan: WorldPlan):
    """One rank's part (`gdn_verify.world`): Megatron's groups, the module, rank_run; the path that ran and the
    Megatron this rank imported (meta.json's "library")."""
    import_from(plan.source)
    initialize(plan.tp, rank.world // plan.tp)
    cp_mode = linear_cp_mode_for(plan.mode)
    module = adapter.build_module(case.geometry, case.torch_dtype, core=plan.core, cp_mode=cp_mode)
    adapter.load_megatron_params(module, case.params)
    return rank_run(module, case, plan.mode, plan.stages), path(module), adapter.library()


def run(world: World, adapter: MegatronAdapter, case: Case, plan: WorldPlan) -> ImageRun:
    """The mode on every rank of `world` (TP x CP ranks); with linear_cp_mode, headwise is linear_cp_mode =
    headwise. The image for the caller to write."""
    answers = world.run(rank_dump, adapter, case, plan)
    _, ran, library = answers[0]
    # the Megatron the ranks imported (this process may have imported none)
    versions = {**adapter.versions(), adapter.import_name: library["version"]}
    # "adapter" marks a third-party image: probe cross-mode judges its CP relative to its own cp1
    meta = {"adapter": adapter.name, "device": "cpu", "versions": versions, "library": library, "path": ran,
            "decay_class": DECAY_CLASS, "tp": plan.tp, "notes": {"megatron_path": PATH_NOTE[ran]}}
    label = (f"megatron ({ran} path, {plan.mode} on {plan.size} gloo process{'es' if plan.size > 1 else ''}: "
             f"TP {plan.tp} x CP {plan.size // plan.tp})")
    return ImageRun([d for d, *_ in answers if d is not None], "gloo", meta, label)
