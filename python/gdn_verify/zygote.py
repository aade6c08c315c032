"""Rank processes forked from a process that has already imported torch (and, under Triton's interpreter,
triton and what FLA's import spends its time in): a rank's start is a fork, not seconds of imports
(docs/DESIGN.md §14).

    pid = zygote_for(env).start(rank, size, port, timeout, path, log, (read_fd, write_fd))
    handle = Forked(pid)  # poll / wait / terminate / kill, as subprocess.Popen

One zygote per environment (a rank's environment is fixed when the zygote starts), kept for the life of
this process. A rank is forked twice (zygote -> a child that exits at once -> the rank), so it is
re-parented to this process, which is made a child subreaper (Linux `prctl`): this process reaps it and
reads its exit code or signal as it would a child's. The zygote imports no library under test (Megatron
comes from a world's `path`, set in the rank before it imports anything else), and the rank starts as a
fresh interpreter would: the world's path first on sys.path, stdout and stderr to its log.
Where `prctl` is missing `available()` is False and gdn_verify.world spawns each rank itself.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence

PR_SET_CHILD_SUBREAPER = 36
# Imported too where TRITON_INTERPRET=1, when importable: what FLA's and Megatron's imports spend their time in.
# Never a library under test (a world's path may hold a planted copy of FLA or Megatron), and nothing that
# tries CUDA: importing FLA itself does, and a rank forked after that gets "Cannot re-initialize CUDA in forked
# subprocess" where a fresh interpreter gets "Found no NVIDIA driver" (a shim's probe reads that message).
PRELOAD_INTERPRETED = ("triton", "torch._dynamo", "torch._dynamo.testing", "torch._inductor.compile_fx",
                       "torch.distributed.fsdp", "transformers.modeling_utils")
_zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
_subreaper: list[bool] = []


def available() -> bool:
    """Whether this process can adopt forked ranks (made a child subreaper once, on first call)."""
    if not _subreaper:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper.append(sys.platform == "linux" and libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
        except (OSError, AttributeError):
            _subreaper.append(False)
    return _subreaper[0]


def zygote_for(env: Mapping[str, str]) -> Zygote:
    key = tuple(sorted(env.items()))
    if key not in _zygotes or _zygotes[key].proc.poll() is not None:
        _zygotes[key] = Zygote(env)
    return _zygotes[key]


class Zygote:
    """The forking process of one environment and the socket its requests go through."""

    def __init__(self, env: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair()
        code = f"import sys; sys.path[:] = {sys.path!r}; from gdn_verify.zygote import serve; serve({theirs.fileno()})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=dict(env), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.sock = ours
        atexit.register(self.close)

    def start(self, rank: int, size: int, port: int, timeout: float, path: Sequence[str], log: str,
              fds: tuple[int, int]) -> int:
        """Forks rank `rank`'s process (gdn_verify.world._serve over the two pipe ends `fds`); its pid."""
        request = pickle.dumps((rank, size, port, timeout, list(path), log))
        socket.send_fds(self.sock, [request], list(fds))
        answer = self.sock.recv(64)
        if not answer:
            raise OSError(f"the rank zygote exited with code {self.proc.wait()} before forking rank {rank}")
        return int(answer)

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve(fd: int) -> None:
    """The zygote: imports, then forks a rank per request until its socket closes."""
    sock = socket.socket(fileno=fd)
    import torch.distributed  # noqa: F401 - the imports every rank pays for, paid once here

    if os.environ.get("TRITON_INTERPRET") == "1":
        for name in PRELOAD_INTERPRETED:
            try:
                __import__(name)
            except ImportError:
                pass
    # The imports' objects left out of the ranks' garbage collections, which would write to every one of them and so
    # copy most of the pages a rank shares with this process.
    gc.freeze()
    while True:
        request, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        if not request:
            os._exit(0)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # forks the rank, tells its pid, exits so the rank is re-parented
            os.close(read_end)
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                sock.close()
                _rank(pickle.loads(request), fds)
            os.write(write_end, str(pid).encode())
            os._exit(0)
        os.close(write_end)
        os.waitpid(child, 0)
        answer = os.read(read_end, 64)
        os.close(read_end)
        for f in fds:
            os.close(f)
        sock.sendall(answer)


def _rank(request: tuple, fds: list[int]) -> None:
    """A forked rank: its log, its path first, then gdn_verify.world._serve; exits as an interpreter would."""
    rank, size, port, timeout, path, log = request
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.path[:] = [*path, *sys.path]
        from gdn_verify.world import _serve

        _serve(rank, size, port, timeout, fds[0], fds[1])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - an uncaught exception: its traceback in the log, exit 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Forked:
    """A forked rank, handled as subprocess.Popen is (this process reaps it: `available()`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
