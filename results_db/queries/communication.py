"""Where step time goes (phases) and the all-reduce benchmark's latency and bandwidth."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, func, select

from results_db import analytics
from results_db.models import (
    AllReduceCurve,
    AllReduceSample,
    Run,
)
from workers.records import PHASES

if TYPE_CHECKING:
    pass
from results_db.queries.sweeps import profile_shown

# The step's phases (named once, in workers.records) as the run table's per-run sums.
PHASE_TOTAL_COLUMNS = tuple(getattr(Run, f"{phase}_total_s") for phase in PHASES)


@dataclass(frozen=True)
class PhaseRow:
    """Seconds in each phase per worker count: per step and rank (:func:`phase_means`), or
    per rank over a whole run to the goal (:func:`phase_totals`)."""

    world_size: int
    data_s: float
    forward_s: float
    loss_s: float
    backward_s: float
    gradient_packing_s: float
    communication_s: float
    optimizer_s: float


@dataclass(frozen=True)
class AllReduceRow:
    """One point of an all-reduce curve: latency in seconds, bandwidths in bytes per second,
    of ``samples`` timed repetitions; ``sweep``, ``device`` (cpu, cuda) and ``network`` (the
    link profile) say whose it is when several curves are drawn together."""

    backend: str
    dtype: str
    world_size: int
    bytes: int
    p50_s: float
    mean_s: float
    p95_s: float
    algbw: float
    busbw: float
    samples: int
    sweep: str = ""
    device: str = ""
    network: str = "host"


def _point(
    backend: str, dtype: str, world_size: int, nbytes: int, seconds: list[float], **whose: str
) -> AllReduceRow:
    """The curve's point at ``nbytes`` from its repetitions' ``seconds`` (p50, mean and p95
    latency, algbw and busbw); ``whose``: the sweep, device and network it belongs to."""
    summary = analytics.summarise_allreduce([seconds], nbytes, world_size)
    return AllReduceRow(
        backend,
        dtype,
        world_size,
        nbytes,
        summary.p50,
        summary.mean,
        summary.p95,
        summary.algbw,
        summary.busbw,
        summary.samples,
        **whose,
    )


def allreduce_summary(conn: Connection, sweep_id: str | None = None) -> list[AllReduceRow]:
    """p50/mean/p95 latency and algbw/busbw per (backend, network, dtype, world size, bytes)."""
    query = select(
        AllReduceSample.backend,
        Run.network,
        AllReduceSample.dtype,
        AllReduceSample.world_size,
        AllReduceSample.bytes,
        AllReduceSample.run_id,
        AllReduceSample.rank,
        AllReduceSample.repetition,
        AllReduceSample.seconds,
    ).join(Run, Run.id == AllReduceSample.run_id)
    if sweep_id is not None:
        query = query.where(Run.sweep_id == sweep_id)
    # (config) -> (run, repetition) -> slowest rank's seconds
    slowest: dict[tuple, dict[tuple[str, int], float]] = defaultdict(dict)
    for row in conn.execute(query):
        key = (row.backend, row.network, row.dtype, row.world_size, row.bytes)
        rep = (row.run_id, row.repetition)
        slowest[key][rep] = max(slowest[key].get(rep, 0.0), row.seconds)
    return [
        _point(backend, dtype, world_size, nbytes, list(reps.values()), network=network)
        for (backend, network, dtype, world_size, nbytes), reps in sorted(slowest.items())
    ]


def phase_means(conn: Connection, sweep_id: str, network: str | None = None) -> list[PhaseRow]:
    """Mean seconds per step and rank in each phase, per worker count, on one ``network``
    profile (None: the sweep's first).

    From the per-run totals stored at ingest (``run.step_records`` and
    ``run.<phase>_total_s``), so no step row is read: the same means as
    averaging every step row of the worker count's runs.
    """
    query = (
        select(
            Run.world_size, func.sum(Run.step_records), *(func.sum(t) for t in PHASE_TOTAL_COLUMNS)
        )
        .where(Run.sweep_id == sweep_id, Run.network == profile_shown(conn, sweep_id, network))
        .group_by(Run.world_size)
        .order_by(Run.world_size)
    )
    return [
        PhaseRow(world_size, *(float(value) / count for value in sums))
        for world_size, count, *sums in conn.execute(query)
        if count
    ]


def phase_totals(conn: Connection, sweep_id: str, network: str | None = None) -> list[PhaseRow]:
    """Seconds each rank spent in each phase to reach the goal, per worker count: the
    text's "total time spent in each step" against cluster size. A run's totals are
    divided by its ranks; the runs of a worker count that reached the goal are averaged.
    One ``network`` profile (None: the sweep's first)."""
    query = (
        select(Run.world_size, *(func.avg(t / Run.world_size) for t in PHASE_TOTAL_COLUMNS))
        .where(
            Run.sweep_id == sweep_id,
            Run.goal_reached.is_(True),
            Run.step_records > 0,
            Run.network == profile_shown(conn, sweep_id, network),
        )
        .group_by(Run.world_size)
        .order_by(Run.world_size)
    )
    return [PhaseRow(world_size, *map(float, means)) for world_size, *means in conn.execute(query)]


def allreduce_curves(
    conn: Connection, sweep_id: str, run_id: str | None = None
) -> list[AllReduceRow]:
    """The figures of :func:`allreduce_summary` for one sweep (``run_id``: that run of it
    alone), from the slowest rank's seconds per repetition that ingest stored
    (``allreduce_curve``): no scan of samples."""
    query = (
        select(
            Run.backend,
            Run.device,
            Run.network,
            AllReduceCurve.dtype,
            Run.world_size,
            AllReduceCurve.bytes,
            AllReduceCurve.slowest_s,
        )
        .join(Run, Run.id == AllReduceCurve.run_id)
        .where(Run.sweep_id == sweep_id)
    )
    rows = conn.execute(query if run_id is None else query.where(Run.id == run_id))
    by_config: dict[tuple[str, str, str, str, int, int], list[float]] = defaultdict(list)
    for backend, device, network, dtype, world_size, nbytes, seconds in rows:
        kind = device.split(":")[0]  # cuda:0 and cuda:1 hold the same kind of tensor
        by_config[(backend, kind, network, dtype, world_size, nbytes)].extend(seconds)
    return [
        _point(
            backend,
            dtype,
            world_size,
            nbytes,
            seconds,
            sweep=sweep_id,
            device=device,
            network=network,
        )
        for (backend, device, network, dtype, world_size, nbytes), seconds in sorted(
            by_config.items()
        )
    ]
