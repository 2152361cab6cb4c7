"""How the arms of a paired round run: one after the other, or all at once on their own cores.

A sweep of two or more stacks runs in rounds, each round every stack once. **Interleaved**,
the arms run one after the other, each with the whole machine. As a **duet** (after duet
benchmarking, Bulej et al. 2020), the arms of a round start together, each pinned to cores
of its own: whatever the machine does meanwhile (a neighbour, a frequency change, a noisy
disk) falls on both arms at once, so their ratio keeps less of it, and a round takes the time
of one arm. On a 2-core VM a duet's pair told 2.6–6.2× as much per machine-second as an
interleaved one (``benchmarks/stack_pairs.py``, docs/benchmarks.md).

A duet needs every arm's ranks on cores no other arm uses, on this host, without GPUs (two
arms would share one) and on the host's own network (an emulated link is built per group).
``pairing: auto`` (the default) runs a worker count as a duet where that holds and each rank
was given its threads (``threads_per_worker``: a rank's share of the machine would otherwise
shrink to its share of the arm's cores, which changes what it measures); ``duet`` runs every
worker count that fits as a duet, the others interleaved, and is refused where none fits.
Pure functions: the caller passes the cores it may use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

INTERLEAVED, DUET = "interleaved", "duet"
PAIRINGS = ("auto", INTERLEAVED, DUET)


def host_cores() -> list[int]:
    """The cores this process may run on, ascending: what a duet divides among its arms."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def arm_cores(world_size: int, threads_per_worker: int, arms: int, cores: int) -> int:
    """The cores one arm of a duet takes at ``world_size`` workers: each rank's threads
    (``threads_per_worker``; 0: an equal share of the machine's ``cores`` among the arms)."""
    if threads_per_worker > 0:
        return world_size * threads_per_worker
    return cores // arms


def duet_fits(world_size: int, threads_per_worker: int, arms: int, cores: int) -> bool:
    """Whether ``arms`` arms of ``world_size`` ranks each fit on ``cores`` cores at once,
    every rank on at least one core no other rank uses."""
    each = arm_cores(world_size, threads_per_worker, arms, cores)
    return each >= world_size and arms * each <= cores


def why_not_duet(values: dict[str, Any], on_this_host: bool, gpus_used: bool) -> str:
    """Why no worker count of the request can run as a duet (empty: some can, by the rest of
    the request; :func:`duet_sizes` says which)."""
    if len(values["stacks"]) < 2:
        return "a duet runs the arms of a paired round at once, and needs two or more stacks"
    if not on_this_host:
        return "a duet pins the arms to cores of this host: only the local launcher runs one"
    if gpus_used:
        return "a duet runs CPU ranks on cores of their own, and these ranks use GPUs"
    if any(profile.shaped for profile in values["network"]):
        return "a duet runs on the host's own network; an emulated link is built per group"
    return ""


def duet_sizes(
    world_sizes: Sequence[int], threads_per_worker: int, arms: int, cores: int
) -> tuple[int, ...]:
    """The worker counts whose ``arms`` arms fit on ``cores`` cores at once."""
    return tuple(k for k in world_sizes if duet_fits(k, threads_per_worker, arms, cores))


def resolve(values: dict[str, Any], on_this_host: bool, gpus_used: bool, cores: int) -> str:
    """The pairing a validated request holds: ``duet`` where some worker count runs as one,
    else ``interleaved``. ``auto`` is a duet only where each rank was given its threads;
    an asked ``duet`` that nothing can run raises ``ValueError`` naming why (with the
    numbers where it is the cores)."""
    asked = values["pairing"]
    if asked == INTERLEAVED:
        return INTERLEAVED
    problem = why_not_duet(values, on_this_host, gpus_used)
    threads, arms = values["threads_per_worker"], len(values["stacks"])
    if asked != DUET:  # auto
        if problem or threads <= 0:
            return INTERLEAVED
        return DUET if duet_sizes(values["workers"], threads, arms, cores) else INTERLEAVED
    if problem:
        raise ValueError(problem + "; ask for pairing interleaved")
    if not duet_sizes(values["workers"], threads, arms, cores):
        smallest = min(values["workers"])
        need = arms * smallest * max(1, threads)
        raise ValueError(
            f"{arms} arms of {smallest} worker(s) at {threads or 1} thread(s) each need "
            f"{need} cores at once, and this host gives {cores}; ask for fewer workers or "
            "threads_per_worker, or for pairing interleaved"
        )
    return DUET


def duet_cores(
    world_size: int, threads_per_worker: int, cores: Sequence[int], arms: int
) -> list[tuple[int, ...]]:
    """Each arm's cores in a duet at ``world_size`` (in the round's order), taken in turn from
    ``cores``; empty where the arms do not fit (the round is then interleaved)."""
    if not duet_fits(world_size, threads_per_worker, arms, len(cores)):
        return []
    each = arm_cores(world_size, threads_per_worker, arms, len(cores))
    ordered = sorted(cores)
    return [tuple(ordered[i * each : (i + 1) * each]) for i in range(arms)]


def described(
    way: str, world_sizes: Sequence[int], threads_per_worker: int, arms: int, cores: int
) -> str:
    """One line on how a paired request's rounds run on ``cores`` cores, for a log."""
    together = duet_sizes(world_sizes, threads_per_worker, arms, cores) if way == DUET else ()
    apart = [k for k in world_sizes if k not in together]
    parts = []
    if together:
        sizes = ", ".join(map(str, together))
        parts.append(f"as duets at {sizes} worker(s) (every arm at once, on cores of its own)")
    if apart:
        parts.append(f"one arm after the other at {', '.join(map(str, apart))} worker(s)")
    return f"the rounds' {arms} arms run " + "; ".join(parts)
