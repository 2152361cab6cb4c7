"""Named queries for the command line and the dashboard; each returns plain rows.

Every function takes a SQLAlchemy ``Connection`` and returns dataclass rows
(numbers in seconds, dollars, bytes and bytes/second, as named), computed
with the definitions of :mod:`results_db.analytics`, or plain values: a
count, an outcome, table rows as tuples (or, for exports, pandas DataFrames).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, Row, cast, func, select

from results_db import analytics
from results_db.models import (
    AllReduceCurve,
    AllReduceSample,
    EpochEval,
    Price,
    Regression,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
    Sweep,
)
from workers.records import PHASES

if TYPE_CHECKING:
    import pandas as pd


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
    communication_s: float
    optimizer_s: float


@dataclass(frozen=True)
class CostRow:
    world_size: int
    time_to_accuracy_s: float
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


def scaling(
    conn: Connection, sweep_id: str, network: str | None = None
) -> list[analytics.ScalingRow]:
    """Time-to-accuracy, speedup, compute speedup and efficiency per worker count, of the
    runs on one ``network`` profile (None: the sweep's first, see :func:`sweep_networks`)."""
    runs = conn.execute(
        select(
            Run.world_size,
            Run.goal_reached,
            Run.time_to_accuracy_s,
            Run.time_to_accuracy_without_eval_s,
            Run.compute_s,
            Run.communication_ratio,
        ).where(Run.sweep_id == sweep_id, Run.network == _profile(conn, sweep_id, network))
    ).all()
    return analytics.scaling_rows(runs)


def scaling_by_network(conn: Connection, sweep_id: str) -> list[tuple[str, analytics.ScalingRow]]:
    """:func:`scaling` of every network profile of the sweep, each row with its profile."""
    return [
        (network, row)
        for network in sweep_networks(conn, sweep_id)
        for row in scaling(conn, sweep_id, network)
    ]


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


def _profile(conn: Connection, sweep_id: str, network: str | None) -> str:
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


def prices_in_force(conn: Connection, at: datetime | None = None) -> list[PriceRow]:
    """For each (kind, name), the newest price valid at ``at`` (default: now)."""
    rows = conn.execute(
        select(
            Price.kind,
            Price.name,
            Price.regular_per_hour,
            Price.preemptible_per_hour,
            Price.source,
            Price.valid_from,
        ).order_by(Price.kind, Price.name, Price.valid_from)
    ).all()
    latest: dict[tuple[str, str], Any] = {}
    for price in rows:
        valid_from = price.valid_from
        if at is not None and _aware(valid_from) > _aware(at):
            continue
        latest[(price.kind, price.name)] = price
    return [
        PriceRow(
            p.kind,
            p.name,
            float(p.regular_per_hour),
            float(p.preemptible_per_hour),
            p.source,
            p.valid_from,
        )
        for p in latest.values()
    ]


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
    network: str | None = None,
) -> list[CostRow]:
    """Cost and price index per worker count, for regular and preemptible prices, of the
    runs on one ``network`` profile (None: the sweep's first)."""
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
    rows = [r for r in scaling(conn, sweep_id, network) if r.time_to_accuracy_s is not None]
    base = next((r for r in rows if r.world_size == 1), None)
    if base is None:
        return []
    base_regular = analytics.cost(1, *regular, base.time_to_accuracy_s)
    base_preemptible = analytics.cost(1, *preemptible, base.time_to_accuracy_s)
    result = []
    for row in rows:
        reg = analytics.cost(row.world_size, *regular, row.time_to_accuracy_s)
        pre = analytics.cost(row.world_size, *preemptible, row.time_to_accuracy_s)
        result.append(
            CostRow(
                world_size=row.world_size,
                time_to_accuracy_s=row.time_to_accuracy_s,
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
    rows = []
    for (backend, network, dtype, world_size, nbytes), reps in sorted(slowest.items()):
        summary = analytics.summarise_allreduce([list(reps.values())], nbytes, world_size)
        rows.append(
            AllReduceRow(
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
                network=network,
            )
        )
    return rows


def sweep_outcome(conn: Connection, sweep_id: str) -> str | None:
    """A loaded sweep's outcome: succeeded, partial, failed, cancelled or running.

    Raises ``sqlalchemy.exc.NoResultFound`` when there is no such sweep.
    """
    return conn.execute(select(Sweep.outcome).where(Sweep.id == sweep_id)).scalar_one()


def succeeded_runs(conn: Connection, sweep_id: str) -> int:
    """How many runs of the sweep succeeded."""
    return conn.execute(
        select(func.count()).where(Run.sweep_id == sweep_id, Run.status == "succeeded")
    ).scalar_one()


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
    """The previous sweep of the same task and configuration (same trigger), or None."""
    sweep = conn.execute(
        select(Sweep.task, Sweep.config_hash, Sweep.trigger, Sweep.created_at).where(
            Sweep.id == sweep_id
        )
    ).first()
    if sweep is None:
        return None
    return conn.execute(
        select(Sweep.id)
        .where(
            Sweep.task == sweep.task,
            Sweep.config_hash == sweep.config_hash,
            Sweep.trigger == sweep.trigger,
            Sweep.created_at < sweep.created_at,
        )
        .order_by(Sweep.created_at.desc())
        .limit(1)
    ).scalar()


@dataclass(frozen=True)
class RunProgress:
    """A group still running, as its last load found it: epochs evaluated, the newest value
    of the goal metric (``None`` before the first evaluation), seconds since its common
    start to its newest record."""

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
            Run.ended_at,
        )
        .where(Run.status == "running")
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
            (row.ended_at - row.started_at).total_seconds()
            if row.started_at and row.ended_at
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
    """Touch the oldest and the newest tables of the schema: raises the database's own
    error when it has no results schema, or one older than this code reads."""
    conn.execute(select(Sweep.id).limit(1)).all()
    conn.execute(select(AllReduceCurve.run_id).limit(1)).all()


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


@dataclass(frozen=True)
class RunInfo:
    """One run, as the runs table and a run's page show it (seconds, samples/s)."""

    id: str
    sweep_id: str
    task: str
    world_size: int
    repeat: int
    backend: str
    device: str
    precision: str
    compile: str
    compiled: bool
    compile_s: float
    recompilations: int | None
    variant: str
    light: bool
    status: str
    reason: str
    started_at: datetime | None
    ended_at: datetime | None
    goal_reached: bool
    goal_metric: str | None
    goal_target: float | None
    time_to_accuracy_s: float | None
    time_to_accuracy_without_eval_s: float | None
    eval_s: float
    compute_s: float
    communication_s: float
    step_s: float
    communication_ratio: float | None
    epochs: int
    steps: int
    samples_per_s: float | None
    quarantined_lines: int
    placement: str = "pack"
    shared_node: bool = False  # a spread run whose ranks shared a node
    network: str = "host"  # the link profile (scalebench.network)


_RUN_COLUMNS = tuple(getattr(Run, name) for name in RunInfo.__dataclass_fields__)


def run_infos(
    conn: Connection,
    *,
    sweep_id: str | None = None,
    search: str | None = None,
    status: str | None = None,
    task: str | None = None,
    limit: int = 5000,
) -> list[RunInfo]:
    """Runs, newest first; ``search`` matches a part of the run id, task or failure reason."""
    query = select(*_RUN_COLUMNS).order_by(Run.started_at.desc().nulls_last(), Run.id).limit(limit)
    if sweep_id is not None:
        query = (
            query.where(Run.sweep_id == sweep_id)
            .order_by(None)
            .order_by(Run.world_size, Run.repeat)
        )
    if status is not None:
        query = query.where(Run.status == status)
    if task is not None:
        query = query.where(Run.task == task)
    if search:
        needle = search.lower()
        query = query.where(
            func.lower(Run.id).contains(needle, autoescape=True)
            | func.lower(Run.task).contains(needle, autoescape=True)
            | func.lower(Run.reason).contains(needle, autoescape=True)
        )
    return [RunInfo(*row) for row in conn.execute(query)]


def run_info(conn: Connection, run_id: str) -> RunInfo | None:
    """One run, or None when there is no such run."""
    row = conn.execute(select(*_RUN_COLUMNS).where(Run.id == run_id)).first()
    return RunInfo(*row) if row is not None else None


@dataclass(frozen=True)
class EventRow:
    rank: int
    t_s: float
    event: str
    details: dict[str, Any]


def run_events(conn: Connection, run_id: str) -> list[EventRow]:
    """A run's events (start, goal_reached, diverged, finished, failed) in time order."""
    rows = conn.execute(
        select(RunEvent.rank, RunEvent.t_s, RunEvent.event, RunEvent.details)
        .where(RunEvent.run_id == run_id)
        .order_by(RunEvent.t_s, RunEvent.rank, RunEvent.id)
    )
    return [EventRow(r.rank, r.t_s, r.event, dict(r.details or {})) for r in rows]


@dataclass(frozen=True)
class EnvironmentRow:
    rank: int
    host: str | None
    python: str | None
    torch: str | None
    cuda: str | None
    nccl: str | None
    gpus: tuple[str, ...]


def run_environments(conn: Connection, run_id: str) -> list[EnvironmentRow]:
    """Versions, devices and host of each rank of a run."""
    rows = conn.execute(
        select(
            RunEnvironment.rank,
            RunEnvironment.host,
            RunEnvironment.python,
            RunEnvironment.torch,
            RunEnvironment.cuda,
            RunEnvironment.nccl,
            RunEnvironment.gpus,
        )
        .where(RunEnvironment.run_id == run_id)
        .order_by(RunEnvironment.rank)
    )
    return [EnvironmentRow(*r[:6], tuple(str(g) for g in (r.gpus or ()))) for r in rows]


@dataclass(frozen=True)
class CurvePoint:
    """Training loss of rank 0 over one time bucket: seconds since the common start."""

    t_s: float
    loss: float | None
    steps: int


def loss_curve(conn: Connection, run_id: str, points: int = 500) -> list[CurvePoint]:
    """Rank 0's training loss averaged over at most ``points`` equal time buckets.

    ``t_s`` of a bucket is its last step's time; the buckets span the run's
    steps from its common start to its last step.
    """
    last = conn.execute(
        select(func.max(StepTiming.t_s)).where(StepTiming.run_id == run_id, StepTiming.rank == 0)
    ).scalar()
    if last is None:
        return []
    # ``points`` buckets of equal width; the last step falls into bucket ``points - 1``.
    width = max(float(last), 1e-9) / (points - 0.5)
    bucket = cast(StepTiming.t_s / width, Integer).label("bucket")
    rows = conn.execute(
        select(func.max(StepTiming.t_s), func.avg(StepTiming.loss), func.count())
        .where(StepTiming.run_id == run_id, StepTiming.rank == 0)
        .group_by(bucket)
        .order_by(bucket)
    )
    return [CurvePoint(float(t), None if loss is None else float(loss), n) for t, loss, n in rows]


@dataclass(frozen=True)
class EvalPoint:
    """One evaluation: seconds since the common start and the goal metric's value."""

    epoch: int
    t_s: float
    metric_value: float | None
    loss: float | None


def eval_curve(conn: Connection, run_id: str) -> list[EvalPoint]:
    """A run's evaluations in epoch order."""
    rows = conn.execute(
        select(EpochEval.epoch, EpochEval.t_s, EpochEval.metric_value, EpochEval.loss)
        .where(EpochEval.run_id == run_id)
        .order_by(EpochEval.epoch)
    )
    return [EvalPoint(*row) for row in rows]


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
        .where(Run.sweep_id == sweep_id, Run.network == _profile(conn, sweep_id, network))
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
            Run.network == _profile(conn, sweep_id, network),
        )
        .group_by(Run.world_size)
        .order_by(Run.world_size)
    )
    return [PhaseRow(world_size, *map(float, means)) for world_size, *means in conn.execute(query)]


def allreduce_curves(conn: Connection, sweep_id: str) -> list[AllReduceRow]:
    """The figures of :func:`allreduce_summary` for one sweep, from the slowest rank's
    seconds per repetition that ingest stored (``allreduce_curve``): no scan of samples."""
    rows = conn.execute(
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
    by_config: dict[tuple[str, str, str, str, int, int], list[float]] = defaultdict(list)
    for backend, device, network, dtype, world_size, nbytes, seconds in rows:
        kind = device.split(":")[0]  # cuda:0 and cuda:1 hold the same kind of tensor
        by_config[(backend, kind, network, dtype, world_size, nbytes)].extend(seconds)
    result = []
    for key, seconds in sorted(by_config.items()):
        backend, device, network, dtype, world_size, nbytes = key
        summary = analytics.summarise_allreduce([seconds], nbytes, world_size)
        result.append(
            AllReduceRow(
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
                sweep=sweep_id,
                device=device,
                network=network,
            )
        )
    return result


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


def nightly_trend(conn: Connection, task: str, nights: int = 90) -> list[TrendPoint]:
    """Per scheduled sweep of ``task`` (the newest ``nights``), worker count and network
    profile, oldest first."""
    sweeps = (
        select(Sweep.id, Sweep.created_at, Sweep.config_hash)
        .where(Sweep.task == task, Sweep.trigger == "scheduled")
        .order_by(Sweep.created_at.desc())
        .limit(nights)
        .subquery()
    )
    rows = conn.execute(
        select(
            sweeps.c.id,
            sweeps.c.created_at,
            sweeps.c.config_hash,
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
        ok = [r for r in runs if r.status == "succeeded"]
        tta = analytics.converged_mean(
            [
                r.time_to_accuracy_s if r.status == "succeeded" and r.goal_reached else None
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
            )
        )
    return sorted(points, key=lambda p: (p.created_at, p.sweep_id, p.world_size))


def task_names(conn: Connection) -> list[str]:
    """Tasks with at least one sweep, by name."""
    return list(conn.execute(select(Sweep.task).distinct().order_by(Sweep.task)).scalars())


STEP_EXPORT_COLUMNS = (
    "rank",
    "epoch",
    "step",
    "t_s",
    "samples",
    "loss",
    "lr",
    *(f"{phase}_s" for phase in PHASES),
)
EPOCH_EXPORT_COLUMNS = ("epoch", "t_s", "metric_value", "loss", "eval_s", "train_s", "wall_s")


def iter_run_steps(conn: Connection, run_id: str, batch: int = 5000) -> Iterator[tuple[Any, ...]]:
    """Every step row of a run (columns :data:`STEP_EXPORT_COLUMNS`), streamed in batches."""
    result = conn.execution_options(yield_per=batch).execute(
        select(*(getattr(StepTiming, name) for name in STEP_EXPORT_COLUMNS))
        .where(StepTiming.run_id == run_id)
        .order_by(StepTiming.rank, StepTiming.epoch, StepTiming.step)
    )
    for row in result:
        yield tuple(row)


def run_epochs(conn: Connection, run_id: str) -> list[tuple[Any, ...]]:
    """A run's evaluations (columns :data:`EPOCH_EXPORT_COLUMNS`) in epoch order."""
    rows = conn.execute(
        select(*(getattr(EpochEval, name) for name in EPOCH_EXPORT_COLUMNS))
        .where(EpochEval.run_id == run_id)
        .order_by(EpochEval.epoch)
    )
    return [tuple(row) for row in rows]


def iter_export_frames(
    conn: Connection, sweep_id: str, run_ids: list[str]
) -> Iterator[tuple[str, pd.DataFrame]]:
    """A sweep's ``runs``, then the ``evaluations`` and ``steps`` of ``run_ids`` (its runs):
    whole table rows as pandas DataFrames, the tables' column names and units (seconds).

    One table is read at a time, when the caller asks for it.
    """
    import pandas as pd

    tables = {
        "runs": select(Run).where(Run.sweep_id == sweep_id),
        "evaluations": select(EpochEval).where(EpochEval.run_id.in_(run_ids)),
        "steps": select(StepTiming).where(StepTiming.run_id.in_(run_ids)),
    }
    for name, query in tables.items():
        yield name, pd.read_sql(query, conn)
