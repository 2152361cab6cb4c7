"""The tables the command line prints, from the results database's named queries.

Every figure comes from ``results_db/queries``, the same rows the dashboard
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
from results_db.projection import HeldOut, ProjectedPoint, RingFit
from results_db.queries import communication as communication_queries
from results_db.queries import projection as projection_queries
from results_db.queries import runs as runs_queries
from results_db.queries import sweeps as sweeps_queries
from scalebench.statuses import SUCCEEDED
from scalebench.tasks import TASKS, AllReduceSpec
from scalebench.units import byte_size

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None or not math.isfinite(value) else format(value, spec)


def run_shapes(runs: Sequence[runs_queries.RunInfo]) -> dict[int, str]:
    """Each worker count's shape (``nodes×ranks``) where a run of it had several ranks on a
    node; a worker count of one rank per node is not listed (it is written as before)."""
    return {r.world_size: r.shape for r in runs if r.ranks_per_node > 1}


def workers_cell(world_size: int, shapes: Mapping[int, str]) -> str:
    """``4`` or, where the group's nodes held several ranks, ``8 (2×4)``."""
    shape = shapes.get(world_size)
    return f"{world_size} ({shape})" if shape else str(world_size)


def training_table(
    scaling: Sequence[ScalingRow],
    runs: Sequence[runs_queries.RunInfo],
    last_metric: Mapping[str, float | None],
    metric: str,
) -> str:
    """Per worker count (and its shape, where nodes held several ranks): runs reaching the
    goal, TTA (MLPerf's rule, ± spread), speedups, communication ratio and the best last
    value of ``metric`` (``last_metric``: per run id)."""
    shapes = run_shapes(runs)
    rows = []
    for row in scaling:
        group = [r for r in runs if r.world_size == row.world_size]
        # a diverged run's last metric can be NaN: not a value to show
        lasts = [v for r in group if (v := last_metric.get(r.id)) is not None and math.isfinite(v)]
        rows.append(
            [
                workers_cell(row.world_size, shapes),
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


def allreduce_table(
    rows: Sequence[communication_queries.AllReduceRow], shapes: Mapping[int, str] | None = None
) -> str:
    """Per (world size, dtype, size): p50/mean/p95 latency (ms), algbw and busbw (GB/s);
    ``shapes``: :func:`run_shapes` of the sweep's runs."""
    lines = [
        [
            workers_cell(row.world_size, shapes or {}),
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
    runs = runs_queries.run_infos(conn, sweep_id=sweep_id)
    if isinstance(spec, AllReduceSpec):
        shapes = run_shapes(runs)
        summary = communication_queries.allreduce_summary(conn, sweep_id)
        out.append(allreduce_table(summary, shapes))
        fits = projection_queries.allreduce_fits(conn, sweep_id)
        if fits:
            out.append("\nring model t(n, k) = 2(k−1)·α + 2(k−1)/k·n/β, fitted per configuration:")
            out.append(fit_table(fits, shapes))
        return "\n".join(out)
    out.append(f"goal: {spec.goal.describe(info.light)}; TTA = time to accuracy, seconds\n")
    networks = sweeps_queries.sweep_networks(conn, sweep_id)
    last_metric = sweeps_queries.last_metric_values(conn, sweep_id)
    stacks: list[str | None] = [*sweeps_queries.sweep_stacks_run(conn, sweep_id)] or [None]
    # one table per link profile and stack: speedups are within a profile, on one stack
    for network in networks:
        for stack in stacks:
            heading = [f"network {network}"] if len(networks) > 1 else []
            heading += [f"stack {stack}"] if stack is not None else []
            if heading:
                out.append(", ".join(heading) + ":")
            out.append(
                training_table(
                    sweeps_queries.scaling(conn, sweep_id, network, stack),
                    [r for r in runs if r.network == network and r.stack == (stack or "")],
                    last_metric,
                    spec.goal.metric,
                )
            )
    if stacks != [None]:
        out.append(f"each stack against the first, round by round: scalebench compare {sweep_id}")
    for run in runs:
        if run.status != SUCCEEDED:
            out.append(f"{run.id}: {run.status}: {run.reason}")
        if run.quarantined_lines:
            out.append(f"{run.id}: {run.quarantined_lines} unreadable record line(s)")
    return "\n".join(out)


def fit_table(fits: Sequence[RingFit], shapes: Mapping[int, str] | None = None) -> str:
    """Per Task 0 configuration: α (µs per ring step), β (MB/s and Mbit/s of a link), the
    fit's RMS, median and largest relative error over the sizes it was fitted on."""
    lines = [
        [
            workers_cell(f.world_size, shapes or {}),
            f.network,
            f"{f.backend} {f.device}",
            f.dtype,
            f"{f.alpha_s * 1e6:.1f}",
            f"{f.beta_bytes_per_s / 1e6:.4g}",
            f"{f.beta_bytes_per_s * 8 / 1e6:.4g}",
            f"{f.residual:.1%}",
            f"{f.median_error:.1%}",
            f"{f.max_error:.1%}",
            f"{f.sizes} ({byte_size(f.min_bytes, binary=False)}–"
            f"{byte_size(f.max_bytes, binary=False)})",
        ]
        for f in fits
    ]
    headers = [
        "workers",
        "network",
        "backend",
        "dtype",
        "α µs",
        "β MB/s",
        "β Mbit/s",
        "residual (RMS)",
        "median error",
        "max error",
        "sizes",
    ]
    return tabulate(lines, headers=headers, tablefmt="simple", disable_numparse=True)


def _dollars(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def projection_table(points: Sequence[ProjectedPoint]) -> str:
    """Per link and worker count: step seconds, communication share, TTA, speedup and cost
    (regular / preemptible dollars), each row with its basis."""
    lines = [
        [
            p.network,
            p.world_size,
            f"{p.step_s:.4g}" + (" ≤" if p.upper_bound else ""),
            f"{p.communication_share:.1%}",
            _fmt(p.time_to_accuracy_s, ".4g"),
            _fmt(p.speedup, ".3g"),
            f"{_dollars(p.cost_regular)} / {_dollars(p.cost_preemptible)}",
            p.basis,
        ]
        for p in points
    ]
    headers = [
        "network",
        "workers",
        "step s",
        "communication",
        "TTA s",
        "speedup",
        "cost $ (regular / preemptible)",
        "basis",
    ]
    table = tabulate(lines, headers=headers, tablefmt="simple", disable_numparse=True)
    if any(p.upper_bound for p in points):
        table += (
            "\n≤ ddp: an upper bound, the overlap of gradient buckets with backward is not modelled"
        )
    return table


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


# The leave-one-out bound: the largest |relative error| of a held-out step time, and of its
# communication time where communication is at least COMMUNICATION_SHARE of the step. On host
# the all-reduce takes about 2 ms, and the 25-35 ms measured there is mostly the faster rank
# waiting for the slower one's computation: a few per cent of the step, which the machine's
# run-to-run noise decides (docs/measurement.md). Such points are printed, their step time
# still bounded.
LEAVE_ONE_OUT_BOUND = 0.20
COMMUNICATION_SHARE = 0.10


def leave_one_out_misses(
    held: Sequence[HeldOut],
    bound: float = LEAVE_ONE_OUT_BOUND,
    communication_share: float = COMMUNICATION_SHARE,
) -> list[str]:
    """The held-out points beyond ``bound``, in words: the step seconds of every point, the
    communication seconds where they are at least ``communication_share`` of the step."""
    out = []
    for h in held:
        checked = [("step", h.step_error)]
        if h.measured_communication_s >= communication_share * h.measured_step_s:
            checked.append(("communication", h.communication_error))
        for what, error in checked:
            if error is not None and abs(error) > bound:
                out.append(f"{h.world_size} worker(s) on {h.network}: {what} {error:+.1%}")
    return out


def leave_one_out_table(held: Sequence[HeldOut]) -> str:
    """Each measured point predicted from the others: measured, predicted and relative error
    of step seconds, communication seconds per step and TTA."""
    lines = [
        [
            h.network,
            h.world_size,
            f"{h.measured_step_s:.4g}",
            f"{h.predicted_step_s:.4g}",
            _error(h.step_error),
            f"{h.measured_communication_s:.4g}",
            f"{h.predicted_communication_s:.4g}",
            _error(h.communication_error),
            _fmt(h.measured_tta_s, ".4g"),
            _fmt(h.predicted_tta_s, ".4g"),
            _error(h.tta_error) + (" ~" if h.contended else ""),
        ]
        for h in held
    ]
    headers = [
        "network",
        "workers",
        "step s",
        "predicted",
        "error",
        "comm s",
        "predicted",
        "error",
        "TTA s",
        "predicted",
        "error",
    ]
    table = tabulate(lines, headers=headers, tablefmt="simple", disable_numparse=True)
    if any(h.contended for h in held):
        table += f"\n~ {CONTENDED_NOTE}"
    return table
