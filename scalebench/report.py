"""From a sweep's record files to the tables the command line prints."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from results_db import analytics
from results_db.run_summary import RunSummary, summarise
from workers.records import read_run


def summarise_run(
    run_dir: Path, world_size: int | None = None, launcher_status: str | None = None
) -> RunSummary:
    """Read a run's rank files and reduce them to one :class:`RunSummary`."""
    return summarise(read_run(run_dir), run_dir.name, world_size, launcher_status)


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
                f"{summary.algbw / 1e9:.3g}",
                f"{summary.busbw / 1e9:.3g}",
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
