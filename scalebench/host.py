"""What this machine can do for a local group: GPUs, an MPI-enabled torch, emulated networks.

Validation reads these facts to refuse a request the local launcher could not
run, before any worker starts. Each probe is cheap or cached; torch is
imported only when GPUs or MPI are asked about.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scalebench.network import NetworkProfile

_CAP_NET_ADMIN, _CAP_SYS_ADMIN = 12, 21


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor, as people name it, with its family and model numbers, e.g. ``AMD EPYC
    (family 25, model 1)``: two machines that differ here can time (and, in their kernels'
    sums, compute) the same run differently. ``platform.processor()`` where there is no
    ``/proc/cpuinfo``."""
    import platform

    fields: dict[str, str] = {}
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or platform.machine() or "unknown"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    if "cpu family" in fields and "model" in fields:
        model += f" (family {fields['cpu family']}, model {fields['model']})"
    return model


@dataclass(frozen=True)
class CpuCounters:
    """CPU seconds spent since boot by the whole machine (every core) and by this process.

    ``host_busy_s`` counts user, nice, system and steal time (``/proc/stat``; steal is CPU
    another virtual machine took from this one). Interrupt time is left out: the softirq
    time of loopback traffic, which a local group's own collectives cause, belongs to no
    process. ``own_s`` is this process's user and system time, its threads and the children
    it has waited for included. Two readings apart give what others did meanwhile.
    """

    host_busy_s: float
    own_s: float


def cpu_counters(stat: Path = Path("/proc/stat")) -> CpuCounters | None:
    """This moment's :class:`CpuCounters` (None where ``/proc/stat`` cannot be read)."""
    try:
        line = stat.read_text(encoding="ascii").split("\n", 1)[0]
        ticks = [int(field) for field in line.split()[1:9]]  # user nice system idle ... steal
        user, nice, system, steal = ticks[0], ticks[1], ticks[2], ticks[7]
    except (OSError, ValueError, IndexError):
        return None
    own = os.times()
    return CpuCounters(
        host_busy_s=(user + nice + system + steal) / os.sysconf("SC_CLK_TCK"),
        own_s=own.user + own.system + own.children_user + own.children_system,
    )


def local_gpu_count() -> int:
    """CUDA devices this process can see (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus() -> list[str]:
    """The GPUs this process may give its ranks, as ``CUDA_VISIBLE_DEVICES`` names them
    (its entries where it is set, else ``0`` to ``n - 1``)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [entry.strip() for entry in listed.split(",")]
        # CUDA reads the list up to its first invalid entry ("-1" hides every GPU).
        cut = next((i for i, e in enumerate(entries) if not e or e.startswith("-")), None)
        return entries[:cut]
    return [str(index) for index in range(local_gpu_count())]


def mpi_available() -> bool:
    """Whether this torch build can start ``mpi`` process groups."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_mpi_available()


def _capabilities() -> int:
    """This process's effective capabilities as a bit mask (0 where unknown)."""
    try:
        for line in open("/proc/self/status", encoding="ascii"):  # noqa: SIM115
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _may_build_namespaces() -> bool:
    caps = _capabilities()
    return bool(caps >> _CAP_NET_ADMIN & 1 and caps >> _CAP_SYS_ADMIN & 1)


def _qdisc_works(kind: str, *arguments: str) -> bool:
    """Whether the kernel has queueing discipline ``kind``: tried on the loopback of a
    namespace that exists for this check only (gone when ``unshare`` exits)."""
    try:
        done = subprocess.run(
            ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", kind, *arguments],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def _emulation_problems(needs_delay: bool) -> tuple[str, ...]:
    problems = []
    if not _may_build_namespaces():
        problems.append(
            "the launcher needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to build network "
            "namespaces and shape their links"
        )
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    if missing:
        problems.append(f"{' and '.join(missing)} missing (Debian: apt-get install iproute2)")
    if problems:
        return tuple(problems)
    if not _qdisc_works("tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms"):
        problems.append("this kernel has no tbf queueing discipline (sch_tbf) to limit rates")
    if needs_delay and not _qdisc_works("netem", "delay", "1ms"):
        problems.append(
            "this kernel has no netem queueing discipline (sch_netem), which delays need; "
            "ask for the rate alone (e.g. 1gbit) or load sch_netem"
        )
    return tuple(problems)


def shaping_problems(profiles: Sequence[NetworkProfile]) -> list[str]:
    """What this machine lacks to emulate ``profiles`` locally (empty: nothing)."""
    shaped = [p for p in profiles if p.shaped]
    if not shaped:
        return []
    return list(_emulation_problems(any(p.delay_s for p in shaped)))


def cleaning_problem() -> str | None:
    """Why this process cannot take down what shaped groups left behind (None: it can)."""
    if not _may_build_namespaces():
        return "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), as shaped groups do"
    if shutil.which("ip") is None:
        return "ip is missing (Debian: apt-get install iproute2)"
    return None
