"""From a sweep's record files to the tables the command line prints."""

from __future__ import annotations

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
    rows = []
    for row in analytics.scaling_rows(runs):
        group = [r for r in runs if r.world_size == row.world_size]
        last = max((r.last_metrics.get(metric, float("nan")) for r in group), default=None)
        spread = f" ±{row.tta_stdev_s:.2f}" if row.reached > 1 and row.tta_stdev_s else ""
        rows.append(
            [
                row.world_size,
                f"{row.reached}/{row.runs}",
                ", ".join(sorted({r.status for r in group})),
                _fmt(row.tta_s) + spread,
                _fmt(row.tta_without_eval_s),
                _fmt(row.speedup),
                _fmt(row.compute_speedup),
                _fmt(row.efficiency),
                _fmt(row.communication_ratio, ".1%"),
                _fmt(last),
            ]
        )
    headers = [
        "workers", "goal", "status", "TTA s", "TTA w/o eval s", "speedup",
        "compute speedup", "efficiency", "comm ratio", f"last {metric}",
    ]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def allreduce_table(run_dirs: Sequence[Path]) -> str:
    """Per (world size, dtype, size): p50/mean/p95 latency, algbw and busbw.

    A repetition's time is its slowest rank's; repetitions of several runs
    (repeats) are pooled. A repetition some rank did not record (a run cut
    short) counts with the ranks that did.
    """
    # (world size, dtype, elements) -> bytes, {(run, repetition): slowest seconds}
    pooled: dict[tuple[int, str, int], tuple[int, dict[tuple[str, int], float]]] = {}
    for run_dir in run_dirs:
        for rank in read_run(run_dir):
            for rec in rank.of_kind("allreduce"):
                key = (rec["world_size"], rec["dtype"], rec["elements"])
                _, slowest = pooled.setdefault(key, (rec["bytes"], {}))
                for repetition, seconds in enumerate(rec["seconds"]):
                    at = (str(run_dir), repetition)
                    slowest[at] = max(slowest.get(at, 0.0), seconds)
    rows = []
    for (world_size, dtype, elements), (nbytes, slowest) in sorted(pooled.items()):
        summary = analytics.summarise_allreduce([list(slowest.values())], nbytes, world_size)
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
