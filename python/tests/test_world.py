"""gdn_verify.world: W local gloo processes, started once, reused; a failing rank is one line, no hang."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from gdn_verify import images
from gdn_verify.adapters import Adapter, ImageRun, WorldPlan, runner
from gdn_verify.cases import make_case
from gdn_verify.exits import EXIT_BAD_INPUT
from gdn_verify.world import RankFailed, World


def rank_sum(rank, value):
    """All-reduce of rank + value: only right when every rank joined one group."""
    t = torch.tensor([float(rank.rank + value)])
    dist.all_reduce(t)
    return rank.rank, rank.world, t.item(), os.getpid(), os.environ.get("OMP_NUM_THREADS"), os.environ.get("GDNV_X")


def fail_on(rank, bad_rank, exc):
    if rank.rank == bad_rank:
        raise exc
    dist.barrier()  # the healthy ranks wait for the failed one, as in a real collective
    return rank.rank


def exit_on(rank, bad_rank):
    if rank.rank == bad_rank:
        os._exit(7)
    dist.barrier()


def sleep_on(rank, bad_rank, seconds):
    if rank.rank == bad_rank:
        time.sleep(seconds)
    return rank.rank


def token_local_dump(rank, case):
    """A RankDump whose out is the rank's zigzag rows of hidden_states (a known answer)."""
    from gdn_verify.layouts import zigzag_rows

    rows = zigzag_rows(case, rank.world, rank.rank)
    flat = case.hidden_states.reshape(-1, case.geometry.hidden_size).to(case.torch_dtype)
    grads = {n: torch.zeros(p.shape) for n, p in case.params.items()}
    return images.RankDump("chunkwise", rank.rank, rank.world, flat[rows], flat[rows], grads)


@pytest.fixture(scope="module")
def world2():
    with World(2, env={"GDNV_X": "set"}, timeout=60) as w:
        yield w


def test_every_rank_joins_one_group_with_the_fixed_env(world2):
    answers = world2.run(rank_sum, 10)
    assert [a[:3] for a in answers] == [(0, 2, 21.0), (1, 2, 21.0)]
    assert all(a[4] == "1" and a[5] == "set" for a in answers)
    assert answers[0][3] != answers[1][3] != os.getpid()


def test_a_world_is_started_once_and_reused(world2):
    pids = [a[3] for a in world2.run(rank_sum, 0)]
    assert [a[3] for a in world2.run(rank_sum, 1)] == pids


def test_a_rank_exception_is_one_line_naming_the_rank_with_its_exit_code():
    with World(2, timeout=60) as w:
        start = time.monotonic()
        with pytest.raises(RankFailed) as e:
            w.run(fail_on, 1, ValueError("lengths 5 not divisible by 4"))
        assert time.monotonic() - start < 30  # the healthy rank's barrier does not hang the run
        assert str(e.value) == "rank 1 of 2: fail_on: ValueError: lengths 5 not divisible by 4"
        assert e.value.exit_code == EXIT_BAD_INPUT and e.value.rank == 1 and "Traceback" in e.value.detail
        assert not w.running
        with pytest.raises(RankFailed) as e:  # a stopped world starts afresh on the next run
            w.run(fail_on, 0, RuntimeError("kernel\nfailed"))
        assert str(e.value) == "rank 0 of 2: fail_on: RuntimeError: kernel failed" and e.value.exit_code == 3


def test_a_dead_rank_is_named_with_its_exit_code():
    with World(2, timeout=60) as w, pytest.raises(RankFailed) as e:
        w.run(exit_on, 0)
    assert str(e.value).startswith("rank 0 of 2: exit_on: the process exited with code 7")
    assert e.value.exit_code == 7


def test_a_rank_past_the_timeout_is_named_and_stopped():
    with World(2, timeout=3) as w, pytest.raises(RankFailed) as e:
        w.run(sleep_on, 1, 30)
    assert str(e.value) == "sleep_on: rank 1 of 2 did not answer within 3 s"
    assert not w.running


class RankFunctionAdapter(Adapter):
    """An adapter whose run on gloo ranks is one rank function (`fn`, `args`): the runner's writing alone."""

    name, package, import_name = "rank-function", "none", "gdn_verify"
    cores = {"only": "the rank function"}
    decay_classes = {"only": "product-of-decays"}

    def __init__(self, fn=token_local_dump, *args) -> None:
        self.fn, self.args = fn, args

    def build_module(self, geometry, dtype, device="cpu", core=None):
        raise NotImplementedError

    def from_megatron(self, params, geometry):
        raise NotImplementedError

    def to_megatron(self, state, geometry, gradients=False):
        raise NotImplementedError

    def load_megatron_params(self, module, params):
        raise NotImplementedError

    def run(self, module, case, stages=True, core=None):
        raise NotImplementedError

    def run_world(self, world, case, plan):
        return ImageRun(world.run(self.fn, *self.args), "gloo", {"adapter": self.name}, self.name)


def test_a_world_run_writes_every_rank_once_and_nothing_when_a_rank_fails(gdnv, tmp_path):
    case = make_case("thd-gva", 0, "fp32")
    plan = WorldPlan("chunkwise", 2, 1, "only", False)
    with World(2, timeout=60) as w:
        runner.dump_in(w, RankFunctionAdapter(token_local_dump, case), case, plan, tmp_path / "ok", "world-test")
        with pytest.raises(RankFailed):
            runner.dump_in(w, RankFunctionAdapter(fail_on, 1, ValueError("no")), case, plan, tmp_path / "bad",
                           "world-test")
    assert not (tmp_path / "bad").exists()
    image = images.read_image(tmp_path / "ok")
    assert len(image.ranks["chunkwise"]) == 2 and image.meta["modes"]["chunkwise"]["transport"] == "gloo"
    assert (image.meta["adapter"], image.meta["backend"]) == ("rank-function", "rank-function:cpu")
    flat = case.hidden_states.reshape(-1, case.geometry.hidden_size).to(torch.float32)
    assert case.cu_seqlens is not None
    for r, (tensors, _) in enumerate(image.ranks["chunkwise"]):
        rows = gdnv("layout", "--layout", "zigzag", "--cp", 2, "--rank", r, "--cu-seqlens",
                    ",".join(map(str, case.cu_seqlens)))
        assert torch.equal(tensors["out"], flat[__import__("json").loads(rows.stdout)["indices"]])


def test_a_world_of_no_ranks_is_refused():
    with pytest.raises(ValueError, match="give at least 1"):
        World(0)


def imported_from(rank, module):
    return __import__(module).__file__


def test_the_worlds_path_is_first_on_every_rank_at_every_start(tmp_path):
    """A checkout under test named in `path` is what the ranks import, and still after a failed rank
    restarted the world (the parent's sys.path never holds it)."""
    (tmp_path / "gdnv_probe_module.py").write_text("")
    with World(2, timeout=60, path=[str(tmp_path)]) as w:
        assert w.run(imported_from, "gdnv_probe_module") == [str(tmp_path / "gdnv_probe_module.py")] * 2
        with pytest.raises(RankFailed):
            w.run(fail_on, 1, ValueError("no"))
        assert w.run(imported_from, "gdnv_probe_module") == [str(tmp_path / "gdnv_probe_module.py")] * 2
    assert str(tmp_path) not in __import__("sys").path
