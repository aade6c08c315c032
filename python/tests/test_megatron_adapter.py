"""The megatron adapter against Megatron-Core's own sharded-checkpoint code.

The TP layout is checked against the code that defines it in Megatron's checkpoints: each TP rank's
shard goes through `GatedDeltaNet.sharded_state_dict`'s own splitting (`_split_tensor_factory` for the
sectioned tensors, `ShardedTensor` rank offsets for the rest), and the global tensors that Megatron
would save must equal `gather_tp` of the shards.
"""

from __future__ import annotations

import pytest
import torch

from gdn_verify import names
from gdn_verify.adapters import megatron
from gdn_verify.adapters.megatron.params import MegatronAdapterError
from gdn_verify.names import Geometry

pytest.importorskip("megatron.core.ssm.gated_delta_net")
from megatron.core.dist_checkpointing import ShardedTensor  # noqa: E402

# GatedDeltaNet.sharded_state_dict splits with this (megatron.core.ssm.utils since 0.19)
from megatron.core.ssm.utils import _split_tensor_factory  # noqa: E402

GEOMETRY = Geometry(hidden_size=12, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=3,
                    linear_value_head_dim=2, linear_conv_kernel_dim=4, conv_bias=True)


def full_params(geometry: Geometry) -> dict[str, torch.Tensor]:
    """Distinct values everywhere (a ramp per tensor), so any misplaced element shows."""
    out = {}
    for i, name in enumerate(names.param_names(geometry)):
        shape = names.param_shape(geometry, name)
        n = 1
        for d in shape:
            n *= d
        out[name] = (torch.arange(n, dtype=torch.float64) + 1000 * i).reshape(shape)
    return out


def megatron_sharded(shard: dict[str, torch.Tensor], rank: int, tp: int, g: Geometry) -> list[ShardedTensor]:
    """Rank `rank`'s shard as Megatron's GatedDeltaNet.sharded_state_dict declares it to the checkpoint."""
    qk, v, hv = g.qk_dim // tp, g.v_dim // tp, g.Hv // tp
    in_proj = ShardedTensor.from_rank_offsets(names.IN_PROJ, shard[names.IN_PROJ], (0, rank, tp), replica_id=0)
    out = _split_tensor_factory(in_proj, [qk, qk, v, v, hv, hv],
                                          ["query", "key", "value", "z", "beta", "alpha"], 0).build()
    for name in (names.CONV_WEIGHT, names.CONV_BIAS):
        t = ShardedTensor.from_rank_offsets(name, shard[name], (0, rank, tp), replica_id=0)
        out += _split_tensor_factory(t, [qk, qk, v], ["query", "key", "value"], 0).build()
    axes = {names.A_LOG: 0, names.DT_BIAS: 0, names.OUT_PROJ: 1}  # tensor_parallel_layers_axis_map, row-parallel
    for name, axis in axes.items():
        out.append(ShardedTensor.from_rank_offsets(name, shard[name], (axis, rank, tp), replica_id=0))
    return out


def assemble(pieces: list[ShardedTensor]) -> dict[str, torch.Tensor]:
    """The global tensors a checkpoint holds: every piece written at its global offset."""
    glob: dict[str, torch.Tensor] = {}
    for p in pieces:
        t = glob.setdefault(p.key, torch.full(p.global_shape, float("nan"), dtype=p.data.dtype))
        t[tuple(slice(o, o + s) for o, s in zip(p.global_offset, p.local_shape))] = p.data
    return glob


def checkpoint_layout(full: dict[str, torch.Tensor], glob: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Megatron's checkpoint tensors regrouped into the image's full tensors, sections in Megatron's order."""
    out = {}
    for name, sections in ((names.IN_PROJ, ["query", "key", "value", "z", "beta", "alpha"]),
                           (names.CONV_WEIGHT, ["query", "key", "value"]),
                           (names.CONV_BIAS, ["query", "key", "value"])):
        out[name] = torch.cat([glob[f"{name}.{s}"] for s in sections], dim=0)
    for name in (names.A_LOG, names.DT_BIAS, names.OUT_PROJ):
        out[name] = glob[name]
    return out


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gathered_shards_are_the_tensors_megatrons_checkpoint_holds(tp: int) -> None:
    full = full_params(GEOMETRY)
    shards = megatron.shard_tp(full, GEOMETRY, tp)
    pieces = [p for r, s in enumerate(shards) for p in megatron_sharded(s, r, tp, GEOMETRY)]
    expected = checkpoint_layout(full, assemble(pieces))
    gathered = megatron.gather_tp(shards, GEOMETRY)
    for name, t in expected.items():
        assert torch.equal(gathered[name], t), name
        assert torch.equal(full[name], t), name


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_shard_and_gather_are_lossless_both_ways(tp: int) -> None:
    full = full_params(GEOMETRY)
    shards = megatron.shard_tp(full, GEOMETRY, tp)
    assert all(torch.equal(a, b) for a, b in zip(megatron.gather_tp(shards, GEOMETRY).values(), full.values()))
    again = megatron.shard_tp(megatron.gather_tp(shards, GEOMETRY), GEOMETRY, tp)
    assert all(torch.equal(s[n], a[n]) for s, a in zip(shards, again) for n in s)


def test_transformer_engine_extra_state_is_left_out() -> None:
    state = dict(full_params(GEOMETRY), **{"in_proj._extra_state": torch.zeros(0)})
    assert set(megatron.MegatronAdapter().to_megatron(state, GEOMETRY)) == set(names.param_names(GEOMETRY))


def test_unknown_parameter_name_is_refused_with_the_name() -> None:
    state = dict(full_params(GEOMETRY), **{"in_proj.bias": torch.zeros(3)})
    with pytest.raises(MegatronAdapterError, match=r"unknown \['in_proj.bias'\]"):
        megatron.MegatronAdapter().to_megatron(state, GEOMETRY)


def test_replicated_norm_weight_differing_between_ranks_is_refused() -> None:
    shards = megatron.shard_tp(full_params(GEOMETRY), GEOMETRY, 2)
    shards[1][names.OUT_NORM] = shards[1][names.OUT_NORM] + 1
    with pytest.raises(MegatronAdapterError, match="'out_norm.weight' differs between TP ranks"):
        megatron.gather_tp(shards, GEOMETRY)


def test_tp_size_not_dividing_the_heads_is_refused() -> None:
    with pytest.raises(MegatronAdapterError, match="TP size 3 does not divide Hk = 4"):
        megatron.shard_tp(full_params(GEOMETRY), GEOMETRY, 3)
