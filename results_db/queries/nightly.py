"""The nightly trend of a task and the regressions the detector flagged."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from results_db import analytics
from results_db.models import (
    Regression,
    Run,
    Sweep,
)
from results_db.regressions import NIGHT
from scalebench.statuses import SUCCEEDED

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class RegressionRow:
    """A flag raised by the nightly detector; ``change`` 0.08 = 8 % worse."""

    sweep_id: str
    sweep_created_at: datetime
    task: str
    world_size: int
    metric: str
    baseline_mean: float
    latest_mean: float | None
    change: float | None
    p_value: float | None
    reason: str
    flagged_at: datetime


def regression_flags(
    conn: Connection,
    *,
    sweep_ids: list[str] | None = None,
    task: str | None = None,
    limit: int = 200,
) -> list[RegressionRow]:
    """Flagged regressions, newest sweep first."""
    query = (
        select(
            Regression.sweep_id,
            Sweep.created_at,
            Regression.task,
            Regression.world_size,
            Regression.metric,
            Regression.baseline_mean,
            Regression.latest_mean,
            Regression.change,
            Regression.p_value,
            Regression.reason,
            Regression.flagged_at,
        )
        .join(Sweep, Sweep.id == Regression.sweep_id)
        .order_by(Sweep.created_at.desc(), Regression.world_size, Regression.metric)
        .limit(limit)
    )
    if sweep_ids is not None:
        query = query.where(Regression.sweep_id.in_(sweep_ids))
    if task is not None:
        query = query.where(Regression.task == task)
    return [RegressionRow(*row) for row in conn.execute(query)]


@dataclass(frozen=True)
class TrendPoint:
    """One scheduled sweep at one worker count: TTA by MLPerf's rule, mean samples/s."""

    sweep_id: str
    created_at: datetime
    config_hash: str
    world_size: int
    runs: int
    succeeded: int
    time_to_accuracy_s: float | None
    samples_per_s: float | None
    network: str = "host"  # the link profile: each is a trend of its own
    night: datetime | None = None  # the night it stands for (None: when it was created)

    @property
    def when(self) -> datetime:
        """Where the point sits in the trend: its night, or when it was created."""
        return self.night or self.created_at


def nightly_trend(conn: Connection, task: str, nights: int = 90) -> list[TrendPoint]:
    """Per scheduled sweep of ``task`` (the newest ``nights``), worker count and network
    profile, oldest first."""
    sweeps = (
        select(Sweep.id, Sweep.created_at, Sweep.config_hash, Sweep.night)
        .where(Sweep.task == task, Sweep.trigger == "scheduled")
        .order_by(NIGHT.desc())
        .limit(nights)
        .subquery()
    )
    rows = conn.execute(
        select(
            sweeps.c.id,
            sweeps.c.created_at,
            sweeps.c.config_hash,
            sweeps.c.night,
            Run.world_size,
            Run.status,
            Run.goal_reached,
            Run.time_to_accuracy_s,
            Run.samples_per_s,
            Run.network,
        ).join(Run, Run.sweep_id == sweeps.c.id)
    ).all()
    grouped: dict[tuple[str, int, str], list[Any]] = defaultdict(list)
    for row in rows:
        grouped[(row.id, row.world_size, row.network)].append(row)
    points = []
    for (sweep_id, world_size, network), runs in grouped.items():
        ok = [r for r in runs if r.status == SUCCEEDED]
        tta = analytics.converged_mean(
            [
                r.time_to_accuracy_s if r.status == SUCCEEDED and r.goal_reached else None
                for r in runs
            ]
        )
        rate = [r.samples_per_s for r in ok if r.samples_per_s is not None]
        points.append(
            TrendPoint(
                sweep_id=sweep_id,
                created_at=runs[0].created_at,
                config_hash=runs[0].config_hash,
                world_size=world_size,
                runs=len(runs),
                succeeded=len(ok),
                time_to_accuracy_s=tta.mean if tta else None,
                samples_per_s=sum(rate) / len(rate) if rate else None,
                network=network,
                night=runs[0].night,
            )
        )
    return sorted(points, key=lambda p: (p.when, p.sweep_id, p.world_size))
