"""From a sweep's record files to the tables the command line prints.

A run's status comes from its ranks' records: ``diverged`` if any rank
diverged, ``failed`` if any rank failed or left no final record, ``timed_out``
if the launcher had to stop it, ``succeeded`` when every rank finished.
Goal reached is separate: a run can succeed without reaching the goal within
its epoch limit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from results_db import analytics
from workers.records import PHASES, RankRecords, read_run


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


def _run_status(
    ranks: Sequence[RankRecords], world_size: int, launcher_status: str | None
) -> tuple[str, str]:
    by_rank = {int(r.path.stem.split("-")[1]): r for r in ranks}
    missing = [rank for rank in range(world_size) if rank not in by_rank]
    diverged = [e for r in ranks for e in r.of_kind("event") if e["event"] == "diverged"]
    failed = [e for r in ranks for e in r.of_kind("event") if e["event"] == "failed"]
    unfinished = [
        rank
        for rank, records in sorted(by_rank.items())
        if not {"finished", "failed", "diverged"} & set(records.events())
    ]
    if diverged:
        return "diverged", str(diverged[0].get("reason", ""))
    if launcher_status == "timed_out":
        return "timed_out", "stopped by the launcher's time limit"
    if failed or unfinished or missing:
        reasons = []
        # A rank killed outright leaves no final record; say so first, since
        # the other ranks' errors are usually its consequence.
        reasons += [f"rank {rank} left no final record (killed?)" for rank in unfinished]
        reasons += [f"rank {rank} wrote no records" for rank in missing]
        reasons += [f"rank {e['rank']}: {e.get('reason', '')}" for e in failed]
        return "failed", "; ".join(reasons)
    return "succeeded", ""


def summarise_run(
    run_dir: Path, world_size: int | None = None, launcher_status: str | None = None
) -> RunSummary:
    """Read a run's rank files and reduce them to one :class:`RunSummary`."""
    ranks = read_run(run_dir)
    records = [rec for r in ranks for rec in r.records]
    if world_size is None:
        world_size = records[0]["world_size"] if records else 0
    status, reason = _run_status(ranks, world_size, launcher_status)
    goals = [e for r in ranks for e in r.of_kind("event") if e["event"] == "goal_reached"]
    evals = [e for e in ranks[0].of_kind("eval")] if ranks else []
    per_rank_times = []
    for rank in ranks:
        totals = dict.fromkeys(PHASES, 0.0)
        for step in rank.of_kind("step"):
            for phase, seconds in step["phases"].items():
                totals[phase] += seconds
        per_rank_times.append(totals)
    compute = [sum(t[p] for p in analytics.COMPUTE_PHASES) for t in per_rank_times]
    communication = [t["communication"] for t in per_rank_times]
    steps_total = [sum(t.values()) for t in per_rank_times]
    ratio = None
    if any(total > 0 for total in steps_total):
        ratio = analytics.communication_ratio(list(zip(communication, steps_total, strict=True)))
    return RunSummary(
        run_id=records[0]["run_id"] if records else run_dir.name,
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
        compute_s=sum(compute) / len(compute) if compute else 0.0,
        communication_s=sum(communication) / len(communication) if communication else 0.0,
        communication_ratio=ratio,
        bad_lines=sum(r.bad_lines for r in ranks),
    )


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def training_table(runs: Sequence[RunSummary], metric: str) -> str:
    """Per worker count: runs, TTA (repeats combined by MLPerf's rule), speedups, comm ratio."""
    by_size: dict[int, list[RunSummary]] = defaultdict(list)
    for run in runs:
        by_size[run.world_size].append(run)
    combined: dict[int, tuple[analytics.Combined | None, analytics.Combined | None]] = {}
    for size, group in by_size.items():
        reached = [r for r in group if r.goal_reached and r.time_to_accuracy_s is not None]
        tta = analytics.mlperf_mean([r.time_to_accuracy_s for r in reached]) if reached else None
        compute = analytics.mlperf_mean([r.compute_s for r in reached]) if reached else None
        combined[size] = (tta, compute)
    base_tta, base_compute = combined.get(1, (None, None))
    rows = []
    for size in sorted(by_size):
        group = by_size[size]
        tta, compute = combined[size]
        statuses = ", ".join(sorted({r.status for r in group}))
        no_eval = [
            r.time_to_accuracy_without_eval_s
            for r in group
            if r.time_to_accuracy_without_eval_s is not None
        ]
        ratios = [r.communication_ratio for r in group if r.communication_ratio is not None]
        speed = analytics.speedup(base_tta.mean, tta.mean) if base_tta and tta else None
        compute_speed = (
            analytics.speedup(base_compute.mean, compute.mean)
            if base_compute and compute and compute.mean > 0
            else None
        )
        best = max((r.last_metrics.get(metric, float("nan")) for r in group), default=None)
        rows.append(
            [
                size,
                f"{sum(r.goal_reached for r in group)}/{len(group)}",
                statuses,
                _fmt(tta.mean if tta else None)
                + (f" ±{tta.stdev:.2f}" if tta and tta.kept > 1 else ""),
                _fmt(analytics.mlperf_mean(no_eval).mean if no_eval else None),
                _fmt(speed),
                _fmt(compute_speed),
                _fmt(analytics.scaling_efficiency(speed, size) if speed else None),
                _fmt(sum(ratios) / len(ratios) if ratios else None, ".1%"),
                _fmt(best),
            ]
        )
    headers = [
        "workers", "goal", "status", "TTA s", "TTA w/o eval s", "speedup",
        "compute speedup", "efficiency", "comm ratio", f"last {metric}",
    ]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def allreduce_table(run_dirs: Sequence[Path]) -> str:
    """Per (world size, dtype, size): p50/mean/p95 latency, algbw and busbw."""
    # (world size, dtype, elements) -> bytes, per-rank repetition lists (pooled over repeats)
    pooled: dict[tuple[int, str, int], tuple[int, dict[int, list[float]]]] = {}
    for run_dir in run_dirs:
        for rank in read_run(run_dir):
            for rec in rank.of_kind("allreduce"):
                key = (rec["world_size"], rec["dtype"], rec["elements"])
                nbytes, per_rank = pooled.setdefault(key, (rec["bytes"], defaultdict(list)))
                per_rank[rec["rank"]].extend(rec["seconds"])
    rows = []
    for (world_size, dtype, elements), (nbytes, per_rank) in sorted(pooled.items()):
        summary = analytics.summarise_allreduce(list(per_rank.values()), nbytes, world_size)
        rows.append(
            [
                world_size,
                dtype,
                elements,
                _human_bytes(nbytes),
                f"{summary.p50 * 1e3:.3f}",
                f"{summary.mean * 1e3:.3f}",
                f"{summary.p95 * 1e3:.3f}",
                f"{summary.algbw / 1e9:.3f}",
                f"{summary.busbw / 1e9:.3f}",
                summary.samples,
            ]
        )
    headers = [
        "workers", "dtype", "elements", "size", "p50 ms", "mean ms", "p95 ms",
        "algbw GB/s", "busbw GB/s", "reps",
    ]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"
