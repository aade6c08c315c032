"""What a world may run, checked in the parent before any rank computes (docs/megatron.md, "Whose rule"):
the rules Megatron enforces only inside its forward, restated here so a refusal is one line naming the
rule and the flag, and Megatron's own configuration checks, run on the config the ranks will build."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gdn_verify.adapters.base import AdapterError, WorldPlan
from gdn_verify.adapters.megatron.capability import linear_cp_mode_for, quietly
from gdn_verify.adapters.megatron.layer import DETERMINISTIC, config
from gdn_verify.cases import Case


@dataclass(frozen=True)
class Rule:
    """One refusal: its name, when it applies, and the line naming Megatron's rule and the flag to change."""

    name: str
    breaks: Callable[[Case, WorldPlan], bool]
    message: str


def _cp(plan: WorldPlan) -> int:
    return plan.size // plan.tp


def _odd_length(case: Case, plan: WorldPlan) -> bool:
    return _cp(plan) > 1 and any((e - b) % (2 * _cp(plan)) for b, e in case.sequences())


RULES = (
    Rule("thd-deterministic", lambda case, plan: case.cu_seqlens is not None and plan.core == DETERMINISTIC,
         "Megatron's forward asserts 'Packed sequence does not support deterministic mode': a THD case needs "
         "--core fla-triton"),
    Rule("chunkwise-deterministic", lambda case, plan: plan.mode == "chunkwise" and plan.core == DETERMINISTIC,
         "chunkwise CP passes FLA's cp_context, which Megatron's torch_chunk_gated_delta_rule (deterministic_mode) "
         "asserts it never gets: --mode chunkwise needs --core fla-triton"),
    Rule("chunkwise-sbhd-batch", lambda case, plan: plan.mode == "chunkwise" and case.cu_seqlens is None
         and case.spec.batch > 1,
         "Megatron's chunkwise CP with SBHD input requires micro_batch_size == 1 (FLA's cp_context takes one "
         "sequence): use batch 1 or a THD case"),
    Rule("zigzag-lengths", _odd_length,
         "Megatron's zigzag splits every sequence into 2 CP chunks: every length (SBHD: S) must be a multiple of "
         "2 x world / tp"),
)


def check(case: Case, plan: WorldPlan) -> None:
    """Every rule, then Megatron's own configuration checks; AdapterError with the first refusal."""
    for rule in RULES:
        if rule.breaks(case, plan):
            raise AdapterError(f"megatron: {rule.name}: {rule.message}")
    check_megatron_config(case, plan)


def check_megatron_config(case: Case, plan: WorldPlan) -> None:
    """Builds the TransformerConfig the ranks will build (GDN variant, TP, CP, linear_cp_mode): Megatron's
    __post_init__ asserts its GDN rules (head divisibility per mode, linear_cp_mode's values)."""
    cp_mode = linear_cp_mode_for(plan.mode)
    try:
        with quietly():
            config(case.geometry, case.torch_dtype, plan.core == DETERMINISTIC, cp_mode, plan.tp, _cp(plan))
    except (AssertionError, ValueError) as e:
        raise AdapterError(f"megatron: Megatron's configuration check refuses --mode {plan.mode} at TP {plan.tp} x CP "
                           f"{_cp(plan)}: {' '.join(str(e).split())}") from e
