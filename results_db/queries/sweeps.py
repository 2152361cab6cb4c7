"""Sweeps: their scaling rows, outcome and networks, listings for the dashboard, what runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, func, select

from results_db import analytics
from results_db.models import (
    Base,
    EpochEval,
    Run,
    Sweep,
)
from results_db.queries.stacks import sweep_stacks
from scalebench.statuses import RUNNING, SUCCEEDED

if TYPE_CHECKING:
    pass


def scaling(
    conn: Connection, sweep_id: str, network: str | None = None, stack: str | None = None
) -> list[analytics.ScalingRow]:
    """Time-to-accuracy, speedup, compute speedup and efficiency per worker count, of the
    runs on one ``network`` profile (None: the sweep's first, see :func:`sweep_networks`) and,
    where given, of one ``stack`` (None: every run, whatever its stack)."""
    same_stack = () if stack is None else (Run.stack == stack,)
    runs = conn.execute(
        select(
            Run.world_size,
            Run.status,
            Run.goal_reached,
            Run.time_to_accuracy_s,
            Run.time_to_accuracy_without_eval_s,
            Run.compute_s,
            Run.communication_ratio,
            Run.contended,
        ).where(
            Run.sweep_id == sweep_id,
            Run.network == profile_shown(conn, sweep_id, network),
            *same_stack,
        )
    ).all()
    return analytics.scaling_rows(runs)


def scaling_by_network(conn: Connection, sweep_id: str) -> list[tuple[str, analytics.ScalingRow]]:
    """:func:`scaling` of every network profile of the sweep, each row with its profile."""
    return [
        (network, row)
        for network in sweep_networks(conn, sweep_id)
        for row in scaling(conn, sweep_id, network)
    ]


def sweep_stacks_run(conn: Connection, sweep_id: str) -> list[str]:
    """The stacks a sweep's runs ran, in the order its request names them (empty: it named
    none; see :func:`results_db.queries.stacks.sweep_stacks`)."""
    stored = set(
        conn.execute(
            select(Run.stack).where(Run.sweep_id == sweep_id, Run.stack != "").distinct()
        ).scalars()
    )
    named = sweep_stacks(conn, sweep_id)
    return [n for n in named if n in stored] + sorted(stored - set(named))


def sweep_networks(conn: Connection, sweep_id: str) -> list[str]:
    """The network profiles a sweep's runs ran on, in the order its request names them
    (``["host"]`` for a sweep with no runs yet, or from before profiles existed)."""
    stored = set(
        conn.execute(select(Run.network).where(Run.sweep_id == sweep_id).distinct()).scalars()
    )
    config = conn.execute(select(Sweep.config).where(Sweep.id == sweep_id)).scalar()
    asked = [str(n) for n in (config or {}).get("network", ["host"])]
    ordered = [n for n in asked if n in stored] + sorted(stored - set(asked))
    return ordered or ["host"]


def profile_shown(conn: Connection, sweep_id: str, network: str | None) -> str:
    """``network``, or the sweep's first profile when None: what a per-profile query reads."""
    return network if network is not None else sweep_networks(conn, sweep_id)[0]


def last_metric_values(conn: Connection, sweep_id: str) -> dict[str, float | None]:
    """Per run of the sweep, its goal metric at its last evaluation (None: never evaluated)."""
    query = (
        select(EpochEval.run_id, EpochEval.metric_value)
        .join(Run, Run.id == EpochEval.run_id)
        .where(Run.sweep_id == sweep_id)
        .order_by(EpochEval.run_id, EpochEval.epoch)
    )
    return {run_id: value for run_id, value in conn.execute(query)}


def sweep_outcome(conn: Connection, sweep_id: str) -> str | None:
    """A loaded sweep's outcome: succeeded, partial, failed, cancelled or running.

    Raises ``sqlalchemy.exc.NoResultFound`` when there is no such sweep.
    """
    return conn.execute(select(Sweep.outcome).where(Sweep.id == sweep_id)).scalar_one()


def succeeded_runs(conn: Connection, sweep_id: str) -> int:
    """How many runs of the sweep succeeded."""
    return conn.execute(
        select(func.count()).where(Run.sweep_id == sweep_id, Run.status == SUCCEEDED)
    ).scalar_one()


def sweeps_with_results(conn: Connection, sweep_ids: Sequence[str]) -> set[str]:
    """Those of ``sweep_ids`` with at least one succeeded run: something a page can show."""
    if not sweep_ids:
        return set()
    query = (
        select(Run.sweep_id)
        .where(Run.sweep_id.in_(list(sweep_ids)), Run.status == SUCCEEDED)
        .distinct()
    )
    return set(conn.execute(query).scalars())


def sweep_runs(conn: Connection, sweep_id: str) -> list[Row[Any]]:
    """Every column of each run of a sweep (times in seconds, as the ``run`` table names them)."""
    return list(conn.execute(select(Run).where(Run.sweep_id == sweep_id)).all())


# -- queries of the dashboard (dash_app) ------------------------------------------------------
# Small, read-only, index-friendly: large tables are only ever read by run id
# (the leading column of their primary keys) and reduced in SQL, so a page never
# pulls per-step rows into Python.


@dataclass(frozen=True)
class SweepInfo:
    """A sweep and what was asked of it; ``world_sizes`` as requested."""

    id: str
    task: str
    trigger: str
    created_at: datetime
    finished_at: datetime | None
    outcome: str | None
    config_hash: str
    light: bool
    backend: str
    world_sizes: tuple[int, ...]
    repeats: int


def _sweep_info(row: Any) -> SweepInfo:
    config = row.config or {}
    sizes = config.get("world_sizes") or config.get("workers") or ()
    return SweepInfo(
        id=row.id,
        task=row.task,
        trigger=row.trigger,
        created_at=row.created_at,
        finished_at=row.finished_at,
        outcome=row.outcome,
        config_hash=row.config_hash,
        light=bool(config.get("light", False)),
        backend=str(config.get("backend", "")),
        world_sizes=tuple(int(s) for s in sizes if isinstance(s, int)),
        repeats=int(config.get("repeats", 1) or 1),
    )


_SWEEP_COLUMNS = (
    Sweep.id,
    Sweep.task,
    Sweep.trigger,
    Sweep.created_at,
    Sweep.finished_at,
    Sweep.outcome,
    Sweep.config_hash,
    Sweep.config,
)


def sweep_infos(
    conn: Connection,
    *,
    task: str | None = None,
    trigger: str | None = None,
    limit: int = 500,
) -> list[SweepInfo]:
    """Newest sweeps first, optionally of one task and/or trigger."""
    query = select(*_SWEEP_COLUMNS).order_by(Sweep.created_at.desc(), Sweep.id).limit(limit)
    if task is not None:
        query = query.where(Sweep.task == task)
    if trigger is not None:
        query = query.where(Sweep.trigger == trigger)
    return [_sweep_info(row) for row in conn.execute(query)]


def sweep_info(conn: Connection, sweep_id: str) -> SweepInfo | None:
    """One sweep, or None when there is no such sweep."""
    row = conn.execute(select(*_SWEEP_COLUMNS).where(Sweep.id == sweep_id)).first()
    return _sweep_info(row) if row is not None else None


def latest_sweep_per_task(conn: Connection, trigger: str | None = None) -> list[SweepInfo]:
    """The newest sweep of every task (of one trigger if given), by task name."""
    newest = select(Sweep.task, func.max(Sweep.created_at).label("created_at")).group_by(Sweep.task)
    if trigger is not None:
        newest = newest.where(Sweep.trigger == trigger)
    newest = newest.subquery()
    query = select(*_SWEEP_COLUMNS).join(
        newest, (Sweep.task == newest.c.task) & (Sweep.created_at == newest.c.created_at)
    )
    if trigger is not None:
        query = query.where(Sweep.trigger == trigger)
    latest: dict[str, SweepInfo] = {}
    for row in conn.execute(query.order_by(Sweep.task, Sweep.id)):
        latest.setdefault(row.task, _sweep_info(row))
    return list(latest.values())


def baseline_of(conn: Connection, sweep_id: str) -> str | None:
    """The previous sweep of the same task and configuration (same trigger), on the same
    hardware where the runs recorded it (else the previous one on any), or None."""
    sweep = conn.execute(
        select(Sweep.task, Sweep.config_hash, Sweep.trigger, Sweep.created_at).where(
            Sweep.id == sweep_id
        )
    ).first()
    if sweep is None:
        return None
    earlier = (
        select(Sweep.id)
        .where(
            Sweep.task == sweep.task,
            Sweep.config_hash == sweep.config_hash,
            Sweep.trigger == sweep.trigger,
            Sweep.created_at < sweep.created_at,
        )
        .order_by(Sweep.created_at.desc())
        .limit(1)
    )
    hardware = select(Run.hardware).where(Run.sweep_id == sweep_id, Run.hardware.is_not(None))
    same = conn.execute(
        earlier.where(
            select(Run.id).where(Run.sweep_id == Sweep.id, Run.hardware.in_(hardware)).exists()
        )
    ).scalar()
    return same or conn.execute(earlier).scalar()


@dataclass(frozen=True)
class RunProgress:
    """A group still running, as its last load found it: epochs evaluated, the newest value
    of the goal metric (``None`` before the first evaluation), seconds since its common
    start to its last load (a running run has no end yet)."""

    id: str
    sweep_id: str
    task: str
    world_size: int
    repeat: int
    epochs: int
    steps: int
    goal_metric: str | None
    last_metric: float | None
    elapsed_s: float | None


def running_runs(conn: Connection) -> list[RunProgress]:
    """Every run stored as ``running`` (loaded while its ranks wrote), oldest first."""
    rows = conn.execute(
        select(
            Run.id,
            Run.sweep_id,
            Run.task,
            Run.world_size,
            Run.repeat,
            Run.epochs,
            Run.steps,
            Run.goal_metric,
            Run.started_at,
            Run.ingested_at,
        )
        .where(Run.status == RUNNING)
        .order_by(Run.started_at, Run.id)
    ).all()
    progress = []
    for row in rows:
        last = conn.execute(
            select(EpochEval.metric_value)
            .where(EpochEval.run_id == row.id)
            .order_by(EpochEval.epoch.desc())
            .limit(1)
        ).scalar()
        elapsed = (
            (row.ingested_at - row.started_at).total_seconds()
            if row.started_at and row.ingested_at
            else None
        )
        progress.append(
            RunProgress(
                row.id,
                row.sweep_id,
                row.task,
                row.world_size,
                row.repeat,
                row.epochs,
                row.steps,
                row.goal_metric,
                last,
                elapsed,
            )
        )
    return progress


def schema_ready(conn: Connection) -> None:
    """Ask every table for every column this code reads, and for no row: raises the
    database's own error ("no such column", "relation ... does not exist") when it has no
    results schema, or an older one than this code reads (a migration that added a column
    not run yet). A newer schema, with more, passes."""
    for table in Base.metadata.sorted_tables:
        conn.execute(select(*table.columns).limit(0)).all()


def sweep_version(conn: Connection, sweep_id: str) -> tuple[Any, ...]:
    """What changes when a sweep's rows change: outcome, run count and newest ingest.

    Ingest replaces a run as a whole and stamps ``ingested_at``, so figures
    computed from a sweep stay valid while this tuple is unchanged.
    """
    outcome = conn.execute(select(Sweep.outcome).where(Sweep.id == sweep_id)).scalar()
    runs, newest = conn.execute(
        select(func.count(Run.id), func.max(Run.ingested_at)).where(Run.sweep_id == sweep_id)
    ).one()
    return (outcome, runs, newest)


def task_names(conn: Connection) -> list[str]:
    """Tasks with at least one sweep, by name."""
    return list(conn.execute(select(Sweep.task).distinct().order_by(Sweep.task)).scalars())
