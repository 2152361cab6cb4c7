"""The tables the command line prints, from the results database's named queries.

Every figure comes from ``results_db/queries.py``, the same rows the dashboard
draws: :func:`sweep_report` reads them for one sweep and the pure functions
below lay them out as text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection
from tabulate import tabulate

from results_db.analytics import (
    CONTENDED_NOTE,
    SUPERLINEAR_NOTE,
    ScalingRow,
    time_to_accuracy_text,
)
from results_db.queries import communication as communication_queries
from results_db.queries import runs as runs_queries
from results_db.queries import sweeps as sweeps_queries
from scalebench.tasks import TASKS, AllReduceSpec
from scalebench.units import byte_size

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None or not math.isfinite(value) else format(value, spec)


def training_table(
    scaling: Sequence[ScalingRow],
    runs: Sequence[runs_queries.RunInfo],
    last_metric: Mapping[str, float | None],
    metric: str,
) -> str:
    """Per worker count: runs reaching the goal, TTA (MLPerf's rule, ± spread), speedups,
    communication ratio and the best last value of ``metric`` (``last_metric``: per run id)."""
    rows = []
    for row in scaling:
        group = [r for r in runs if r.world_size == row.world_size]
        # a diverged run's last metric can be NaN: not a value to show
        lasts = [v for r in group if (v := last_metric.get(r.id)) is not None and math.isfinite(v)]
        rows.append(
            [
                row.world_size,
                f"{row.reached}/{row.runs}",
                ", ".join(sorted({r.status for r in group})),
                time_to_accuracy_text(row) + (" ~" if row.contended else ""),
                _fmt(row.time_to_accuracy_without_eval_s),
                _fmt(row.speedup) + (" !" if row.superlinear else ""),
                _fmt(row.compute_speedup),
                _fmt(row.efficiency),
                _fmt(row.communication_ratio, ".1%"),
                _fmt(max(lasts) if lasts else None),
            ]
        )
    headers = [
        "workers",
        "goal",
        "status",
        "TTA s",
        "TTA w/o eval s",
        "speedup",
        "compute speedup",
        "efficiency",
        "communication ratio",
        f"last {metric}",
    ]
    table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    flagged = [str(row.world_size) for row in scaling if row.superlinear]
    if flagged:
        table += f"\n! {SUPERLINEAR_NOTE} (at {', '.join(flagged)} worker(s))"
    contended = [
        f"{row.contended} of {row.runs} at {row.world_size}" for row in scaling if row.contended
    ]
    if contended:
        table += f"\n~ {CONTENDED_NOTE} ({', '.join(contended)} worker(s))"
    return table


def allreduce_table(rows: Sequence[communication_queries.AllReduceRow]) -> str:
    """Per (world size, dtype, size): p50/mean/p95 latency (ms), algbw and busbw (GB/s)."""
    lines = [
        [
            row.world_size,
            row.dtype,
            row.bytes // DTYPE_BYTES.get(row.dtype, 1),
            byte_size(row.bytes, binary=False),
            f"{row.p50_s * 1e3:.3f}",
            f"{row.mean_s * 1e3:.3f}",
            f"{row.p95_s * 1e3:.3f}",
            f"{row.algbw / 1e9:.3g}",
            f"{row.busbw / 1e9:.3g}",
            row.samples,
        ]
        for row in sorted(rows, key=lambda r: (r.world_size, r.dtype, r.bytes))
    ]
    headers = [
        "workers",
        "dtype",
        "elements",
        "size",
        "p50 ms",
        "mean ms",
        "p95 ms",
        "algbw GB/s",
        "busbw GB/s",
        "reps",
    ]
    if len({row.network for row in rows}) > 1:  # a column only where profiles differ
        for line, row in zip(
            lines, sorted(rows, key=lambda r: (r.world_size, r.dtype, r.bytes)), strict=True
        ):
            line.insert(1, row.network)
        headers.insert(1, "network")
    return tabulate(lines, headers=headers, tablefmt="simple", disable_numparse=True)


def sweep_report(conn: Connection, sweep_id: str) -> str:
    """The whole printed report of one ingested sweep: title, goal, table, what went wrong."""
    info = sweeps_queries.sweep_info(conn, sweep_id)
    if info is None:
        raise LookupError(f"sweep {sweep_id!r} is not in the results database")
    spec = TASKS[info.task]
    out = [f"{spec.title} — sweep {sweep_id}"]
    if isinstance(spec, AllReduceSpec):
        out.append(allreduce_table(communication_queries.allreduce_summary(conn, sweep_id)))
        return "\n".join(out)
    runs = runs_queries.run_infos(conn, sweep_id=sweep_id)
    out.append(f"goal: {spec.goal.describe(info.light)}; TTA = time to accuracy, seconds\n")
    networks = sweeps_queries.sweep_networks(conn, sweep_id)
    last_metric = sweeps_queries.last_metric_values(conn, sweep_id)
    for network in networks:  # one table per link profile: speedups are within a profile
        if len(networks) > 1:
            out.append(f"network {network}:")
        out.append(
            training_table(
                sweeps_queries.scaling(conn, sweep_id, network),
                [r for r in runs if r.network == network],
                last_metric,
                spec.goal.metric,
            )
        )
    for run in runs:
        if run.status != "succeeded":
            out.append(f"{run.id}: {run.status}: {run.reason}")
        if run.quarantined_lines:
            out.append(f"{run.id}: {run.quarantined_lines} unreadable record line(s)")
    return "\n".join(out)
