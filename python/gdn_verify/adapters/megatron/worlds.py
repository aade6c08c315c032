"""A world's dump: every rank of a gdn_verify.world.World runs the mode, and the image is written once."""

from __future__ import annotations

from collections.abc import Mapping

from gdn_verify.adapters.base import AdapterError
from gdn_verify.adapters.megatron.adapter import MegatronAdapter
from gdn_verify.adapters.megatron.capability import NO_LINEAR_CP_MODE, has_linear_cp_mode, import_from
from gdn_verify.adapters.megatron.groups import check_world, initialize
from gdn_verify.adapters.megatron.layer import DECAY_CLASS, PATH_NOTE, path
from gdn_verify.adapters.megatron.ranks import rank_run
from gdn_verify.cases import Case

# The environment of every rank: FLA's Triton kernels under Triton's interpreter.
RANK_ENV = {"TRITON_INTERPRET": "1"}


def rank_dump(rank, case: Case, mode: str, tp: int, core: str, stages: bool, megatron_path: str | None = None):
    """One rank's part of a world's dump (`gdn_verify.world`): Megatron's groups, the module, rank_run."""
    import_from(megatron_path)
    initialize(tp, rank.world // tp)
    cp_mode = None if mode == "cp1" or not has_linear_cp_mode() else mode
    adapter = MegatronAdapter()
    module = adapter.build_module(case.geometry, case.torch_dtype, core=core, cp_mode=cp_mode)
    adapter.load_megatron_params(module, case.params)
    return rank_run(module, case, mode, stages), path(module)


def dump_world(world, directory, case: Case, image: str, backend: str, mode: str, tp: int, core: str,
               stages: bool = True, extra_meta: Mapping | None = None, megatron_path: str | None = None) -> str:
    """Runs the mode on every rank of `world` (a gdn_verify.world.World of TP x CP ranks) and writes the
    image once; the path that ran. Chunkwise needs linear_cp_mode (AdapterError naming which Megatron has
    it); with linear_cp_mode, headwise is linear_cp_mode = headwise. `megatron_path`: a checkout the ranks
    import Megatron from (else whatever `import megatron` finds)."""
    from gdn_verify import images

    check_world(mode, world.size, tp, core)
    if mode == "chunkwise" and not has_linear_cp_mode():
        raise AdapterError(f"megatron: --mode chunkwise {NO_LINEAR_CP_MODE}")
    answers = world.run(rank_dump, case, mode, tp, core, stages, megatron_path)
    dumps = [d for d, _ in answers if d is not None]
    ran = answers[0][1]
    # "adapter" marks a third-party image: probe cross-mode judges its CP relative to its own cp1
    meta = dict(extra_meta or {}, adapter="megatron", path=ran, decay_class=DECAY_CLASS, tp=tp,
                notes={"megatron_path": PATH_NOTE[ran]})
    images.write_image(directory, case, image, backend, dumps, transport="gloo", extra_meta=meta)
    return ran
