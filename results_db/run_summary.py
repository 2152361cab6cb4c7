"""One run's outcome, reduced from its ranks' records.

A run's status comes from the records: ``running`` while its group has no verdict
yet and no rank has failed (a reading taken while the ranks write), ``diverged`` if
any rank diverged,
``timed_out`` if the launcher had to stop it, ``preempted`` or ``not_admitted``
when the cluster took its pods away or never admitted it (Kubernetes),
``failed`` if any rank failed,
left no final record or wrote nothing, ``succeeded`` when every rank
finished. Reaching the goal is separate: a run can succeed without reaching
the goal within its epoch limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

from results_db import analytics
from scalebench.run_metrics import RUN_METRICS
from scalebench.statuses import (
    CANCELLED,
    CLUSTER_VERDICTS,
    DIVERGED,
    FAILED,
    PLANNED,
    RUNNING,
    SUCCEEDED,
    TIMED_OUT,
)
from workers.records import (
    CPU_USE_FIELDS,
    DDP_EXPOSED_WAIT,
    FINAL_EVENTS,
    PHASES,
    RankRecords,
    rank_of,
)

_COMMON_FIELDS = {"v", "run_id", "rank", "world_size", "kind", "t", "event"}


@dataclass
class RunSummary:
    """One group's outcome; times in seconds (compute/communication: mean over ranks)."""

    run_id: str
    world_size: int
    status: str
    reason: str
    goal_reached: bool
    time_to_accuracy_s: float | None
    time_to_accuracy_without_eval_s: float | None
    epochs: int
    last_metrics: dict[str, float]
    compute_s: float
    communication_s: float
    communication_ratio: float | None
    bad_lines: int
    step_s: float = 0.0
    eval_s: float = 0.0
    steps: int = 0
    samples_per_s: float | None = None
    duration_s: float = 0.0
    start: dict[str, Any] = field(default_factory=dict)
    compile_s: float = 0.0  # slowest rank's compilation and warm-up, before the common start
    recompilations: int | None = None  # most graphs any rank compiled during the timed run
    step_records: int = 0  # step records of every rank
    phase_totals_s: dict[str, float] = field(default_factory=dict)  # phase -> seconds, all ranks
    gradient_packing_s: float = 0.0  # mean over ranks, like compute_s and communication_s
    records_version: int | None = None  # the records' schema version (oldest of the ranks)
    # the share of the group's cores other processes took (analytics.contention_share)
    contention_share: float | None = None
    hardware: str | None = None  # what the ranks ran on (:func:`hardware_of`)
    # each run metric's value (scalebench.run_metrics), in its unit; None: no rank measured it
    metrics: dict[str, float | int | None] = field(default_factory=dict)
    # the transports the group's traffic took (scalebench.transports), "" where not known
    transport_within_node: str = ""
    transport_between_nodes: str = ""


def _run_status(
    ranks: Sequence[RankRecords], world_size: int, launcher_status: str | None
) -> tuple[str, str]:
    by_rank = {rank_of(r.path): r for r in ranks}
    missing = [rank for rank in range(world_size) if rank not in by_rank]
    diverged = [e for r in ranks for e in r.of_kind("event") if e["event"] == "diverged"]
    failed = [e for r in ranks for e in r.of_kind("event") if e["event"] == "failed"]
    unfinished = [
        rank
        for rank, records in sorted(by_rank.items())
        if not set(FINAL_EVENTS) & set(records.events())
    ]
    if diverged:
        return DIVERGED, str(diverged[0].get("reason", ""))
    if launcher_status == PLANNED and not failed:  # read while its ranks still write
        return RUNNING, ""
    if launcher_status == TIMED_OUT:
        return TIMED_OUT, "stopped by the launcher's time limit"
    if launcher_status in CLUSTER_VERDICTS:  # the cluster's doing: no rank's
        return launcher_status, ""
    if launcher_status == CANCELLED:
        return CANCELLED, "stopped on request"
    if failed or unfinished or missing:
        reasons = []
        # A rank killed outright leaves no final record; say so first, since
        # the other ranks' errors are usually its consequence.
        reasons += [f"rank {rank} left no final record (killed?)" for rank in unfinished]
        reasons += [f"rank {rank} wrote no records" for rank in missing]
        reasons += [f"rank {e['rank']}: {e.get('reason', '')}" for e in failed]
        return FAILED, "; ".join(reasons)
    return SUCCEEDED, ""


def final_event(rank: RankRecords) -> dict[str, Any] | None:
    """A rank's last ``finished``, ``failed`` or ``diverged`` event (None: it left none)."""
    return next((e for e in reversed(rank.of_kind("event")) if e["event"] in FINAL_EVENTS), None)


def cpu_uses(ranks: Sequence[RankRecords]) -> list[analytics.RankCpuUse]:
    """What each rank measured of its machine: its final event's CPU seconds (records from
    before they were written have none) with its environment record's machine."""
    uses = []
    for rank in ranks:
        env = next(iter(rank.of_kind("env")), None)
        final = final_event(rank)
        if (
            env is None
            or final is None
            or not all(isinstance(final.get(name), int | float) for name in CPU_USE_FIELDS)
        ):
            continue
        cpu_count, threads = env.get("cpu_count"), env.get("torch_threads")
        if not isinstance(cpu_count, int) or not isinstance(threads, int):
            continue
        uses.append(
            analytics.RankCpuUse(
                node=str(env.get("node") or env.get("host") or ""),
                cpu_count=cpu_count,
                threads=threads,
                window_s=float(final["cpu_window_s"]),
                host_busy_cpu_s=float(final["host_busy_cpu_s"]),
                own_cpu_s=float(final["own_cpu_s"]),
            )
        )
    return uses


def run_metrics(ranks: Sequence[RankRecords]) -> dict[str, float | int | None]:
    """Every run metric (:data:`scalebench.run_metrics.RUN_METRICS`, by name), its ranks'
    values in their final events reduced as it is declared; None where no rank's final
    event holds it (records from before it was measured)."""
    finals = [final_event(rank) or {} for rank in ranks]
    return {
        metric.name: metric.of_ranks(final.get(metric.name) for final in finals)
        for metric in RUN_METRICS
    }


HARDWARE_LIMIT = 250  # characters the results database keeps


def hardware_of(ranks: Sequence[RankRecords]) -> str | None:
    """The processor with its machine's core count, and the GPUs where there are any, the
    ranks ran on, from their environment records, e.g. ``AMD EPYC (family 25, model 1), 2
    cores`` or ``…, 64 cores + NVIDIA H100``: the cores decide how many threads a rank gets
    by default. Machines that differ are listed with `` | ``. None for records from before
    the processor was recorded."""
    seen = []
    for rank in ranks:
        env = next(iter(rank.of_kind("env")), None)
        if env is None or not isinstance(env.get("cpu"), str):
            continue
        gpus = env.get("gpus")
        names = sorted({str(g) for g in gpus}) if isinstance(gpus, list) else []
        cores = env.get("cpu_count")
        cpu = f"{env['cpu']}, {cores} cores" if isinstance(cores, int) else env["cpu"]
        seen.append(" + ".join([cpu, *names]))
    return " | ".join(sorted(set(seen)))[:HARDWARE_LIMIT] if seen else None


def _last_time(rank: RankRecords) -> float:
    """The latest ``t`` (seconds since the common start) among a rank's records."""
    steps = rank.of_kind("step")
    latest = max(map(attrgetter("t"), steps), default=0.0)
    others = (r["t"] for kind, records in rank.by_kind.items() if kind != "step" for r in records)
    return max(latest, max(others, default=0.0))


def _phase_seconds(ranks: Sequence[RankRecords]) -> list[dict[str, float]]:
    """Each rank's seconds in each phase of the step (:data:`PHASES`), summed over its steps."""
    per_rank = []
    for rank in ranks:
        phases = list(map(attrgetter("phases"), rank.of_kind("step")))
        per_rank.append({p: math.fsum(map(itemgetter(p), phases)) for p in PHASES})
    return per_rank


def _communication_ratio(
    ranks: Sequence[RankRecords], communication_s: list[float], step_s: list[float]
) -> float | None:
    """The group's communication ratio from each rank's communication and step seconds, or
    ``None`` where its records cannot give an honest one."""
    leader_start = ranks[0].of_kind("event") if ranks else []
    variant = next((e.get("variant") for e in leader_start if e["event"] == "start"), None)
    # DDP overlaps the gradient all-reduce with backward. Its "communication" phase holds the
    # wait for the buckets after backward (the exposed communication) where the start record
    # says so; before that it held only the loss all-reduce, and no honest ratio can be given.
    times_communication = variant != "ddp" or any(
        e.get("ddp_communication") == DDP_EXPOSED_WAIT
        for e in leader_start
        if e["event"] == "start"
    )
    if not times_communication or not any(total > 0 for total in step_s):
        return None
    return analytics.communication_ratio(list(zip(communication_s, step_s, strict=True)))


def _mean(values: list[float]) -> float:
    """The mean of the ranks' ``values`` (seconds), 0 for none."""
    return sum(values) / len(values) if values else 0.0


def summarise(
    ranks: Sequence[RankRecords],
    run_id: str,
    world_size: int | None = None,
    launcher_status: str | None = None,
) -> RunSummary:
    """Reduce a run's rank records (see :func:`workers.records.read_run`) to a summary."""
    first = next((r.records[0] for r in ranks if r.records), None)
    if world_size is None:
        world_size = first["world_size"] if first else 0
    status, reason = _run_status(ranks, world_size, launcher_status)
    goals = [e for r in ranks for e in r.of_kind("event") if e["event"] == "goal_reached"]
    evals = ranks[0].of_kind("eval") if ranks else []
    per_rank_times = _phase_seconds(ranks)
    phase_totals = {p: math.fsum(t[p] for t in per_rank_times) for p in PHASES}
    step_records = sum(len(rank.of_kind("step")) for rank in ranks)
    compute_s = [sum(t[p] for p in analytics.COMPUTE_PHASES) for t in per_rank_times]
    communication_s = [t["communication"] for t in per_rank_times]
    packing_s = [t["gradient_packing"] for t in per_rank_times]
    step_s = [sum(t.values()) for t in per_rank_times]
    communication_ratio = _communication_ratio(ranks, communication_s, step_s)
    leader = ranks[0] if ranks else None
    steps = leader.of_kind("step") if leader else []
    start = (
        next((e for e in leader.of_kind("event") if e["event"] == "start"), {}) if leader else {}
    )
    step_seconds = _mean(step_s)
    samples = sum(sum(map(attrgetter("samples"), r.of_kind("step"))) for r in ranks)
    duration = max((_last_time(r) for r in ranks if r.records), default=0.0)
    starts = [e for r in ranks for e in r.of_kind("event") if e["event"] == "start"]
    recompiled = [
        e["recompilations"]
        for r in ranks
        for e in r.of_kind("event")
        if e["event"] == "finished" and "recompilations" in e
    ]
    return RunSummary(
        run_id=first["run_id"] if first else run_id,
        world_size=world_size,
        status=status,
        reason=reason,
        goal_reached=bool(goals),
        time_to_accuracy_s=max(g["time_to_accuracy_s"] for g in goals) if goals else None,
        time_to_accuracy_without_eval_s=(
            max(g["time_to_accuracy_without_eval_s"] for g in goals) if goals else None
        ),
        epochs=len(evals),
        last_metrics=evals[-1]["metrics"] if evals else {},
        compute_s=_mean(compute_s),
        communication_s=_mean(communication_s),
        communication_ratio=communication_ratio,
        bad_lines=sum(r.bad_lines for r in ranks),
        step_s=step_seconds,
        eval_s=sum(e["eval_s"] for e in evals),
        steps=len(steps),
        # Training throughput of the whole group: every rank's samples over the
        # mean time a rank spent in training steps.
        samples_per_s=samples / step_seconds if step_seconds > 0 else None,
        duration_s=float(duration),
        start={k: v for k, v in start.items() if k not in _COMMON_FIELDS},
        compile_s=max((float(e.get("compile_s", 0.0)) for e in starts), default=0.0),
        recompilations=max(recompiled) if recompiled else None,
        step_records=step_records,
        phase_totals_s=phase_totals,
        gradient_packing_s=_mean(packing_s),
        records_version=min((r.records[0]["v"] for r in ranks if r.records), default=None),
        contention_share=analytics.contention_share(cpu_uses(ranks)),
        hardware=hardware_of(ranks),
        metrics=run_metrics(ranks),
    )
