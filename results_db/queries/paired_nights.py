"""The paired nightly's history, read: each scheduled night that ran tonight's stack beside
the pinned reference stack, with what each arm measured, and what ran it.

A paired night is a scheduled sweep whose request names the stacks ``tonight`` and
``reference`` (:data:`scalebench.nightly.TONIGHT`, :data:`scalebench.nightly.REFERENCE`).
:func:`paired_nights` gives a configuration's nights oldest first, each with its arms' runs
(:func:`results_db.queries.stacks.arm_runs`); :func:`night_identity` what tonight's stack
was (interpreter, versions, variables, the code's version) and what the reference arm ran
on (the platform: processor, GPUs, kernel, driver, NCCL and its variables).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from results_db.models import NightlyFinding, ReferencePin, Run, RunEnvironment, Sweep
from results_db.queries.stacks import ArmRun, arm_runs
from results_db.regressions.comparable import NIGHT
from scalebench.pairing import DUET
from scalebench.stacks import REFERENCE, TONIGHT

# What a platform is, from a rank's recorded environment (run_environment.details).
PLATFORM_KEYS = (
    "cpu",
    "cpu_capability",
    "cpu_count",
    "cpus_allowed",
    "gpus",
    "kernel",
    "driver",
    "nccl",
    "nccl_env",
    "torch_threads",
    "thread_pools",
    "node",
)
# What a stack is: its interpreter, the versions it runs, the variables it sets, and on
# Kubernetes the image its pods ran as the kubelet resolved it (run.image_digest).
STACK_KEYS = ("executable", "python", "torch", "cuda", "nccl", "numpy", "stack", "image_digest")


@dataclass(frozen=True)
class PairedNightRuns:
    """One paired night: its sweep, the night it stands for, the reference stack it ran
    (as the request named it) and every succeeded run of either arm."""

    sweep_id: str
    night: datetime
    reference: dict[str, Any]
    arms: list[ArmRun]


def stacks_of(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A stored request's stacks by name, each as the request named it (no name)."""
    stacks = config.get("stacks") or []
    return {
        str(s["name"]): {k: v for k, v in s.items() if k != "name"}
        for s in stacks
        if isinstance(s, dict) and "name" in s
    }


def is_paired(config: dict[str, Any]) -> bool:
    """Whether a sweep's request ran tonight's stack beside the reference."""
    return {TONIGHT, REFERENCE} <= set(stacks_of(config))


def paired_nights(
    conn: Connection, task: str, config_hash: str, until: str | None = None, limit: int = 120
) -> list[PairedNightRuns]:
    """The paired scheduled nights of ``task``'s configuration ``config_hash``, oldest first,
    up to and including sweep ``until``'s night (None: all), the newest ``limit``."""
    query = select(Sweep.id, NIGHT.label("night"), Sweep.config).where(
        Sweep.task == task, Sweep.config_hash == config_hash, Sweep.trigger == "scheduled"
    )
    if until is not None:
        last = conn.execute(select(NIGHT).where(Sweep.id == until)).scalar_one()
        query = query.where(last >= NIGHT)
    rows = conn.execute(query.order_by(NIGHT.desc(), Sweep.id.desc()).limit(limit)).all()
    nights = []
    for sweep_id, night, config in reversed(rows):
        if not is_paired(config or {}):
            continue
        arms = arm_runs(conn, sweep_id)
        nights.append(PairedNightRuns(sweep_id, night, stacks_of(config)[REFERENCE], arms))
    return nights


def night_identity(conn: Connection, sweep_id: str) -> dict[str, dict[str, Any]]:
    """What one night ran: ``{"stack": …, "platform": …}``, tonight's stack (its first
    run's rank 0: :data:`STACK_KEYS`, and the sweep's ``code_version``) and the reference
    arm's platform (its first run's rank 0: :data:`PLATFORM_KEYS`). A key not recorded is
    absent."""
    code_version = conn.execute(select(Sweep.code_version).where(Sweep.id == sweep_id)).scalar()
    identity: dict[str, dict[str, Any]] = {"stack": {}, "platform": {}}
    for part, stack, keys in (
        ("stack", TONIGHT, STACK_KEYS),
        ("platform", REFERENCE, PLATFORM_KEYS),
    ):
        first = conn.execute(
            select(func.min(Run.id)).where(Run.sweep_id == sweep_id, Run.stack == stack)
        ).scalar()
        if first is None:
            continue
        row = conn.execute(
            select(
                RunEnvironment.python,
                RunEnvironment.torch,
                RunEnvironment.cuda,
                RunEnvironment.nccl,
                RunEnvironment.gpus,
                RunEnvironment.details,
            )
            .where(RunEnvironment.run_id == first)
            .order_by(RunEnvironment.rank)
            .limit(1)
        ).first()
        if row is None:
            continue
        recorded = {
            **(row.details or {}),
            "python": row.python,
            "torch": row.torch,
            "cuda": row.cuda,
            "nccl": row.nccl,
            "gpus": list(row.gpus or []),
            "image_digest": conn.execute(select(Run.image_digest).where(Run.id == first)).scalar()
            or None,
        }
        identity[part] = {k: recorded[k] for k in keys if recorded.get(k) is not None}
    if code_version:
        identity["stack"]["code_version"] = code_version
    return identity


@dataclass(frozen=True)
class FindingRow:
    """A stored finding of the paired nightly (``nightly_finding``), as the dashboard and
    the command line show it; ``size`` 1.05 = 5 % slower."""

    id: int
    first_night: datetime
    first_sweep_id: str
    attribution: str
    size: float
    low: float
    high: float
    p_value: float
    series: list[dict[str, Any]]
    phases: list[str]
    diff: dict[str, Any]
    state: str
    note: str
    created_at: datetime
    updated_at: datetime


def nightly_findings(
    conn: Connection,
    *,
    states: tuple[str, ...] | None = None,
    task: str | None = None,
    finding_id: int | None = None,
    limit: int = 200,
) -> list[FindingRow]:
    """Stored findings, the newest first night first; only ``states`` (None: every state),
    those with a series of ``task``, or the one ``finding_id``."""
    query = select(
        NightlyFinding.id,
        NightlyFinding.first_night,
        NightlyFinding.first_sweep_id,
        NightlyFinding.attribution,
        NightlyFinding.size,
        NightlyFinding.low,
        NightlyFinding.high,
        NightlyFinding.p_value,
        NightlyFinding.series,
        NightlyFinding.phases,
        NightlyFinding.diff,
        NightlyFinding.state,
        NightlyFinding.note,
        NightlyFinding.created_at,
        NightlyFinding.updated_at,
    ).order_by(NightlyFinding.first_night.desc(), NightlyFinding.id.desc())
    if states is not None:
        query = query.where(NightlyFinding.state.in_(states))
    if finding_id is not None:
        query = query.where(NightlyFinding.id == finding_id)
    rows = [FindingRow(*row) for row in conn.execute(query)]
    if task is not None:
        rows = [r for r in rows if any(s.get("task") == task for s in r.series)]
    return rows[:limit]


def pinned_reference(conn: Connection) -> dict[str, Any] | None:
    """The reference stack pinned for the nightly (``{"python": …}`` or ``{"image": …}``,
    with ``"env"``), or None where none is."""
    return conn.execute(
        select(ReferencePin.stack)
        .where(ReferencePin.unpinned_at.is_(None))
        .order_by(ReferencePin.id.desc())
        .limit(1)
    ).scalar()


def round_seconds(
    conn: Connection, task: str, config_hash: str, world_sizes: list[int], nights: int = 7
) -> float | None:
    """How long one paired round of ``task`` took in its recent paired nights: per worker
    count, the median seconds (start to end) of its runs of either arm, summed over
    ``world_sizes``, twice (both arms) where they were interleaved, once where they ran as a
    duet (at once). None where a worker count has no such run yet."""
    import statistics

    recent = [n.sweep_id for n in paired_nights(conn, task, config_hash, limit=nights)]
    if not recent:
        return None
    total = 0.0
    for world_size in world_sizes:
        runs = conn.execute(
            select(Run.started_at, Run.ended_at, Run.pairing).where(
                Run.sweep_id.in_(recent),
                Run.world_size == world_size,
                Run.stack.in_((TONIGHT, REFERENCE)),
                Run.started_at.is_not(None),
                Run.ended_at.is_not(None),
            )
        ).all()
        if not runs:
            return None
        span_s = statistics.median((ended - started).total_seconds() for started, ended, _ in runs)
        at_once = all(pairing == DUET for _, _, pairing in runs)
        total += span_s if at_once else 2 * span_s
    return total
