"""Start a training group as local processes, on emulated nodes, and see it through.

A group of ``k`` workers with ``ranks_per_node`` ``p`` runs as ``ceil(k / p)``
nodes of this machine, each started by the node starter the worker image runs
in a pod (:class:`workers.node.Node`): its ranks get the environment torchrun
sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), the node's share of this
machine's cores (and of its GPUs, where the ranks use them) divided among them,
and their output is streamed line by line with a ``[rank r]`` prefix. Each rank
runs in its own session, and the group is ended as a whole:

- when one rank fails, the others get SIGTERM (then SIGKILL after a grace
  period), because a synchronous group cannot go on without it; a rank that
  found its results filesystem full (exit status 4) makes the group's reason
  ``no space left on <mount point>``, whatever its peers did next;
- on the wall-clock ``timeout_s``, every rank is stopped the same way;
- when the launcher itself is interrupted or killed by an exception, too.

torchrun's elastic agent is not used: it restarts failed groups, which a
benchmark must not do, and has no wall-clock limit. No orphan survives
:meth:`LocalGroup.wait`.

On this host's own network the launcher holds the group's rendezvous store
itself, on a port the system chose, as torchrun's agent does
(``TORCHELASTIC_USE_AGENT_STORE``): no other process can take the port between
its choice and rank 0's start.

On a shaped network profile (``100mbit``, ``1gbit``...) every node runs in its
own network namespace on an emulated link (:mod:`operators.shaped_network`),
built before the first rank starts and removed with the group, however it ends:
the ranks of one node talk over its loopback, unshaped, as the GPUs of one
server do; only the links between nodes are shaped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.group import GroupResult
from operators.shaped_network import ShapedNetwork
from scalebench.diskspace import no_space_reason
from scalebench.host import visible_gpus
from scalebench.network import NetworkProfile
from scalebench.nodes import NodeShape
from scalebench.rank import EXIT_DIVERGED, EXIT_NO_SPACE, LAUNCHER_PID_VARIABLE
from scalebench.stacks import rank_environment
from scalebench.statuses import DIVERGED, FAILED, SUCCEEDED, TIMED_OUT
from workers.node import Node, available_cpus, describe_exit, shares, stop_ranks

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan


# Where an arm of a duet says it is ready, in its own run folder (workers.duet).
DUET_READY_FILE = ".duet-ready"


def duet_meeting(group: GroupPlan) -> dict[str, str]:
    """The variables by which an arm of a duet meets its round's other arms before its timed
    run (:mod:`workers.duet`): its own ready file, and every arm's."""
    from workers.duet import ARMS_VARIABLE, READY_VARIABLE

    arms = [Path(group.sweep_dir) / arm / DUET_READY_FILE for arm in group.arms]
    return {
        READY_VARIABLE: str(group.run_dir / DUET_READY_FILE),
        ARMS_VARIABLE: os.pathsep.join(map(str, arms)),
    }


class LocalGroup:
    """``world_size`` local ranks of ``python -m workers.run <worker_args>``, on nodes of
    ``ranks_per_node`` ranks (one node per rank by default).

    :meth:`start` launches them, :meth:`wait` follows them to the end (or the
    time limit) and always leaves no rank running, :meth:`stop` ends them
    early (e.g. when an Airflow task is killed). ``sink`` receives every
    output line, prefixed with its rank (default: print to stdout). ``gpus``: the
    host's GPU ids the ranks take, one each (``None``: the environment's GPUs as they
    are, rank ``r`` on its node's ``cuda:LOCAL_RANK``); ``cpus``: the host's cores the
    nodes divide among them (``None``: this process's).
    """

    def __init__(
        self,
        worker_args: Sequence[str],
        world_size: int,
        *,
        ranks_per_node: int = 1,
        grace_s: float = 5.0,
        env: dict[str, str] | None = None,
        sink: Callable[[str], None] | None = None,
        master_addr: str = "127.0.0.1",
        run_dir: Path | None = None,
        network: NetworkProfile | None = None,
        gpus: Sequence[str] | None = None,
        python: str | None = None,
        cpus: Sequence[int] | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        self.worker_args = list(worker_args)
        self.world_size = world_size
        self.shape = NodeShape(world_size, ranks_per_node)
        self.grace_s = grace_s
        self.env = dict(os.environ if env is None else env)
        self.sink = sink or (lambda line: print(line, flush=True))
        self.master_addr = master_addr
        self.run_dir = run_dir  # where the ranks write (to tell which one fell silent)
        self.network = network or NetworkProfile()
        self.gpus = None if gpus is None else list(gpus)
        self.python = python  # None: this interpreter
        # the cores its nodes divide among them (None: this process's); an arm of a duet
        # has its own (scalebench.pairing)
        self.cpus = None if cpus is None else list(cpus)
        self._shaped: ShapedNetwork | None = None
        self._store: Any = None  # the rendezvous store this process holds, unshaped
        self.nodes: list[Node] = []
        self._started = 0.0

    @classmethod
    def for_plan(cls, group: GroupPlan, **options: Any) -> LocalGroup:
        """The planned ``group`` on this host: its run directory and data directory as they
        are, its nodes, and a GPU of this host for each rank where the ranks use one."""
        argv = group.worker_argv(results_dir=str(group.run_dir), data_dir=group.data_dir)
        ids = visible_gpus() if group.request.gpus_per_worker else []
        options.setdefault("gpus", ids if len(ids) >= group.world_size else None)
        if group.stack is not None:  # its interpreter, with its variables
            options["env"] = rank_environment(group.stack, options.get("env") or os.environ)
            options["python"] = shutil.which(group.stack.python) or group.stack.python
        if group.duet:  # an arm of a duet: on its own cores, beside the round's other arms
            options["cpus"] = group.cpus
            options["env"] = {**(options.get("env") or os.environ), **duet_meeting(group)}
        return cls(
            argv,
            group.world_size,
            ranks_per_node=group.request.ranks_per_node,
            run_dir=group.run_dir,
            network=group.network,
            **options,
        )

    @property
    def procs(self) -> list[subprocess.Popen[str]]:
        """Every rank's process, in rank order."""
        return [proc for node in self.nodes for proc in node.procs]

    @property
    def _tails(self) -> list[Any]:
        return [tail for node in self.nodes for tail in node.tails]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        self._started = time.monotonic()
        master_addr, shape = self.master_addr, self.shape
        base_env = dict(self.env)
        if self.network.shaped:
            self._shaped = ShapedNetwork(shape.nodes, self.network)
            self._shaped.create()
            master_addr = self._shaped.master_addr
            self.sink(
                f"[launcher] {shape.label} ranks (nodes × ranks per node) on an emulated "
                f"{self.network} network between nodes, {self._shaped.subnet} on bridge "
                f"{self._shaped.bridge}"
            )
        elif shape.nodes > 1 and shape.local_world_size > 1:
            self.sink(f"[launcher] {shape.label} ranks (nodes × ranks per node) on this host")
        # Shaped, each node has its own namespace, where nothing else listens.
        port = self._hold_store(base_env) if self._shaped is None else 29500
        base_env[LAUNCHER_PID_VARIABLE] = str(os.getpid())  # the ranks end when it is gone
        cpus = shares(available_cpus() if self.cpus is None else self.cpus, shape.nodes)
        try:
            for index in range(shape.nodes):
                env = dict(base_env)
                if self._shaped is not None:
                    env.update(self._shaped.environment(index, shape.local_world_size))
                node = Node(
                    shape,
                    index,
                    self.worker_args,
                    master_addr=master_addr,
                    master_port=port,
                    env=env,
                    sink=self.sink,
                    cpus=cpus[index],
                    gpus=None
                    if self.gpus is None
                    else [self.gpus[r] for r in shape.ranks_of(index)],
                    wrap=None if self._shaped is None else self._wrap_for(index),
                    python=self.python,
                )
                self.nodes.append(node)
                node.start()
        except BaseException:
            self.stop()
            raise

    def _hold_store(self, env: dict[str, str]) -> int:
        """Start the group's rendezvous store in this process and tell the ranks to join it
        as clients; its port."""
        from torch.distributed import TCPStore

        self._store = TCPStore(
            self.master_addr, 0, self.world_size, is_master=True, wait_for_workers=False
        )
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        return int(self._store.port)

    def _wrap_for(self, node: int) -> Callable[[list[str]], list[str]]:
        shaped = self._shaped
        assert shaped is not None
        return lambda command: shaped.command(node, command)

    def stop(self) -> None:
        """End every rank (SIGTERM, then SIGKILL after the grace period)."""
        try:
            stop_ranks(self.procs, self.grace_s)
            for node in self.nodes:
                node.join_output()
        finally:
            self._store = None  # closes its socket
            if self._shaped is not None:
                self._shaped.remove()

    def wait(self, timeout_s: float) -> GroupResult:
        """Follow the group until it ends, a rank fails, or ``timeout_s`` passes."""
        status, reason, failed_rank = SUCCEEDED, "", None
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
                        status, failed_rank = FAILED, None  # its one line says it all
                        reason = no_space_reason(self.run_dir or Path.cwd())
                    break
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    status = TIMED_OUT
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
        return DIVERGED, "the loss stopped being finite", next(iter(nonzero))
    culprits = {r: c for r, c in nonzero.items() if c != EXIT_DIVERGED}
    exits = [f"rank {r} exited with {describe_exit(c)}" for r, c in culprits.items()]
    if silent:
        return FAILED, "; ".join([*silent.values(), *exits]), next(iter(silent))
    return FAILED, "; ".join(exits), next(iter(culprits))
