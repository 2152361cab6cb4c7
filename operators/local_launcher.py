"""Start a training group as local processes, one per rank, and see it through.

The same environment torchrun would set (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) is given to ``k`` copies of
``python -m workers.run``. Each rank runs in its own session (process group),
its output is streamed line by line with a ``[rank r]`` prefix, and the group
is ended as a whole:

- when one rank fails, the others get SIGTERM (then SIGKILL after a grace
  period), because a synchronous group cannot go on without it; a rank that
  found its results filesystem full (exit status 4) makes the group's reason
  ``no space left on <mount point>``, whatever its peers did next;
- on the wall-clock ``timeout_s``, every rank is stopped the same way;
- when the launcher itself is interrupted or killed by an exception, too.

torchrun's elastic agent is not used: it restarts failed groups, which a
benchmark must not do, and has no wall-clock limit. No orphan survives
:meth:`LocalGroup.wait`.

On a shaped network profile (``100mbit``, ``1gbit``...) every rank runs in its
own network namespace on an emulated link (:mod:`operators.shaped_network`),
built before the first rank starts and removed with the group, however it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from operators.group import GroupResult
from operators.shaped_network import ShapedNetwork
from scalebench.diskspace import no_space_reason
from scalebench.network import NetworkProfile
from scalebench.rank import EXIT_DIVERGED, EXIT_NO_SPACE, LAUNCHER_PID_VARIABLE
from workers.distributed import free_port

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan

LOG_TAIL_LINES = 50  # each rank's last output lines kept for the verdict


def threads_per_rank(world_size: int) -> int:
    """CPU threads for each rank so the group does not oversubscribe the cores."""
    return max(1, (os.cpu_count() or 1) // world_size)


def _pump(stream: IO[str], rank: int, sink: Callable[[str], None], tail: deque[str]) -> None:
    """Pass rank ``rank``'s output lines to ``sink``, keeping its last ones in ``tail``."""
    for line in stream:
        text = f"[rank {rank}] {line.rstrip()}"
        sink(text)
        tail.append(text)
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
        run_dir: Path | None = None,
        network: NetworkProfile | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self.worker_args = list(worker_args)
        self.world_size = world_size
        self.grace_s = grace_s
        self.env = dict(os.environ if env is None else env)
        self.sink = sink or (lambda line: print(line, flush=True))
        self.master_addr = master_addr
        self.run_dir = run_dir  # where the ranks write (to tell which one fell silent)
        self.network = network or NetworkProfile()
        self._shaped: ShapedNetwork | None = None
        self.procs: list[subprocess.Popen[str]] = []
        self._pumps: list[threading.Thread] = []
        self._tails: list[deque[str]] = []  # each rank's last lines
        self._started = 0.0

    @classmethod
    def for_plan(cls, group: GroupPlan, **options: Any) -> LocalGroup:
        """The planned ``group`` on this host: its run directory and data directory as they are."""
        argv = group.worker_argv(results_dir=str(group.run_dir), data_dir=group.data_dir)
        network = group.network
        return cls(argv, group.world_size, run_dir=group.run_dir, network=network, **options)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        self._started = time.monotonic()
        master_addr, command = self.master_addr, [sys.executable, "-m", "workers.run"]
        base_env = dict(self.env)
        if self.network.shaped:
            self._shaped = ShapedNetwork(self.world_size, self.network)
            self._shaped.create()
            master_addr = self._shaped.master_addr
            base_env.update(self._shaped.environment())
            self.sink(
                f"[launcher] ranks on an emulated {self.network} network, "
                f"{self._shaped.subnet} on bridge {self._shaped.bridge}"
            )
        port = free_port(self.master_addr) if self._shaped is None else 29500
        base_env.setdefault("OMP_NUM_THREADS", str(threads_per_rank(self.world_size)))
        base_env["PYTHONUNBUFFERED"] = "1"
        base_env[LAUNCHER_PID_VARIABLE] = str(os.getpid())  # the ranks end when it is gone
        try:
            for rank in range(self.world_size):
                rank_env = {
                    **base_env,
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(self.world_size),
                    "LOCAL_WORLD_SIZE": str(self.world_size),
                    "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(port),
                }
                argv = [*command, *self.worker_args]
                proc = subprocess.Popen(
                    argv if self._shaped is None else self._shaped.command(rank, argv),
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                self.procs.append(proc)
                tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
                self._tails.append(tail)
                pump = threading.Thread(
                    target=_pump, args=(proc.stdout, rank, self.sink, tail), daemon=True
                )
                pump.start()
                self._pumps.append(pump)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """End every rank (SIGTERM, then SIGKILL after the grace period)."""
        try:
            stop_ranks(self.procs, self.grace_s)
            for pump in self._pumps:
                pump.join(timeout=5)
        finally:
            if self._shaped is not None:
                self._shaped.remove()

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
                    silent = self._silent_ranks(codes)
                    status, reason, failed_rank = _classify(codes, exit_order, silent)
                    if EXIT_NO_SPACE in codes:  # the cause whatever the peers then did
                        status, failed_rank = "failed", None  # its one line says it all
                        reason = no_space_reason(self.run_dir or Path.cwd())
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
            log_tail=list(self._tails[failed_rank or 0]) if self._tails else [],
        )

    def _silent_ranks(self, codes: list[int | None]) -> dict[int, str]:
        """Ranks still running after others failed that had stopped answering, each with
        what shows it: a stopped process, or silence while the others' collectives timed out
        waiting for it. A rank that merely waits for a crashed peer is not named."""
        alive = [rank for rank, code in enumerate(codes) if code is None]
        if not alive:
            return {}
        silent: dict[int, str] = {}
        for rank in alive:
            if _process_state(self.procs[rank].pid) in ("T", "t"):
                silent[rank] = f"rank {rank} stopped answering: its process was stopped (state T)"
        if silent:
            return silent
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed and all(_timed_out(self._failure_reason(rank)) for rank in failed):
            for rank in alive:
                quiet_s = self._seconds_since_last_record(rank)
                waited = f", silent for {quiet_s:.0f} s" if quiet_s is not None else ""
                silent[rank] = (
                    f"rank {rank} stopped answering (still running{waited} while "
                    "its peers' collectives timed out waiting for it)"
                )
        return silent

    def _rank_file(self, rank: int) -> Path | None:
        return None if self.run_dir is None else self.run_dir / f"rank-{rank}.jsonl"

    def _failure_reason(self, rank: int) -> str:
        """The reason in rank ``rank``'s last ``failed`` record ("" when there is none)."""
        path = self._rank_file(rank)
        if path is None or not path.is_file():
            return ""
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 8192))
            lines = handle.read().decode("utf-8", "replace").splitlines()
        for line in reversed(lines):
            if '"event":"failed"' in line:
                with contextlib.suppress(ValueError, AttributeError):
                    return str(json.loads(line).get("reason", ""))
        return ""

    def _seconds_since_last_record(self, rank: int) -> float | None:
        path = self._rank_file(rank)
        if path is None or not path.is_file():
            return None
        return max(0.0, time.time() - path.stat().st_mtime)


def launch(group: GroupPlan, names: object, sink: Callable[[str], None] | None) -> LocalGroup:
    """The local launcher for a planned group (:mod:`scalebench.launchers` names this entry;
    ``names`` are the Kubernetes objects' and do not apply here)."""
    return LocalGroup.for_plan(group, sink=sink)


def _process_state(pid: int) -> str:
    """The one-letter state of process ``pid`` from ``/proc`` ("" where unknown)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[0]


def _timed_out(reason: str) -> bool:
    """Whether a rank's failure reads as a collective that waited in vain."""
    return bool(re.search(r"timed out|timeout", reason, re.IGNORECASE))


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


def _classify(
    codes: list[int | None], exit_order: list[int], silent: dict[int, str] | None = None
) -> tuple[str, str, int | None]:
    """(status, reason, first failed rank) from the ranks' exit codes, blaming first a
    rank that had stopped answering (``silent``: rank -> what shows it), then the rank
    that exited first (the others usually fail because it did)."""
    nonzero = {rank: codes[rank] for rank in exit_order if codes[rank] not in (None, 0)}
    if all(code == EXIT_DIVERGED for code in nonzero.values()):
        return "diverged", "the loss stopped being finite", next(iter(nonzero))
    culprits = {r: c for r, c in nonzero.items() if c != EXIT_DIVERGED}
    exits = [f"rank {r} exited with {_describe_exit(c)}" for r, c in culprits.items()]
    if silent:
        return "failed", "; ".join([*silent.values(), *exits]), next(iter(silent))
    return "failed", "; ".join(exits), next(iter(culprits))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"
