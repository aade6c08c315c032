"""Megatron-LM's own GatedDeltaNet and context_parallel_layout tests on CPU gloo ranks, and our layouts against its
context_parallel_layout token for token (docs/DESIGN.md §2, §14), for each Megatron-LM snapshot CI holds under
../shared/megatron-lm (5139086e: one gated_delta_net module; dev-d48bd6be: the gated_delta_net package).

One world of WORLD gloo ranks per snapshot (gdn_verify.megatron_upstream, gdn_verify.megatron_layouts): every rank
runs Megatron's test files under pytest, then its layout conversions; the parent only compares. Each snapshot costs
one Megatron import per rank, most of its time."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch

from gdn_verify import layouts
from gdn_verify.cases import Case
from gdn_verify.megatron_layouts import layouts as megatron_layouts
from gdn_verify.megatron_upstream import run_tests, snapshots
from gdn_verify.world import World

REPO = Path(__file__).resolve().parents[2]
ROOT = snapshots(REPO)
WORLD = 4  # Megatron's THD all-to-all tests ask for CP = 2 and 4

TE_AND_GPU = ("needs Transformer Engine and a GPU: its setup builds the layer from the transformer_engine spec "
              "(NameError: TESpecProvider without TE) and moves it to .cuda()")
NOT_IN_SNAPSHOT = ("needs Transformer Engine, a GPU, megatron.training and tests/unit_tests/transformer/"
                   "test_attention.py's _test_parallel_attention_correctness (neither is in the snapshot)")
CAUSAL_CONV1D = "causal-conv1d fused backward is not installed."  # their own skipif: a CUDA extension
CUDA_RANKS = "CUDA ranks"  # their own skipif: the SBHD conversion tests make cuda:N tensors


@dataclass(frozen=True)
class Snapshot:
    files: tuple[str, ...]
    skips: dict[str, str]  # test id prefix -> reason: skipped by name here
    expected: dict[str, tuple[str, int, str]]  # test id prefix -> (outcome, how many, words of the reason)


GDN_5139 = "tests/unit_tests/ssm/test_gated_delta_net.py::"
GDN_DEV = "tests/unit_tests/ssm/gated_delta_net/"
LAYOUT = "tests/unit_tests/test_context_parallel_layout.py::"
SNAPSHOTS = {
    "5139086e": Snapshot(
        files=("tests/unit_tests/test_context_parallel_layout.py", "tests/unit_tests/ssm/test_gated_delta_net.py"),
        skips={GDN_5139 + "TestGatedDeltaNet::": TE_AND_GPU,
               GDN_5139 + "test_parallel_gated_delta_net_correctness": NOT_IN_SNAPSHOT},
        expected={LAYOUT: ("passed", 8, ""),
                  GDN_5139 + "test_gdn_": ("passed", 6, ""),
                  GDN_5139 + "TestGDNCuSeqlensResolve::": ("passed", 6, ""),
                  GDN_5139 + "TestFusedThdAllToAll::": ("passed", 14, ""),
                  GDN_5139 + "TestGatedDeltaNet::": ("skipped", 63, TE_AND_GPU),
                  GDN_5139 + "TestFusedPreGatedDeltaRule::": ("skipped", 9, CAUSAL_CONV1D),
                  GDN_5139 + "test_parallel_gated_delta_net_correctness": ("skipped", 16, NOT_IN_SNAPSHOT)}),
    "dev-d48bd6be": Snapshot(
        files=("tests/unit_tests/test_context_parallel_layout.py", GDN_DEV + "test_gdn.py",
               GDN_DEV + "test_gdn_fusion.py", GDN_DEV + "test_gdn_parallel.py"),
        skips={GDN_DEV + "test_gdn.py::TestGatedDeltaNet::": TE_AND_GPU,
               GDN_DEV + "test_gdn_parallel.py::test_parallel_gated_delta_net_correctness": NOT_IN_SNAPSHOT},
        expected={LAYOUT: ("passed", 27, ""),
                  LAYOUT + "test_sbhd_convert_cp_partition_mode_": ("skipped", 12, CUDA_RANKS),
                  GDN_DEV + "test_gdn.py::test_": ("passed", 10, ""),
                  GDN_DEV + "test_gdn.py::TestGDNCuSeqlensResolve::": ("passed", 6, ""),
                  GDN_DEV + "test_gdn.py::TestGatedDeltaNet::": ("skipped", 108, TE_AND_GPU),
                  GDN_DEV + "test_gdn_fusion.py::test_": ("passed", 1, ""),
                  GDN_DEV + "test_gdn_fusion.py::TestFusedPreGatedDeltaRule": ("skipped", 18, CAUSAL_CONV1D),
                  GDN_DEV + "test_gdn_parallel.py::TestFusedThdAllToAll::": ("passed", 14, ""),
                  GDN_DEV + "test_gdn_parallel.py::test_parallel_gated_delta_net_correctness":
                      ("skipped", 16, NOT_IN_SNAPSHOT)}),
}

# THD packings, lengths in units of 2W (each divisible as context_parallel_layout requires), a 0 repeating a
# boundary (both sides drop empty sequences); SBHD lengths S = 2W k.
PACKINGS = ((1,), (1, 3), (2, 1, 5), (3, 3), (7, 1, 1, 2), (3, 0, 2), (5, 2, 0, 0))
SBHD_K = (1, 3)
WS = (2, 4, 8)
DOC_CASES = (("thd", (0, 16, 40), 2), ("thd", (0, 16, 40), 4), ("thd", (0, 8, 12, 16), 2))  # docs/DESIGN.md §2


def layout_cases() -> list[tuple[str, Any, int]]:
    cases: list[tuple[str, Any, int]] = list(DOC_CASES)
    for W in WS:
        for lengths in PACKINGS:
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + 2 * W * n)
            cases.append(("thd", tuple(cu), W))
        cases += [("sbhd", 2 * W * k, W) for k in SBHD_K]
    return cases


def vector_cases() -> list[tuple[str, Any, int]]:
    """tests/data/vectors/layouts_megatron.json's (cu_seqlens, W), made from 5139086e."""
    stored = json.loads((REPO / "tests/data/vectors/layouts_megatron.json").read_text())["cases"]
    return sorted({("thd", tuple(c["cu_seqlens"]), c["cp_size"]) for c in stored})


def ours_from_binary(gdnv, case) -> dict[str, list]:
    """`gdn-verify layout` per rank: the zigzag and contiguous tokens, and the zigzag->contiguous route."""
    fmt, key, W = case
    where = ["--cu-seqlens", ",".join(map(str, key))] if fmt == "thd" else ["--seq-len", str(key)]
    out: dict[str, list] = {"zigzag": [], "contiguous": [], "route": []}
    for r in range(W):
        for layout in ("zigzag", "contiguous"):
            run = gdnv("layout", "--layout", layout, "--cp", W, "--rank", r, *where, "--route")
            assert run.returncode == 0, run.stderr
            answer = json.loads(run.stdout)
            out[layout].append(answer["indices"])
        out["route"].append(answer["route"])
    return out


def ours_from_python(case) -> dict[str, list]:
    """python/gdn_verify/layouts.py per rank (a case is only its sequences to zigzag_rows)."""
    fmt, key, W = case
    sequences = list(zip(key[:-1], key[1:])) if fmt == "thd" else [(0, key)]
    holder = cast(Case, SimpleNamespace(sequences=lambda: sequences))
    total = key[-1] if fmt == "thd" else key
    return {"zigzag": [layouts.zigzag_rows(holder, W, r) for r in range(W)],
            "contiguous": [list(layouts.contiguous_rows(total, W, r)) for r in range(W)]}


@pytest.fixture(scope="module")
def ours(gdnv) -> dict:
    return {case: ours_from_binary(gdnv, case) for case in layout_cases()}


@pytest.fixture(scope="module", params=list(SNAPSHOTS))
def upstream(request) -> dict:
    """One snapshot's world: Megatron's tests on every rank, then its layouts; outcomes, records and timings."""
    name = request.param
    tree = ROOT / name
    if not tree.is_dir():
        pytest.skip(f"no Megatron-LM snapshot at {tree} (CI keeps them at ../shared/megatron-lm)")
    if torch.cuda.is_available():
        pytest.skip("these run Megatron's tests on CPU gloo ranks; on a GPU run them with Megatron's own launcher")
    snapshot, ours = SNAPSHOTS[name], request.getfixturevalue("ours")
    cases = layout_cases()
    inputs = {case: {layout: ours[case][layout] for layout in ("zigzag", "contiguous")} for case in cases}
    wall, cpu = time.monotonic(), os.times()
    with World(WORLD, env={"TRITON_INTERPRET": "1"}) as world:
        tests = world.run(run_tests, str(tree), snapshot.files, snapshot.skips)
        layout_answers = world.run(megatron_layouts, str(tree), cases, inputs, vector_cases())
    after = os.times()
    return {"name": name, "snapshot": snapshot, "tests": tests, "layouts": layout_answers, "cases": cases,
            "wall_s": time.monotonic() - wall, "cpu_s": after.children_user + after.children_system
            - cpu.children_user - cpu.children_system}


def group_of(test_id: str, expected: dict) -> str:
    """The longest prefix in `expected` the test id starts with."""
    prefixes = [p for p in expected if test_id.startswith(p)]
    assert prefixes, f"{test_id} is in no expected group: a test the snapshot gained?"
    return max(prefixes, key=len)


def test_megatron_tests_pass_on_cpu_gloo_ranks_but_those_needing_te_or_a_gpu(upstream):
    expected = upstream["snapshot"].expected
    outcomes = upstream["tests"][0]["outcomes"]
    got: Counter = Counter()
    wrong = []
    for test_id, result in outcomes.items():
        group = group_of(test_id, expected)
        outcome, _, reason = expected[group]
        got[group] += 1
        if result["outcome"] != outcome or reason not in result["detail"]:
            wrong.append(f"{test_id}: {result['outcome']} ({result['detail'][-300:]}), expected {outcome} {reason}")
    assert not wrong, "\n".join(wrong)
    assert dict(got) == {group: count for group, (_, count, _) in expected.items()}
    seconds = sum(r["seconds"] for r in outcomes.values())
    print(f"\n{upstream['name']}: {Counter(r['outcome'] for r in outcomes.values())} in {seconds:.1f} s of tests; "
          f"world of {WORLD}: {upstream['wall_s']:.1f} s wall, {upstream['cpu_s']:.1f} CPU-s; per rank "
          + ", ".join(f"{r['wall_s']:.0f} s / {r['cpu_s']:.0f} CPU-s" for r in upstream["tests"]))


def test_every_rank_reports_the_same_outcomes(upstream):
    first = {k: v["outcome"] for k, v in upstream["tests"][0]["outcomes"].items()}
    for answer in upstream["tests"][1:]:
        assert {k: v["outcome"] for k, v in answer["outcomes"].items()} == first, f"rank {answer['rank']}"
    assert all(answer["exit"] == 0 for answer in upstream["tests"])


def tokens_differ(what: str, ours: list, theirs: list, names: tuple[str, str] = ("ours", "Megatron")) -> str:
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"{what}: first difference at local row {at}\n  {names[0]:9} {ours}\n  {names[1]:9} {theirs}"


def test_our_zigzag_and_contiguous_partitions_are_megatrons_token_for_token(upstream, ours):
    """gdn-verify layout and layouts.py against the snapshot's own index functions (5139086e has none for SBHD:
    its chunks live inside the conversion, checked by the conversion tests below)."""
    partitions = upstream["layouts"][0]["partitions"]
    findings, compared = [], 0
    for case in upstream["cases"]:
        python = ours_from_python(case)
        for layout in ("zigzag", "contiguous"):
            for r in range(case[2]):
                theirs, binary = partitions[case][layout][r], ours[case][layout][r]
                if python[layout][r] != binary:
                    findings.append(tokens_differ(f"{case} rank {r} {layout}", python[layout][r], binary,
                                                  ("layouts.py", "binary")))
                if theirs is None:
                    continue
                compared += 1
                if binary != theirs:
                    findings.append(tokens_differ(f"{case} rank {r} {layout}", binary, theirs, ("binary", "Megatron")))
                if python[layout][r] != theirs:
                    findings.append(tokens_differ(f"{case} rank {r} {layout}", python[layout][r], theirs,
                                                  ("layouts.py", "Megatron")))
    assert not findings, "\n".join(findings)
    assert compared >= 2 * sum(W for fmt, _, W in upstream["cases"] if fmt == "thd")


def route_sends(zig: list, con: list, route: dict) -> dict[str, Any]:
    """Our route (docs/DESIGN.md §2) as the tokens sent to and received from each peer, both directions."""
    def cut(tokens: list, counts: list) -> list:
        at = [sum(counts[:p]) for p in range(len(counts) + 1)]
        return [tokens[at[p]:at[p + 1]] for p in range(len(counts))]

    send, recv, index = route["send_counts"], route["recv_counts"], route["index"]
    received = [con[i] for i in index]  # receive row k belongs at contiguous row index[k]
    return {"z2c": {"send": cut(zig, send), "recv": cut(received, recv), "out": con},
            "c2z": {"send": cut(received, recv), "recv": cut(zig, send), "out": zig}}


def assert_records_match_our_route(records: dict, case, ours) -> int:
    findings, compared = [], 0
    for r in range(case[2]):
        mine = route_sends(ours[case]["zigzag"][r], ours[case]["contiguous"][r], ours[case]["route"][r])
        for direction in ("z2c", "c2z"):
            for part in ("send", "recv", "out"):
                compared += 1
                if records[direction][r][part] != mine[direction][part]:
                    findings.append(f"{case} rank {r} {direction} {part}: ours {mine[direction][part]}, "
                                    f"Megatron {records[direction][r][part]}")
    assert not findings, "\n".join(findings)
    return compared


def test_megatrons_all_to_all_sends_each_peer_the_tokens_our_route_sends(upstream, ours):
    """Megatron's own conversion in both directions, every rank of W = 2, 4, 8, its all-to-all simulated (the
    next test holds the simulation to gloo's): per peer the tokens sent and received, in order, and the result."""
    simulated = upstream["layouts"][0]["simulated"]
    compared = sum(assert_records_match_our_route(simulated[case], case, ours) for case in upstream["cases"])
    assert compared == 6 * sum(W for _, _, W in upstream["cases"])


def test_megatrons_all_to_all_on_gloo_ranks_is_the_simulated_one(upstream):
    """W = 2 and 4 on the world's gloo ranks (W = 2 twice: ranks 0-1 and 2-3): every record equals the simulation's."""
    simulated = upstream["layouts"][0]["simulated"]
    checked = 0
    for answer in upstream["layouts"]:
        for case, here in answer["gloo"].items():
            r = answer["rank"] % case[2]
            for direction in ("z2c", "c2z"):
                assert here[direction] == simulated[case][direction][r], (case, answer["rank"], direction)
                checked += 1
    assert checked == 2 * sum(WORLD for _, _, W in upstream["cases"] if WORLD % W == 0)


def test_megatrons_sbhd_data_path_zigzag_is_ours(upstream, ours):
    """get_batch_on_this_cp_rank (no cu_seqlens) on gloo ranks: the zigzag a rank trains on."""
    checked = 0
    for answer in upstream["layouts"]:
        for case, here in answer["gloo"].items():
            if case[0] == "sbhd":
                r = answer["rank"] % case[2]
                assert here["batch_zigzag"] == ours[case]["zigzag"][r], tokens_differ(
                    f"{case} rank {r}", ours[case]["zigzag"][r], here["batch_zigzag"])
                checked += 1
    assert checked == WORLD * len(SBHD_K) * 2


def test_stored_megatron_layout_vectors_are_what_the_snapshot_computes(upstream):
    """tests/data/vectors/layouts_megatron.json (made from 5139086e, W = 2, 3, 4, 8) against either snapshot, live."""
    partitions = upstream["layouts"][0]["partitions"]
    stored = json.loads((REPO / "tests/data/vectors/layouts_megatron.json").read_text())["cases"]
    for c in stored:
        case = ("thd", tuple(c["cu_seqlens"]), c["cp_size"])
        for layout in ("zigzag", "contiguous"):
            assert partitions[case][layout][c["cp_rank"]] == c[layout], (case, c["cp_rank"], layout)


def test_megatrons_seed_setup_fails_on_the_cuda_rng_state_without_the_placeholder_shim(upstream):
    """model_parallel_cuda_manual_seed (TestFusedThdAllToAll's setup, passed above) reads the CUDA RNG state."""
    for answer in upstream["tests"]:
        assert "Found no NVIDIA driver" in answer["cuda_rng_state_without_shim"]
        assert "cuda_rng_state_placeholder" in answer["shims"] and "current_device_is_cpu" in answer["shims"]
