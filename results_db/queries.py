"""Named queries for the command line and the dashboard; each returns plain rows.

Every function takes a SQLAlchemy ``Connection`` and returns dataclass rows
(numbers in seconds, dollars, bytes and bytes/second, as named), computed
with the definitions of :mod:`results_db.analytics`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from results_db import analytics
from results_db.models import AllReduceSample, Price, Run, StepTiming, Sweep


@dataclass(frozen=True)
class SweepRow:
    id: str
    task: str
    trigger: str
    created_at: datetime
    outcome: str | None
    runs: int


@dataclass(frozen=True)
class PhaseRow:
    """Mean seconds per step and rank in each phase, per worker count."""

    world_size: int
    data_s: float
    forward_s: float
    loss_s: float
    backward_s: float
    communication_s: float
    optimizer_s: float


@dataclass(frozen=True)
class CostRow:
    world_size: int
    tta_s: float
    cost_regular: float
    cost_preemptible: float
    speedup: float
    price_index_regular: float
    price_index_preemptible: float


@dataclass(frozen=True)
class PriceRow:
    kind: str
    name: str
    regular_per_hour: float
    preemptible_per_hour: float
    source: str
    valid_from: datetime


@dataclass(frozen=True)
class AllReduceRow:
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


def latest_sweeps(conn: Connection, task: str | None = None, limit: int = 20) -> list[SweepRow]:
    """Newest sweeps first, with their run counts."""
    query = (
        select(Sweep.id, Sweep.task, Sweep.trigger, Sweep.created_at, Sweep.outcome,
               func.count(Run.id))
        .outerjoin(Run, Run.sweep_id == Sweep.id)
        .group_by(Sweep.id)
        .order_by(Sweep.created_at.desc())
        .limit(limit)
    )  # fmt: skip
    if task:
        query = query.where(Sweep.task == task)
    return [SweepRow(*row) for row in conn.execute(query)]


def scaling(conn: Connection, sweep_id: str) -> list[analytics.ScalingRow]:
    """Time-to-accuracy, speedup, compute speedup and efficiency per worker count."""
    runs = conn.execute(
        select(Run.world_size, Run.goal_reached, Run.time_to_accuracy_s,
               Run.time_to_accuracy_without_eval_s, Run.compute_s, Run.communication_ratio)
        .where(Run.sweep_id == sweep_id)
    ).all()  # fmt: skip
    return analytics.scaling_rows(runs)


def phase_breakdown(conn: Connection, sweep_id: str) -> list[PhaseRow]:
    """Mean seconds per step (per rank) in each phase, per worker count."""
    query = (
        select(
            Run.world_size,
            func.avg(StepTiming.data_s), func.avg(StepTiming.forward_s),
            func.avg(StepTiming.loss_s), func.avg(StepTiming.backward_s),
            func.avg(StepTiming.communication_s), func.avg(StepTiming.optimizer_s),
        )
        .join(Run, Run.id == StepTiming.run_id)
        .where(Run.sweep_id == sweep_id)
        .group_by(Run.world_size)
        .order_by(Run.world_size)
    )  # fmt: skip
    return [PhaseRow(*(row[0], *(float(v) for v in row[1:]))) for row in conn.execute(query)]


def prices_in_force(conn: Connection, at: datetime | None = None) -> list[PriceRow]:
    """For each (kind, name), the newest price valid at ``at`` (default: now)."""
    rows = conn.execute(
        select(Price.kind, Price.name, Price.regular_per_hour, Price.preemptible_per_hour,
               Price.source, Price.valid_from)
        .order_by(Price.kind, Price.name, Price.valid_from)
    ).all()  # fmt: skip
    latest: dict[tuple[str, str], Any] = {}
    for price in rows:
        valid_from = price.valid_from
        if at is not None and _aware(valid_from) > _aware(at):
            continue
        latest[(price.kind, price.name)] = price
    return [
        PriceRow(p.kind, p.name, float(p.regular_per_hour), float(p.preemptible_per_hour),
                 p.source, p.valid_from)
        for p in latest.values()
    ]  # fmt: skip


def _aware(moment: datetime) -> datetime:
    from datetime import UTC

    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class PriceMissing(LookupError):
    """No price for the instance or GPU type at that date."""


def costs(
    conn: Connection,
    sweep_id: str,
    instance: str = "n1-standard-4",
    gpu: str | None = "nvidia-tesla-t4",
    at: datetime | None = None,
) -> list[CostRow]:
    """Cost and price index per worker count, for regular and preemptible prices."""
    prices = {(p.kind, p.name): p for p in prices_in_force(conn, at)}
    node = prices.get(("instance", instance))
    if node is None:
        raise PriceMissing(f"no price for instance type {instance!r}")
    card = None
    if gpu is not None:
        card = prices.get(("gpu", gpu))
        if card is None:
            raise PriceMissing(f"no price for GPU type {gpu!r}")
    regular = (node.regular_per_hour, card.regular_per_hour if card else 0.0)
    preemptible = (node.preemptible_per_hour, card.preemptible_per_hour if card else 0.0)
    rows = [r for r in scaling(conn, sweep_id) if r.tta_s is not None]
    base = next((r for r in rows if r.world_size == 1), None)
    if base is None:
        return []
    base_regular = analytics.cost(1, *regular, base.tta_s)
    base_preemptible = analytics.cost(1, *preemptible, base.tta_s)
    result = []
    for row in rows:
        reg = analytics.cost(row.world_size, *regular, row.tta_s)
        pre = analytics.cost(row.world_size, *preemptible, row.tta_s)
        result.append(
            CostRow(
                world_size=row.world_size,
                tta_s=row.tta_s,
                cost_regular=reg,
                cost_preemptible=pre,
                speedup=row.speedup or 1.0,
                price_index_regular=analytics.price_index(reg, base_regular, row.speedup or 1.0),
                price_index_preemptible=analytics.price_index(
                    pre, base_preemptible, row.speedup or 1.0
                ),
            )
        )
    return result


def allreduce_summary(conn: Connection, sweep_id: str | None = None) -> list[AllReduceRow]:
    """p50/mean/p95 latency and algbw/busbw per (backend, dtype, world size, bytes)."""
    query = select(
        AllReduceSample.backend, AllReduceSample.dtype, AllReduceSample.world_size,
        AllReduceSample.bytes, AllReduceSample.run_id, AllReduceSample.rank,
        AllReduceSample.repetition, AllReduceSample.seconds,
    )  # fmt: skip
    if sweep_id is not None:
        query = query.join(Run, Run.id == AllReduceSample.run_id).where(Run.sweep_id == sweep_id)
    # (config) -> (run, repetition) -> slowest rank's seconds
    slowest: dict[tuple, dict[tuple[str, int], float]] = defaultdict(dict)
    for row in conn.execute(query):
        key = (row.backend, row.dtype, row.world_size, row.bytes)
        rep = (row.run_id, row.repetition)
        slowest[key][rep] = max(slowest[key].get(rep, 0.0), row.seconds)
    rows = []
    for (backend, dtype, world_size, nbytes), reps in sorted(slowest.items()):
        summary = analytics.summarise_allreduce([list(reps.values())], nbytes, world_size)
        rows.append(
            AllReduceRow(backend, dtype, world_size, nbytes, summary.p50, summary.mean,
                         summary.p95, summary.algbw, summary.busbw, summary.samples)
        )  # fmt: skip
    return rows
