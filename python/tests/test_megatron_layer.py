"""Megatron-Core's real GatedDeltaNet on a CPU over gloo ranks (gdn_verify/adapters/megatron/): its
images judged by `gdn-verify probe oracle` and `probe cross-mode`, at CP 1, 2, 4, TP 2 and TP 2 x CP 2, THD
and SBHD, fp32 and bf16; Megatron's own zigzag and all-to-all layouts over a real CP group; its state
dicts across CP; the combinations it refuses. One world of processes per size, reused by every test.
"""

from __future__ import annotations

import shutil

import pytest
import torch

pytest.importorskip("megatron.core.ssm.gated_delta_net")
from gdn_verify.adapters import AdapterError, Request, megatron, runner  # noqa: E402
from gdn_verify.adapters.megatron.rows import packed_seq_params  # noqa: E402
from gdn_verify.cases import CASES, CaseSpec, make_case, make_case_from_geometry  # noqa: E402
from gdn_verify.megatron_gate import Case  # noqa: E402

MEGATRON = megatron.MegatronAdapter()

@pytest.fixture(scope="module")
def worlds(megatron_gate):
    """worlds(W): a started World of W ranks, the session's gate's (conftest.megatron_gate)."""
    return megatron_gate.world


@pytest.fixture(scope="module")
def cp1(megatron_gate, tmp_path_factory):
    """cp1(directory, case, dtype, core, tp): Megatron's cp1 image of the case copied into directory (the
    session's gate computes each once)."""

    def copy(directory, case_name, dtype, core="fla-triton", tp=1):
        fresh = tmp_path_factory.mktemp("cp1") / "image"
        megatron_gate.dump(Case(case_name, dtype, core, tp=tp), "cp1", fresh)
        shutil.copytree(fresh, directory, dirs_exist_ok=True)

    return copy


def dump(worlds, directory, case_name, dtype, mode, world, tp=1, core="fla-triton"):
    case = make_case(case_name, 0, dtype)
    plan = MEGATRON.plan(Request(core=core, mode=mode, world=world, tp=tp))
    runner.dump_in(worlds(world), MEGATRON, case, plan, directory, "megatron")
    return directory


def judge(gdnv, what: str, directory, *options: str) -> str:
    r = gdnv("probe", what, "--dir", directory, *options)
    return r.stdout


@pytest.mark.parametrize("case,dtype,core", [("thd-gva", "fp32", "fla-triton"), ("sbhd", "fp32", "torch-chunk"),
                                             ("sbhd", "bf16", "fla-triton")])
def test_headwise_cp2_reproduces_cp1_and_both_meet_the_oracle(gdnv, worlds, cp1, tmp_path, case, dtype, core):
    cp1(tmp_path, case, dtype, core)
    dump(worlds, tmp_path, case, dtype, "headwise", 2, core=core)
    exact = judge(gdnv, "cross-mode", tmp_path, "--policy", "bitwise")
    for t in ("out", "grad_hidden", "stage::core", "stage_grad::conv"):  # the all-to-all moves, never adds
        assert f"headwise vs cp1:{t}: pass, bitwise yes" in exact, exact[-3000:]
    # bf16 weight gradients are bf16 GEMMs per rank: beyond the elementwise rule, judged by their deviation
    cross = judge(gdnv, "cross-mode", tmp_path)
    assert "\nPASS\n" in cross, cross[-3000:]
    assert ("band only grad::in_proj.weight" in cross) == (dtype == "bf16"), cross[-3000:]
    oracle = gdnv("probe", "oracle", "--dir", tmp_path)
    assert "65 tensors compared" in oracle.stdout  # 29 per mode, 2 modes, rank 1's 7 grads vs rank 0's
    assert "decay class (docs/DESIGN.md §4): declared cumsum-decay" in oracle.stdout
    assert oracle.returncode == 0 and "meets cumsum-decay gates: yes" in oracle.stdout, oracle.stdout[-3000:]


def test_tp2_and_tp2_x_cp2_meet_the_oracle_and_headwise_reproduces_tp2_cp1(gdnv, worlds, cp1, tmp_path):
    cp1(tmp_path, "sbhd", "fp32", "torch-chunk", tp=2)
    dump(worlds, tmp_path, "sbhd", "fp32", "headwise", 4, tp=2, core="torch-chunk")
    oracle = gdnv("probe", "oracle", "--dir", tmp_path)
    assert "65 tensors compared" in oracle.stdout and oracle.returncode == 0, oracle.stdout[-3000:]
    cross = judge(gdnv, "cross-mode", tmp_path)
    assert "0 outside tolerance" in cross and "headwise vs cp1:out: pass, bitwise yes" in cross, cross[-3000:]


def test_headwise_cp4_on_unequal_packed_sequences_reproduces_cp1(gdnv, worlds, cp1, tmp_path):
    cp1(tmp_path, "thd-gva", "fp32")
    dump(worlds, tmp_path, "thd-gva", "fp32", "headwise", 4)
    cross = judge(gdnv, "cross-mode", tmp_path)
    assert "0 outside tolerance" in cross and "headwise vs cp1:out: pass, bitwise yes" in cross, cross[-3000:]


def a2a_round_trip(rank, case):
    """Token ids through Megatron's own all-to-alls on this CP group: zigzag shard (cp_rows) -> the
    sequence-complete layout GDN's mixer sees -> back; (what the mixer saw, what came back, the shard)."""
    from megatron.core import parallel_state
    from megatron.core.ssm.gated_delta_net.common import _build_thd_cp_a2a_perm, tensor_a2a_cp2hp, tensor_a2a_hp2cp

    megatron.initialize(1, rank.world)
    group = parallel_state.get_context_parallel_group()
    rows = megatron.cp_rows(case)
    ids = torch.tensor(rows, dtype=torch.float64).reshape(-1, 1, 1).expand(-1, 1, rank.world).contiguous()
    thd = case.cu_seqlens is not None
    mixed = tensor_a2a_cp2hp(ids, seq_dim=0, head_dim=-1, cp_group=group, undo_attention_load_balancing=not thd)
    if thd:
        idx, inv = _build_thd_cp_a2a_perm(torch.tensor(case.cu_seqlens), rank.world, mixed.shape[0])
        mixed = mixed.index_select(0, idx)
        back = tensor_a2a_hp2cp(mixed.index_select(0, inv), seq_dim=0, head_dim=-1, cp_group=group,
                                redo_attention_load_balancing=False)
    else:
        back = tensor_a2a_hp2cp(mixed, seq_dim=0, head_dim=-1, cp_group=group)
    return mixed[:, 0, 0].long().tolist(), back[:, 0, 0].long().tolist(), rows


@pytest.mark.parametrize("case_name,world", [("thd-gva", 2), ("thd-gva", 4), ("sbhd", 2), ("sbhd", 4)])
def test_zigzag_to_sequence_order_and_back_is_token_exact_over_a_real_cp_group(worlds, case_name, world):
    case = make_case(case_name, 0, "fp32")
    for mixed, back, rows in worlds(world).run(a2a_round_trip, case):
        assert mixed == list(range(case.hidden_states.shape[0]))  # every token, natural order
        assert back == rows  # the rank's own zigzag shard again


def state_dict_layout(rank, case, tp):
    """Keys and shapes of the module's state_dict, and its sharded_state_dict's keys, local and global
    shapes and offsets, under Megatron's groups of this world."""
    megatron.initialize(tp, rank.world // tp)
    module = MEGATRON.build_module(case.geometry, case.torch_dtype)
    plain = {k: tuple(v.shape) if v is not None else None for k, v in module.state_dict().items()}
    sharded = {}
    for key, item in module.sharded_state_dict().items():
        for t in getattr(item, "build", lambda: [item])():
            sharded[(key, t.key)] = (type(t).__name__, tuple(getattr(t, "local_shape", ())), tuple(t.global_shape),
                                     tuple(t.global_offset))
    return plain, sharded


def test_state_dict_and_sharded_state_dict_are_the_same_at_cp1_and_headwise(worlds):
    case = make_case("sbhd", 0, "fp32")
    cp1 = worlds(1).run(state_dict_layout, case, 1)[0]
    assert all(layout == cp1 for layout in worlds(2).run(state_dict_layout, case, 1))
    assert cp1[0]["in_proj.weight"] == (case.geometry.in_proj_dim, case.geometry.hidden_size)


def test_chunkwise_is_refused_naming_the_megatron_that_has_linear_cp_mode(worlds, tmp_path):
    if megatron.has_linear_cp_mode():
        pytest.skip("this Megatron has linear_cp_mode: chunkwise runs")
    with pytest.raises(AdapterError, match="needs a Megatron-Core with TransformerConfig.linear_cp_mode"):
        dump(worlds, tmp_path, "thd-gva", "fp32", "chunkwise", 2)
    assert not list(tmp_path.iterdir())  # nothing written


def megatron_refusal(rank, case, core):
    """Megatron's own error on this case (its layer run directly), or None."""
    megatron.initialize(1, rank.world)
    module = MEGATRON.build_module(case.geometry, case.torch_dtype, core=core)
    n = case.hidden_states.shape[0] // rank.world
    try:
        module(torch.zeros(n, 1, case.geometry.hidden_size), attention_mask=None,
               packed_seq_params=packed_seq_params(case))
    except (AssertionError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def test_megatron_refuses_packed_sequences_in_deterministic_mode(worlds):
    refusal = worlds(1).run(megatron_refusal, make_case("thd-gva", 0, "fp32"), "torch-chunk")[0]
    assert refusal == "AssertionError: Packed sequence does not support deterministic mode."


def test_megatron_refuses_packed_lengths_not_divisible_by_cp(worlds):
    spec = CaseSpec("thd-6-2", "THD 6, 2 tokens", CASES["thd-gva"].geometry, "thd", (6, 2))  # 8 = 2 x 4
    refusal = worlds(4).run(megatron_refusal, make_case_from_geometry(spec), "fla-triton")
    assert all(r and "must be divisible by cp_size=4" in r for r in refusal), refusal


def contract_run(rank, case):
    """The adapter contract's run() next to the cp1 rank dump of the same module: (run, dump) or the refusal."""
    megatron.initialize(1, rank.world)
    module = MEGATRON.build_module(case.geometry, case.torch_dtype, core="torch-chunk")
    MEGATRON.load_megatron_params(module, case.params)
    try:
        r = MEGATRON.run(module, case)
    except ValueError as e:
        return str(e)
    return r, megatron.rank_run(module, case, "cp1")


def test_contract_run_is_the_cp1_rank_dump_in_natural_order_and_refuses_cp(worlds):
    case = make_case("sbhd", 0, "fp32")
    r, d = worlds(1).run(contract_run, case)[0]
    assert r.path == "megatron-torch-chunk" and torch.equal(r.out, d.out) and torch.equal(r.grad_hidden, d.grad_hidden)
    assert r.out.shape == case.hidden_states.shape and all(torch.equal(r.grads[n], d.grads[n]) for n in d.grads)
    refusal = "megatron.run is the one-process cp1 run; across ranks use rank_run"
    assert worlds(2).run(contract_run, case) == [refusal] * 2
