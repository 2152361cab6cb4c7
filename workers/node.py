"""Start one node's ranks, follow them, and stop them together: the node starter.

A node runs ``local_world_size`` copies of ``python -m workers.run`` with the
environment torchrun sets (:meth:`scalebench.nodes.NodeShape.rank_environment`),
each in its own session, with its output passed on line by line behind a
``[rank r]`` prefix (the global rank). Each rank gets its own GPU (the node's
``cuda:LOCAL_RANK``; :class:`Node` can be given which of the host's GPUs the
node owns) and its share of the node's CPU cores: pinned to them where each rank
gets at least one whole core, with that many intra-op threads unless
``OMP_NUM_THREADS`` says otherwise.

The same code starts every node there is:

- on this machine, :mod:`operators.local_launcher` makes one :class:`Node` per
  emulated node (in the node's network namespace when the links are shaped) and
  follows all the ranks of the group itself;
- in a pod, ``python -m workers.node <workers.run arguments>`` (the worker
  image's entry point) reads its node from ``GROUP_RANK`` (or the Indexed Job's
  ``JOB_COMPLETION_INDEX``), ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``, starts its
  ranks and waits: when one fails the node's other ranks are stopped, the failed
  global rank is named on the last line and in the pod's termination message,
  and the node exits with that rank's status (3 when every failed rank
  diverged, 4 when one found its results filesystem full).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from scalebench.nodes import NodeShape
from scalebench.rank import EXIT_DIVERGED, EXIT_FAILED, EXIT_NO_SPACE, EXIT_REFUSED

LOG_TAIL_LINES = 50  # each rank's last output lines, kept for the verdict
# Where Kubernetes reads a container's termination message (the pod status shows it).
TERMINATION_LOG = Path("/dev/termination-log")

Wrap = Callable[[list[str]], list[str]]  # how a rank's command runs (e.g. in a namespace)


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


def shares(items: Sequence[int], parts: int) -> list[list[int]]:
    """``items`` cut into ``parts`` equal runs, in order (the remainder unused); empty runs
    when there are fewer items than parts (nothing to pin to)."""
    size = len(items) // parts if parts else 0
    return [list(items[i * size : (i + 1) * size]) for i in range(parts)]


def available_cpus() -> list[int]:
    """The CPUs this process may run on, ascending."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


class Node:
    """The ranks of node ``node`` of ``shape``: :meth:`start` launches them.

    ``argv`` is what every rank runs after ``python -m workers.run``; ``env`` the
    environment they share (the rank's variables are added); ``cpus`` the cores the
    node may use (default: this process's); ``gpus`` the host's GPU ids the node owns,
    one per rank, set as ``CUDA_VISIBLE_DEVICES`` (None: the environment's as it is);
    ``wrap`` how each rank's command runs (None: as it is); ``python`` the interpreter
    (None: this one; a stack's, see :mod:`scalebench.stacks`). ``procs``, ``tails`` and
    ``ranks`` hold the started ranks, in global-rank order.
    """

    def __init__(
        self,
        shape: NodeShape,
        node: int,
        argv: Sequence[str],
        *,
        master_addr: str,
        master_port: int,
        env: Mapping[str, str] | None = None,
        sink: Callable[[str], None] | None = None,
        cpus: Sequence[int] | None = None,
        gpus: Sequence[str] | None = None,
        wrap: Wrap | None = None,
        python: str | None = None,
    ) -> None:
        self.shape, self.node = shape, node
        self.python = python or sys.executable
        self.argv = list(argv)
        self.master_addr, self.master_port = master_addr, master_port
        self.env = dict(os.environ if env is None else env)
        self.sink = sink or (lambda line: print(line, flush=True))
        self.cpus = available_cpus() if cpus is None else list(cpus)
        self.gpus = None if gpus is None else list(gpus)
        self.wrap = wrap or (lambda command: command)
        self.ranks = list(shape.ranks_of(node))
        self.procs: list[subprocess.Popen[str]] = []
        self.tails: list[deque[str]] = []
        self._pumps: list[threading.Thread] = []

    def rank_cpus(self) -> list[list[int]]:
        """Each local rank's cores: its own share where every rank gets a whole core, else
        the node's cores, shared (empty: the node has none of its own, nothing pinned)."""
        ranks = self.shape.local_world_size
        if len(self.cpus) >= ranks:
            return shares(self.cpus, ranks)
        return [list(self.cpus) for _ in range(ranks)]

    def start(self) -> None:
        """Launch every rank of the node (a rank that cannot start stops those started)."""
        command = [self.python, "-m", "workers.run", *self.argv]
        try:
            for local_rank, cpus in enumerate(self.rank_cpus()):
                self._start_rank(local_rank, cpus, command)
        except BaseException:
            self.stop(grace_s=0.0)
            raise

    def _start_rank(self, local_rank: int, cpus: list[int], command: list[str]) -> None:
        rank = self.shape.global_rank(self.node, local_rank)
        env = {
            **self.env,
            **self.shape.rank_environment(
                self.node, local_rank, self.master_addr, self.master_port
            ),
            "PYTHONUNBUFFERED": "1",
        }
        # A thread per core of its own (one where cores are shared).
        own = len(cpus) if len(self.cpus) >= self.shape.local_world_size else 1
        env.setdefault("OMP_NUM_THREADS", str(max(1, own)))
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        proc = subprocess.Popen(
            self.wrap(command),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.procs.append(proc)
        if cpus and hasattr(os, "sched_setaffinity"):
            # Before the interpreter has started a thread: the ones torch starts inherit it.
            with contextlib.suppress(ProcessLookupError, OSError):
                os.sched_setaffinity(proc.pid, cpus)
        tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self.tails.append(tail)
        pump = threading.Thread(
            target=_pump, args=(proc.stdout, rank, self.sink, tail), daemon=True
        )
        pump.start()
        self._pumps.append(pump)

    def stop(self, grace_s: float) -> None:
        """End every rank (SIGTERM, then SIGKILL after ``grace_s``) and drain their output."""
        stop_ranks(self.procs, grace_s)
        self.join_output()

    def join_output(self) -> None:
        """Wait (a few seconds at most) for the ranks' last output lines to be passed on."""
        for pump in self._pumps:
            pump.join(timeout=5)

    def wait(self, grace_s: float = 5.0) -> tuple[int, str]:
        """Follow the node's ranks until all have exited or one has failed (the others are
        then stopped); (exit status for the node, what happened)."""
        first: int | None = None
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if failed and first is None:
                first = failed[0]
                # Peers that stop together (divergence) exit within moments: let them.
                deadline = time.monotonic() + min(grace_s, 2.0)
                while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
                    time.sleep(0.02)
                break
            if all(code == 0 for code in codes):
                break
            time.sleep(0.05)
        self.stop(grace_s)
        if first is None:
            return 0, f"node {self.node}: its {len(self.procs)} rank(s) finished"
        return self.verdict([p.returncode for p in self.procs], first)

    def verdict(self, codes: Sequence[int | None], first: int) -> tuple[int, str]:
        """The node's exit status and reason from its ranks' ``codes`` (``first``: the
        local rank seen to fail first)."""
        nonzero = [c for c in codes if c not in (None, 0)]
        rank = self.ranks[first]
        if EXIT_NO_SPACE in nonzero:
            culprit = self.ranks[list(codes).index(EXIT_NO_SPACE)]
            return EXIT_NO_SPACE, f"rank {culprit} found its results filesystem full"
        if all(c == EXIT_DIVERGED for c in nonzero):
            return EXIT_DIVERGED, f"rank {rank} diverged: the loss stopped being finite"
        if codes[first] == EXIT_DIVERGED:  # a peer failed for real: blame that one
            first = next(i for i, c in enumerate(codes) if c not in (None, 0, EXIT_DIVERGED))
            rank = self.ranks[first]
        code = codes[first]
        # A signal (or no status seen) is a failure of the node; a status is passed on.
        status = code if code is not None and code > 0 else EXIT_FAILED
        return status, f"rank {rank} exited with {describe_exit(code)}"


def describe_exit(code: int | None) -> str:
    """A rank's exit as its verdict words it: ``status 1``, ``signal SIGKILL``, or ``no exit
    status`` (never seen to end)."""
    if code is None:
        return "no exit status"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def cpu_quota(path: Path = CPU_MAX) -> int | None:
    """The CPUs this container's cgroup lets it use, rounded up (``None``: no quota, or no
    cgroup v2 to read it from)."""
    try:
        quota, period = path.read_text(encoding="ascii").split()[:2]
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        return None


def pod_cpus(env: dict[str, str], ranks: int) -> list[int]:
    """The cores a pod's node may pin its ranks to: the pod's own where the kubelet gave it
    whole cores (the static CPU manager: its affinity is its request), none where its
    affinity is the whole machine's and only a CPU quota bounds it. There each rank gets
    the quota's share of threads (``OMP_NUM_THREADS``, where not set), not the machine's."""
    cpus, quota = available_cpus(), cpu_quota()
    if quota is None or quota >= len(cpus):
        return cpus
    env.setdefault("OMP_NUM_THREADS", str(max(1, quota // ranks)))
    return []


def node_from(env: Mapping[str, str]) -> tuple[NodeShape, int]:
    """The shape of the group and this node's index, from the environment a pod is given:
    ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` (default 1) and ``GROUP_RANK`` (else the Indexed
    Job's ``JOB_COMPLETION_INDEX``, else 0)."""

    def number(name: str, default: int) -> int:
        raw = env.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{name} must be a whole number, got {raw!r}") from None

    world_size, per_node = number("WORLD_SIZE", 1), number("LOCAL_WORLD_SIZE", 1)
    node = number("GROUP_RANK", number("JOB_COMPLETION_INDEX", 0))
    shape = NodeShape(world_size, per_node)
    if not 0 <= node < shape.nodes:
        raise ValueError(f"node {node} is outside a group of {shape.label} (nodes × ranks)")
    return shape, node


def _write_termination_message(text: str) -> None:
    """Where Kubernetes looks for it, when this runs in a pod (elsewhere: nothing)."""
    with contextlib.suppress(OSError):
        if TERMINATION_LOG.parent.is_dir() and TERMINATION_LOG.exists():
            TERMINATION_LOG.write_text(text[:4096])


def main(argv: Sequence[str] | None = None) -> int:
    """Run this node's ranks of ``python -m workers.run <argv>``; the node's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        shape, node_index = node_from(os.environ)
    except ValueError as exc:
        print(f"[node] refused: {exc}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    env = dict(os.environ)
    cpus = pod_cpus(env, shape.local_world_size)
    node = Node(
        shape,
        node_index,
        args,
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(env.get("MASTER_PORT", "29500")),
        env=env,
        cpus=cpus,
    )

    def forward(signum: int, _frame: object) -> None:  # the pod is being deleted
        node.stop(grace_s=5.0)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    print(f"[node {node_index}] starting ranks {node.ranks[0]}-{node.ranks[-1]} of {shape.label}")
    node.start()
    status, what = node.wait()
    print(f"[node {node_index}] {what}", flush=True)
    if status:
        _write_termination_message(what)
    return status


if __name__ == "__main__":
    sys.exit(main())
