"""What a scaling projection reads: the all-reduce fits of a Task 0 sweep and the measured
points of a training sweep (``results_db.projection``)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, select

from results_db.models import AllReduceFit, Run, RunEvent, StepTiming, Sweep
from results_db.projection import (
    DEFAULT_PROJECTED_WORKERS,
    HeldOut,
    MeasuredPoint,
    Prices,
    ProjectedPoint,
    ProjectionRefused,
    RingFit,
    TrainingSweep,
    gradient_bytes,
    leave_one_out,
    project,
)
from results_db.queries.costs import worker_prices
from scalebench.statuses import SUCCEEDED
from scalebench.tasks import TASKS, TrainingSpec
from workers.records import PHASES

# data, forward, loss, backward, optimizer: what a step computes, whatever the link
STEP_COMPUTE_PHASES = tuple(p for p in PHASES if p not in ("gradient_packing", "communication"))
# what a rank does before the collective: the faster ranks wait for the slowest one there
BEFORE_COLLECTIVE = ("data", "forward", "loss", "backward")


def allreduce_fits(conn: Connection, sweep_id: str) -> list[RingFit]:
    """The stored ring-model fits of a Task 0 sweep, by backend, device, network, dtype and
    worker count."""
    rows = conn.execute(
        select(AllReduceFit)
        .where(AllReduceFit.sweep_id == sweep_id)
        .order_by(
            AllReduceFit.backend,
            AllReduceFit.device,
            AllReduceFit.network,
            AllReduceFit.dtype,
            AllReduceFit.world_size,
        )
    )
    # One request, one ranks per node: the shape of each fitted group.
    per_node = conn.execute(
        select(func.max(Run.ranks_per_node)).where(Run.sweep_id == sweep_id)
    ).scalar()
    return [
        RingFit(
            sweep_id=f.sweep_id,
            backend=f.backend,
            device=f.device,
            dtype=f.dtype,
            network=f.network,
            world_size=f.world_size,
            alpha_s=f.alpha_s,
            beta_bytes_per_s=f.beta_bytes_per_s,
            residual=f.residual,
            median_error=f.median_error,
            max_error=f.max_error,
            sizes=f.sizes,
            min_bytes=f.min_bytes,
            max_bytes=f.max_bytes,
            ranks_per_node=per_node or 1,
        )
        for f in rows
    ]


def mean_wait_s(conn: Connection, run_id: str) -> float:
    """Seconds per step a rank of run ``run_id`` waited, on average, for the slowest rank's
    computation to reach the collective: per step, the slowest rank's data + forward + loss +
    backward seconds minus the ranks' mean of them, averaged over steps (0 for one rank)."""
    before = sum(getattr(StepTiming, f"{phase}_s") for phase in BEFORE_COLLECTIVE)
    return _mean_over_steps(conn, run_id, func.max(before) - func.avg(before))


def mean_collective_wait_s(conn: Connection, run_id: str) -> float:
    """Seconds per step a rank of run ``run_id`` spent in the collective beyond the rank that
    spent least there, on average: per step, the ranks' mean communication seconds minus the
    least of them (the rank that arrived last waited for nobody), averaged over steps (0 for
    one rank). It holds every reason the ranks arrived apart, the link's own among them."""
    communication = StepTiming.communication_s
    return _mean_over_steps(conn, run_id, func.avg(communication) - func.min(communication))


def _mean_over_steps(conn: Connection, run_id: str, per_step_s: Any) -> float:
    """The mean over run ``run_id``'s steps of ``per_step_s``, an aggregate over one step's
    ranks (seconds); a step only one rank recorded is left out (0 when every step is)."""
    per_step = (
        select(per_step_s.label("wait_s"))
        .where(StepTiming.run_id == run_id)
        .group_by(StepTiming.epoch, StepTiming.step)
        .having(func.count() > 1)
        .subquery()
    )
    value = conn.execute(select(func.avg(per_step.c.wait_s))).scalar()
    return float(value or 0.0)


def run_parameters(conn: Connection, run_ids: list[str]) -> dict[str, int]:
    """The model's parameter count each run's start event recorded (run id -> count)."""
    rows = conn.execute(
        select(RunEvent.run_id, RunEvent.details).where(
            RunEvent.run_id.in_(run_ids), RunEvent.event == "start", RunEvent.rank == 0
        )
    )
    found: dict[str, int] = {}
    for run_id, details in rows:
        parameters = (details or {}).get("parameters")
        if isinstance(parameters, int) and parameters > 0:
            found[run_id] = parameters
    return found


def training_sweep(conn: Connection, sweep_id: str) -> TrainingSweep:
    """The successful runs of a training sweep as measured points, per (link, worker count).

    Raises :class:`ProjectionRefused` naming what is missing: no such sweep, not a training
    task, no successful run, runs without a parameter count.
    """
    return training_sweeps(conn, [sweep_id])


# what runs of several sweeps must share to be points of one projection
SHARED_CONFIGURATION = ("backend", "device", "precision", "variant", "compile", "ranks_per_node")


def training_sweeps(conn: Connection, sweep_ids: Sequence[str]) -> TrainingSweep:
    """The successful runs of one or more training sweeps of the same task and configuration
    (backend, device, precision, variant, compile setting) as measured points, per (link,
    worker count): e.g. a sweep on host and another on 10mbit. Runs of several sweeps at the
    same point are averaged together. The result's ``sweep_id`` joins the ids with commas.

    Raises :class:`ProjectionRefused` naming what is missing or differs: no such sweep, not a
    training task, sweeps of different tasks or configurations, no successful run, runs
    without a parameter count.
    """
    sweep_ids = list(dict.fromkeys(sweep_ids))
    task = _training_task(conn, sweep_ids)
    runs = _successful_runs(conn, sweep_ids)
    parameters = run_parameters(conn, [r.id for r in runs])
    unknown = [r.id for r in runs if r.id not in parameters]
    if unknown:
        raise ProjectionRefused(
            f"run {unknown[0]} does not record its parameter count, so its gradient bytes "
            "are unknown"
        )
    groups: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for run in runs:
        groups[(run.network, run.world_size)].append(run)
    points = [
        _measured_point(conn, network, world_size, group, parameters[group[0].id])
        for (network, world_size), group in sorted(groups.items())
    ]
    first = runs[0]
    return TrainingSweep(
        sweep_id=",".join(sweep_ids),
        task=task,
        backend=first.backend,
        device=first.device,
        precision=first.precision,
        variant=first.variant,
        points=tuple(points),
        ranks_per_node=first.ranks_per_node,
    )


def _training_task(conn: Connection, sweep_ids: list[str]) -> str:
    """The one training task of the stored sweeps ``sweep_ids``; raises
    :class:`ProjectionRefused` for a sweep not stored, not of a training task, or of
    another task than the first."""
    tasks = {}
    for one in sweep_ids:
        found = conn.execute(select(Sweep.task).where(Sweep.id == one)).first()
        if found is None:
            raise ProjectionRefused(f"sweep {one!r} is not in the results database")
        if not isinstance(TASKS.get(found.task), TrainingSpec):
            raise ProjectionRefused(
                f"sweep {one} is a {found.task} sweep; a projection starts from a training sweep"
            )
        tasks[one] = found.task
    if len(set(tasks.values())) > 1:
        first, other = sweep_ids[0], next(i for i in sweep_ids if tasks[i] != tasks[sweep_ids[0]])
        raise ProjectionRefused(
            f"sweeps {first} ({tasks[first]}) and {other} ({tasks[other]}) are of different "
            "tasks; one projection takes sweeps of one task"
        )
    return tasks[sweep_ids[0]]


def _successful_runs(conn: Connection, sweep_ids: list[str]) -> list[Any]:
    """The successful runs with step records of ``sweep_ids``, in the order the sweeps are
    named; raises :class:`ProjectionRefused` where there is none, or where two differ in
    :data:`SHARED_CONFIGURATION`."""
    runs = sorted(
        conn.execute(
            select(Run).where(
                Run.sweep_id.in_(sweep_ids), Run.status == SUCCEEDED, Run.step_records > 0
            )
        ).all(),
        key=lambda r: (sweep_ids.index(r.sweep_id), r.id),  # in the order the sweeps are named
    )
    if not runs:
        raise ProjectionRefused(
            f"sweep {','.join(sweep_ids)} has no successful run to project from"
        )
    for name in SHARED_CONFIGURATION:
        differing = next((r for r in runs if getattr(r, name) != getattr(runs[0], name)), None)
        if differing is not None:
            raise ProjectionRefused(
                f"runs {runs[0].id} and {differing.id} differ in {name} "
                f"({getattr(runs[0], name)} and {getattr(differing, name)}); one projection "
                "takes runs of one configuration"
            )
    return runs


def _per_step(run: Any, *phases: str) -> float:
    """A run's mean seconds per step in ``phases``."""
    return sum(getattr(run, f"{p}_total_s") for p in phases) / run.step_records


def _measured_point(
    conn: Connection, network: str, world_size: int, group: list[Any], parameters: int
) -> MeasuredPoint:
    """The runs ``group`` at one (link, worker count) averaged into one measured point, the
    model having ``parameters`` parameters."""
    reached = [r.time_to_accuracy_s for r in group if r.goal_reached and r.time_to_accuracy_s]
    return MeasuredPoint(
        network=network,
        world_size=world_size,
        runs=len(group),
        compute_s=statistics.fmean(_per_step(r, *STEP_COMPUTE_PHASES) for r in group),
        gradient_packing_s=statistics.fmean(_per_step(r, "gradient_packing") for r in group),
        communication_s=statistics.fmean(_per_step(r, "communication") for r in group),
        wait_s=statistics.fmean(mean_wait_s(conn, r.id) if world_size > 1 else 0.0 for r in group),
        collective_wait_s=statistics.fmean(
            mean_collective_wait_s(conn, r.id) if world_size > 1 else 0.0 for r in group
        ),
        step_s=statistics.fmean(_per_step(r, *PHASES) for r in group),
        steps=statistics.fmean(r.steps for r in group),
        epochs=statistics.fmean(r.epochs for r in group),
        eval_s=statistics.fmean(r.eval_s for r in group),
        time_to_accuracy_s=statistics.fmean(reached) if reached else None,
        gradient_bytes=gradient_bytes(parameters, group[0].precision),
        contended=sum(bool(r.contended) for r in group),
        contention_share=max(
            (r.contention_share for r in group if r.contention_share is not None),
            default=None,
        ),
    )


@dataclass(frozen=True)
class ProjectionView:
    """Training sweeps projected with Task 0 sweeps' fits, what the dashboard draws and the
    command line prints: ``points`` (measured and projected), ``held`` (leave-one-out: each
    measured point predicted from the others), ``missing``, a sentence per profile left out for
    want of a fit or price left out (or why nothing could be projected), ``across`` (each
    measured point predicted without any point of its worker count), ``sweep`` (the measured
    points the projection starts from; None when they could not be read) and ``prices`` (per
    worker, dollars per hour; None when none was asked for or found)."""

    points: list[ProjectedPoint]
    held: list[HeldOut]
    missing: list[str]
    across: list[HeldOut] = field(default_factory=list)
    sweep: TrainingSweep | None = None
    prices: Prices | None = None


def pooled_fits(conn: Connection, allreduce_sweeps: Sequence[str], strict: bool) -> list[RingFit]:
    """The fits of ``allreduce_sweeps`` pooled, in the order named (where two fit the same
    configuration, the first named wins). ``strict``: a sweep that is not stored or has no fit
    is refused naming it (:class:`ProjectionRefused`) instead of adding nothing."""
    fits: list[RingFit] = []
    for one in dict.fromkeys(allreduce_sweeps):
        found = allreduce_fits(conn, one)
        if strict and not found:
            if conn.execute(select(Sweep.id).where(Sweep.id == one)).first() is None:
                raise ProjectionRefused(f"allreduce: no sweep {one!r} in the results database")
            raise ProjectionRefused(
                f"allreduce: sweep {one} has no all-reduce fit (a Task 0 sweep at 2 workers or "
                "more gives them; `scalebench db refit` fits sweeps stored before fits were kept)"
            )
        fits += found
    return fits


def projection_view(
    conn: Connection,
    sweep_ids: Sequence[str],
    allreduce_sweeps: Sequence[str],
    world_sizes: Sequence[int] = DEFAULT_PROJECTED_WORKERS,
    instance: str | None = None,
    gpu: str | None = None,
    networks: Sequence[str] | None = None,
    strict: bool = False,
) -> ProjectionView:
    """:class:`ProjectionView` of the training sweeps ``sweep_ids`` (one task and
    configuration: :func:`training_sweeps`; say, one on host and one on 10mbit) to
    ``world_sizes`` (workers) on ``networks`` (None: every profile the sweeps measured) with
    the fits of ``allreduce_sweeps`` pooled (where two fit the same configuration, the first
    named wins), costed at one ``instance`` (and ``gpu``) per worker where one is named.

    What cannot be projected or priced is said in ``missing``, never raised, unless
    ``strict`` (the command line): then what cannot be projected (a training sweep that
    cannot be read, an all-reduce sweep not stored or without fits, a profile without a fit,
    a worker count out of range) raises :class:`ProjectionRefused` naming it."""
    try:
        sweep = training_sweeps(conn, sweep_ids)
    except ProjectionRefused as exc:
        if strict:
            raise
        return ProjectionView([], [], [str(exc)])
    named = ",".join(dict.fromkeys(allreduce_sweeps))
    fits = pooled_fits(conn, allreduce_sweeps, strict)
    missing = []
    prices = None
    if instance is not None:
        prices = worker_prices(conn, instance, gpu)
        if prices is None:
            priced = instance + (f" and {gpu}" if gpu else "")
            missing.append(f"no price in force for {priced}: costs left out")
    points: list[ProjectedPoint] = []
    shown = dict.fromkeys(p.network for p in sweep.points) if networks is None else networks
    for network in shown:
        try:
            points += project(sweep, fits, [network], world_sizes, named, prices)
        except ProjectionRefused as exc:
            if strict:
                raise
            missing.append(str(exc))
    return ProjectionView(
        points,
        leave_one_out(sweep, fits, named),
        missing,
        across=leave_one_out(sweep, fits, named, True),
        sweep=sweep,
        prices=prices,
    )
