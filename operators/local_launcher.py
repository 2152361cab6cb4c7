"""Start a training group as local processes, one per rank, and see it through.

The same environment torchrun would set (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) is given to ``k`` copies of
``python -m workers.run``. Each rank runs in its own session (process group),
its output is streamed line by line with a ``[rank r]`` prefix, and the group
is ended as a whole:

- when one rank fails, the others get SIGTERM (then SIGKILL after a grace
  period), because a synchronous group cannot go on without it;
- on the wall-clock ``timeout_s``, every rank is stopped the same way;
- when the launcher itself is interrupted or killed by an exception, too.

torchrun's elastic agent is not used: it restarts failed groups, which a
benchmark must not do, and has no wall-clock limit. No orphan survives
:meth:`LocalGroup.wait`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from operators.launcher import GroupResult
from workers.distributed import free_port
from workers.request import EXIT_DIVERGED

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan

def threads_per_rank(world_size: int) -> int:
    """CPU threads for each rank so the group does not oversubscribe the cores."""
    return max(1, (os.cpu_count() or 1) // world_size)


def _pump(stream: IO[str], rank: int, sink: Callable[[str], None], tail: list[str]) -> None:
    for line in stream:
        text = f"[rank {rank}] {line.rstrip()}"
        sink(text)
        tail.append(text)
        if len(tail) > 200:
            del tail[:100]
    stream.close()


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop_ranks(procs: Sequence[subprocess.Popen[str]], grace_s: float) -> None:
    """SIGTERM every live rank's process group; SIGKILL what is left after ``grace_s``."""
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        remaining = max(0.0, deadline - time.monotonic())
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=remaining)
    for proc in procs:
        # Kill the whole session even if the leader has exited: its children
        # (data loaders, helpers) must not outlive the group.
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


class LocalGroup:
    """``world_size`` local ranks of ``python -m workers.run <worker_args>``.

    :meth:`start` launches them, :meth:`wait` follows them to the end (or the
    time limit) and always leaves no rank running, :meth:`stop` ends them
    early (e.g. when an Airflow task is killed). ``sink`` receives every
    output line, prefixed with its rank (default: print to stdout).
    """

    def __init__(
        self,
        worker_args: Sequence[str],
        world_size: int,
        *,
        grace_s: float = 5.0,
        env: dict[str, str] | None = None,
        sink: Callable[[str], None] | None = None,
        master_addr: str = "127.0.0.1",
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self.worker_args = list(worker_args)
        self.world_size = world_size
        self.grace_s = grace_s
        self.env = dict(os.environ if env is None else env)
        self.sink = sink or (lambda line: print(line, flush=True))
        self.master_addr = master_addr
        self.procs: list[subprocess.Popen[str]] = []
        self._pumps: list[threading.Thread] = []
        self._tail: list[str] = []
        self._started = 0.0

    @classmethod
    def for_plan(cls, group: GroupPlan, **options: Any) -> LocalGroup:
        """The planned ``group`` on this host: its run directory and data directory as they are."""
        argv = group.worker.argv(results_dir=str(group.run_dir), data_dir=group.data_dir)
        return cls(argv, group.world_size, **options)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        port = free_port(self.master_addr)
        base_env = dict(self.env)
        base_env.setdefault("OMP_NUM_THREADS", str(threads_per_rank(self.world_size)))
        base_env["PYTHONUNBUFFERED"] = "1"
        self._started = time.monotonic()
        try:
            for rank in range(self.world_size):
                rank_env = {
                    **base_env,
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(self.world_size),
                    "LOCAL_WORLD_SIZE": str(self.world_size),
                    "MASTER_ADDR": self.master_addr,
                    "MASTER_PORT": str(port),
                }
                proc = subprocess.Popen(
                    [sys.executable, "-m", "workers.run", *self.worker_args],
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                self.procs.append(proc)
                pump = threading.Thread(
                    target=_pump, args=(proc.stdout, rank, self.sink, self._tail), daemon=True
                )
                pump.start()
                self._pumps.append(pump)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every rank (SIGTERM, then SIGKILL after the grace period)."""
        stop_ranks(self.procs, self.grace_s)
        for pump in self._pumps:
            pump.join(timeout=5)

    def wait(self, timeout_s: float) -> GroupResult:
        """Follow the group until it ends, a rank fails, or ``timeout_s`` passes."""
        status, reason, failed_rank = "succeeded", "", None
        deadline = self._started + timeout_s
        exit_order: list[int] = []  # ranks in the order they were seen to exit
        try:
            while True:
                codes = [p.poll() for p in self.procs]
                exit_order += [
                    r for r, c in enumerate(codes) if c is not None and r not in exit_order
                ]
                if any(c not in (None, 0) for c in codes):
                    # Ranks that stop together (divergence) exit within moments of
                    # each other: let them, so the verdict sees every status.
                    _wait_all(self.procs, min(self.grace_s, 2.0))
                    codes = [p.poll() for p in self.procs]
                    exit_order += [
                        r for r, c in enumerate(codes) if c is not None and r not in exit_order
                    ]
                    status, reason, failed_rank = _classify(codes, exit_order)
                    break
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    status = "timed_out"
                    reason = f"the group did not finish within {timeout_s:g} s"
                    break
                time.sleep(0.05)
        finally:
            self.stop()
        return GroupResult(
            world_size=self.world_size,
            status=status,
            reason=reason,
            exit_codes=[p.returncode for p in self.procs],
            seconds=time.monotonic() - self._started,
            first_failed_rank=failed_rank,
            log_tail=self._tail[-50:],
        )


def launch_group(
    worker_args: Sequence[str],
    world_size: int,
    *,
    timeout_s: float,
    grace_s: float = 5.0,
    env: dict[str, str] | None = None,
    sink: Callable[[str], None] | None = None,
) -> GroupResult:
    """Start a :class:`LocalGroup` and wait for it: the whole life of one group."""
    group = LocalGroup(worker_args, world_size, grace_s=grace_s, env=env, sink=sink)
    group.start()
    return group.wait(timeout_s)


def _wait_all(procs: Sequence[subprocess.Popen[str]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)


def _classify(codes: list[int | None], exit_order: list[int]) -> tuple[str, str, int | None]:
    """(status, reason, first failed rank) from the ranks' exit codes, blaming first
    the rank that exited first (the others usually fail because it did)."""
    nonzero = {rank: codes[rank] for rank in exit_order if codes[rank] not in (None, 0)}
    if all(code == EXIT_DIVERGED for code in nonzero.values()):
        return "diverged", "the loss stopped being finite", next(iter(nonzero))
    culprits = {r: c for r, c in nonzero.items() if c != EXIT_DIVERGED}
    reason = "; ".join(f"rank {r} exited with {_describe_exit(c)}" for r, c in culprits.items())
    return "failed", reason, next(iter(culprits))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"
