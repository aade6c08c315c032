"""Local multi-process worlds: W processes in one gloo group on this machine (docs/DESIGN.md §14).

    with World(2, env={"TRITON_INTERPRET": "1"}) as world:
        dumps = world.run(my_rank_function, case)  # my_rank_function(rank: Rank, case), on every rank

A World starts its processes once (forked from gdn_verify.zygote, which imported torch once, with the
caller's sys.path: nothing of the caller's state is forked and no main module is re-run) and keeps them
for every `run`, so a suite pays the start-up (the library imports) once per world size. The
parent hosts the TCP store on a free localhost port it asks the kernel for (port 0: no race), every
worker joins the gloo group through it, and the parent only sends work and gathers answers: it computes
nothing and never joins the group. Every rank runs under the same fixed environment (`FIXED_ENV`, one
thread each: the ranks share the machine's cores) plus the caller's `env`; a rank's stdout and stderr
go to a log file (`World.log`), so the caller's terminal gets only its own lines.

A rank's exception ends the world: `run` raises RankFailed, one line naming the rank, the exception and
the exit code that rank would have exited with (`exit_code`), after stopping every process (a peer may
be blocked in a collective waiting for the failed rank). A rank that dies is reported with its exit
code or signal; a rank that does not answer within `timeout` seconds is named and the world stopped.
Collectives time out inside the ranks a little earlier, so a rank stuck waiting for a peer reports it.
A caller writes only after every rank has answered (gdn_verify.adapters.runner: one
`images.write_image` of every rank's RankDump), so a failure leaves no half-written image.
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from gdn_verify import zygote
from gdn_verify.exits import EXIT_BAD_INPUT, Mismatch

# Every rank's environment: one thread per rank (W ranks share the cores) and loopback networking.
FIXED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONHASHSEED": "0"}
HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 600.0  # seconds a `run` may take on one rank; collectives give up 10% earlier
START_TIMEOUT = 300.0  # seconds the ranks may take to start (spawn, import torch) and join the group
EXIT_UNCAUGHT = 1  # a rank that dies or hangs: what Python exits with on an uncaught exception
STOP_GRACE = 5.0  # seconds a stopped rank gets before it is killed


class RankFailed(RuntimeError):
    """A rank raised, died or did not answer; str(e) is the one line to print, `exit_code` the code."""

    def __init__(self, message: str, exit_code: int, rank: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.rank = rank
        self.detail = detail  # the rank's traceback, for a log; never part of the one line


@dataclass(frozen=True)
class Rank:
    """What a rank function is told: its rank and the world's size (the default process group is the world)."""

    rank: int
    world: int


def exit_code_of(e: BaseException) -> int:
    """The code the command exits with on a rank's exception: SystemExit's own, a Mismatch's 2, else 3, as
    every `gdn-verify` command ends on an exception (one `error:` line, exit 3)."""
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) else EXIT_UNCAUGHT
    return e.exit_code if isinstance(e, Mismatch) else EXIT_BAD_INPUT


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _serve(rank: int, size: int, port: int, timeout: float, read_fd: int, write_fd: int) -> None:
    """A rank's process: joins the gloo group, then runs each (fn, args) it is sent until it is sent None."""
    conn_in, conn_out = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    def answer(kind: str, *what: Any) -> None:
        conn_out.send_bytes(pickle.dumps((kind, *what)))  # tensors by value: nothing shared outlives a run

    def failure(e: BaseException, doing: str = "") -> None:
        answer("error", f"{doing}{type(e).__name__}: {_one_line(e)}", exit_code_of(e), traceback.format_exc())

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    collective_timeout = datetime.timedelta(seconds=0.9 * timeout)
    try:
        store = dist.TCPStore(HOST, port, size, is_master=False, timeout=collective_timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=collective_timeout)
    except BaseException as e:  # noqa: BLE001 - this rank's failure, reported to the parent
        failure(e, "joining the gloo group: ")
        return
    answer("ok", None)
    me = Rank(rank, size)
    while (task := pickle.loads(conn_in.recv_bytes())) is not None:
        fn, args = task
        try:
            result = fn(me, *args)
        except BaseException as e:  # noqa: BLE001
            failure(e)
            continue
        answer("ok", result)
    os._exit(0)  # leaving without a teardown handshake: the parent ends every rank together


class World:
    """`size` local processes in one gloo group, started once, reused by every `run` (see module doc)."""

    def __init__(self, size: int, *, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
                 path: Sequence[str] = ()) -> None:
        """`path`: directories first on every rank's sys.path, at every start (a library checkout under test
        stays the one imported when the world restarts after a failure)."""
        if size < 1:
            raise ValueError(f"a world of {size} ranks: give at least 1")
        self.size = size
        self.env = {**FIXED_ENV, **(env or {})}
        self.path = list(path)
        self.timeout = timeout
        self._procs: list[Any] = []  # subprocess.Popen, or zygote.Forked
        self._conns: list[tuple[Connection, Connection]] = []  # (to the rank, from the rank)
        self._store: Any = None  # the parent's torch.distributed.TCPStore once started
        self._logs: Any = None  # a tempfile.TemporaryDirectory once started

    # -- life cycle -------------------------------------------------------------------------------------
    def __enter__(self) -> World:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return bool(self._procs)

    def log(self, rank: int) -> Path:
        """The file rank `rank`'s stdout and stderr go to (library warnings, a native crash's last words)."""
        return Path(self._logs.name) / f"rank{rank}.log"

    def start(self) -> None:
        """Starts the ranks and waits until each has joined the group; RankFailed if one cannot."""
        if self.running:
            return
        import torch.distributed as dist

        # The parent hosts the store (port 0: the kernel picks a free port) and never joins the group.
        self._store = dist.TCPStore(HOST, 0, self.size, is_master=True, wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=START_TIMEOUT))
        self._logs = tempfile.TemporaryDirectory(prefix="gdnv-world-")
        env = {**os.environ, **self.env}
        for r in range(self.size):
            to_rank, from_rank = os.pipe(), os.pipe()  # (read, write) each
            self._procs.append(self._spawn(r, env, (to_rank[0], from_rank[1])))
            os.close(to_rank[0])
            os.close(from_rank[1])
            self._conns.append((Connection(to_rank[1], readable=False), Connection(from_rank[0], writable=False)))
        self._gather("starting the world", START_TIMEOUT)

    def _spawn(self, r: int, env: dict[str, str], fds: tuple[int, int]) -> Any:
        """Rank r's process, serving over the pipe ends `fds`: forked from the environment's zygote (the
        imports paid once, gdn_verify.zygote), else a fresh interpreter."""
        if zygote.available():
            return zygote.Forked(zygote.zygote_for(env).start(r, self.size, self._store.port, self.timeout, self.path,
                                                              str(self.log(r)), fds))
        code = (f"import sys; sys.path[:] = {[*self.path, *sys.path]!r}; from gdn_verify.world import _serve; "
                f"_serve({r}, {self.size}, {self._store.port}, {self.timeout!r}, {fds[0]}, {fds[1]})")
        with open(self.log(r), "wb") as log:
            return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, pass_fds=fds)

    def close(self) -> None:
        """Asks every rank to leave the group and exit; kills any that does not within STOP_GRACE seconds."""
        for to_rank, _ in self._conns:
            try:
                to_rank.send_bytes(pickle.dumps(None))
            except OSError:
                pass
        self._stop()

    def _stop(self) -> None:
        deadline = time.monotonic() + STOP_GRACE
        for p in self._procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pair in self._conns:
            for c in pair:
                c.close()
        if self._logs is not None:
            self._logs.cleanup()
        self._procs, self._conns, self._store, self._logs = [], [], None, None

    # -- work -------------------------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """fn(Rank(r, W), *args) on every rank r at once; the answers in rank order. `fn` and `args` must
        pickle (a module-level function). RankFailed, with the world stopped, when any rank fails."""
        if not self.running:
            self.start()
        task = pickle.dumps((fn, args))
        for to_rank, _ in self._conns:
            to_rank.send_bytes(task)
        return self._gather(getattr(fn, "__qualname__", str(fn)), self.timeout)

    def _gather(self, what: str, timeout: float) -> list[Any]:
        """Every rank's answer; on the first failure, death or the deadline: stop the world, RankFailed."""
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < self.size:
            late: dict[Any, int] = {self._conns[r][1]: r for r in range(self.size) if r not in answers}
            ready = wait(list(late), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                ranks = sorted(late.values())
                self._fail(f"{what}: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of {self.size} "
                           f"did not answer within {timeout:g} s", EXIT_UNCAUGHT, ranks[0])
            for rank in sorted(late[c] for c in ready):
                try:
                    kind, *answer = pickle.loads(self._conns[rank][1].recv_bytes())
                except (EOFError, OSError):
                    self._died(rank, what)
                if kind == "error":
                    message, code, detail = answer
                    self._fail(f"rank {rank} of {self.size}: {what}: {message}", code, rank, detail)
                answers[rank] = answer[0]
        return [answers[r] for r in range(self.size)]

    def _died(self, rank: int, what: str) -> None:
        """RankFailed for a rank whose process ended without answering: its exit code or signal, its log."""
        p = self._procs[rank]
        try:
            code = p.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        last = _last_line(self.log(rank))
        why = (f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}")
        self._fail(f"rank {rank} of {self.size}: {what}: the process {why} without answering"
                   + (f" (its last output: {last})" if last else ""),
                   128 - code if code is not None and code < 0 else (code or EXIT_UNCAUGHT), rank)

    def _fail(self, message: str, code: int, rank: int | None, detail: str = "") -> None:
        for p in self._procs:
            if p.poll() is None:
                p.terminate()  # peers may wait in a collective for the failed rank
        self._stop()
        raise RankFailed(message, code, rank, detail)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return _one_line(lines[-1])[:200] if lines else ""

