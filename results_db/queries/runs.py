"""One run: its facts, events, environment and loss and metric curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, cast, func, select

from results_db.models import (
    EpochEval,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
)
from scalebench.nodes import shape_label
from scalebench.run_metrics import RUN_METRICS
from workers.records import FIRST_VERSION_WITH_PACKING

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class RunInfo:
    """One run, as the runs table and a run's page show it (seconds, samples/s); its run
    metrics (:mod:`scalebench.run_metrics`) by name, each in its unit (None: not measured)."""

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
    gradient_packing_s: float = 0.0
    records_version: int | None = None  # before 3: communication includes packing
    contention_share: float | None = None  # the share of its cores others took (None: unknown)
    contended: bool = False  # that share above the threshold when it was loaded
    hardware: str | None = None  # processor (+ GPUs) the ranks ran on
    ingested_at: datetime | None = None  # when it was last loaded (a running run: how far)
    ranks_per_node: int = 1  # as asked: the run's shape is shape_label(world_size, it)
    stack: str = ""  # the stack it ran (scalebench.stacks); empty: the sweep named none
    pairing: str = ""  # how its round's arms ran (scalebench.pairing): duet or interleaved
    # the transports its traffic took (scalebench.transports); empty: not known or not used
    transport_within_node: str = ""
    transport_between_nodes: str = ""
    metrics: Mapping[str, float | int | None] = field(default_factory=dict, hash=False)

    @property
    def shape(self) -> str:
        """``nodes×ranks per node``, e.g. ``2×4`` (:mod:`scalebench.nodes`)."""
        return shape_label(self.world_size, self.ranks_per_node)

    @property
    def communication_includes_packing(self) -> bool:
        """Recorded before packing was timed apart (``workers.records.RECORDS_NOTE``)."""
        return self.records_version is None or self.records_version < FIRST_VERSION_WITH_PACKING


_FACTS = tuple(f.name for f in fields(RunInfo) if f.name != "metrics")
# the run's facts, then its metrics: each a column of ``run`` of the same name
_RUN_COLUMNS = tuple(getattr(Run, name) for name in (*_FACTS, *(m.name for m in RUN_METRICS)))


def _run_info(row: Sequence[Any]) -> RunInfo:
    """A :class:`RunInfo` from a row of :data:`_RUN_COLUMNS`."""
    facts, measured = row[: len(_FACTS)], row[len(_FACTS) :]
    names = (metric.name for metric in RUN_METRICS)
    return RunInfo(*facts, metrics=dict(zip(names, measured, strict=True)))


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
    return [_run_info(row) for row in conn.execute(query)]


def run_info(conn: Connection, run_id: str) -> RunInfo | None:
    """One run, or None when there is no such run."""
    row = conn.execute(select(*_RUN_COLUMNS).where(Run.id == run_id)).first()
    return _run_info(row) if row is not None else None


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
    cpu: str | None = None  # the processor (recorded since the CPU model was)
    torch_threads: int | None = None
    executable: str | None = None  # the interpreter (recorded since stacks were)
    numpy: str | None = None
    # the variables the rank's stack set (scalebench.stacks); empty: it ran no stack
    stack_env: Mapping[str, str] = field(default_factory=dict, hash=False)


def _stack_env(details: Mapping[str, Any]) -> dict[str, str]:
    stack = details.get("stack")
    env = stack.get("env") if isinstance(stack, dict) else None
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


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
            RunEnvironment.details,
        )
        .where(RunEnvironment.run_id == run_id)
        .order_by(RunEnvironment.rank)
    )
    return [
        EnvironmentRow(
            *r[:6],
            tuple(str(g) for g in (r.gpus or ())),
            cpu=str((r.details or {}).get("cpu") or "") or None,
            torch_threads=(r.details or {}).get("torch_threads"),
            executable=(r.details or {}).get("executable"),
            numpy=(r.details or {}).get("numpy"),
            stack_env=_stack_env(r.details or {}),
        )
        for r in rows
    ]


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
