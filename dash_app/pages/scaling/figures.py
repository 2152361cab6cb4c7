"""What the Scaling page draws: time to accuracy, speedup and efficiency against workers,
the numbers behind them, and the projection of step time to worker counts not measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from dash import html

from dash_app import components as ui
from dash_app import reasons
from dash_app import tables as tables_module
from dash_app.plots import (
    LABEL_ROOM_ABOVE,
    SINGLE_RUN,
    THEME_COLOURS,
    base_figure,
    category_workers,
    empty_figure,
    labelled_range,
    level_line,
    measured_markers,
    node_boundary,
    published_traces,
    spread_of,
    thin,
    workers_axis,
)
from results_db.analytics import SUPERLINEAR_NOTE, ScalingRow, time_to_accuracy_text
from results_db.projection import HeldOut, ProjectedPoint, largest_error
from results_db.queries.runs import RunInfo
from results_db.queries.sweeps import SweepInfo
from scalebench import units
from scalebench.statuses import SUCCEEDED
from scalebench.tasks.published import PublishedPoint


def tta_figure(
    rows: Sequence[ScalingRow],
    runs: Sequence[RunInfo] = (),
    published: Sequence[PublishedPoint] = (),
    ranks_per_node: int = 1,
) -> go.Figure:
    """Time-to-accuracy (s) per worker count: MLPerf mean with the kept repeats' min–max as
    error bars, the same without evaluation time, every run that reached the goal, and the
    ``published`` results that give a time; with several ranks per node, each count's shape
    and the node boundary."""
    title = "Time to accuracy"
    done = [r for r in rows if r.time_to_accuracy_s is not None]
    # MLPerf's rule gives no time where too few repeats reached the goal: say so.
    short = "; ".join(
        f"{units.workers(r.world_size)}: {r.reached} of {r.runs} reached the goal"
        for r in rows
        if r.time_to_accuracy_s is None and r.runs
    )
    if not done:
        if not any(r.reached for r in rows):
            return empty_figure(reasons.sweep_without_time(runs, rows), title)
        return empty_figure(f"Too few repeats reached the goal. {short}", title)
    if short:
        title += f"<br><sup>no time to accuracy for {short}</sup>"
    single = [units.workers(r.world_size) for r in done if r.runs == 1]
    if single:
        # One repeat behind a point: no spread to draw, and a reader must know it.
        title += f"<br><sup>a single repeat, no spread: {', '.join(single)}</sup>"
    traces = [
        _tta_mean_trace(done),
        _dashed_trace(
            done,
            "time_to_accuracy_without_eval_s",
            "without evaluation time",
            "%{x} worker(s): %{y:.4g} s without evaluation<extra></extra>",
        ),
    ]
    reached = thin([r for r in runs if r.goal_reached and r.time_to_accuracy_s is not None])
    if reached:
        traces.append(
            go.Scatter(
                x=[r.world_size for r in reached],
                y=[r.time_to_accuracy_s for r in reached],
                mode="markers",
                marker=SINGLE_RUN,
                name="single runs",
                text=[f"{r.id} (repeat {r.repeat + 1})" for r in reached],
                hovertemplate="%{text}: %{y:.4g} s<extra></extra>",
            )
        )
    shown = published_traces(published, "time_to_accuracy_s", "s")
    traces += shown
    sizes = [r.world_size for r in done] + [x for trace in shown for x in trace.x]
    yaxis = {"title": {"text": "time to accuracy (s)"}, "rangemode": "tozero"}
    marks = node_boundary(sizes, ranks_per_node)
    return base_figure(title, traces, workers_axis(sizes, ranks_per_node), yaxis, marks)


def _tta_mean_trace(done: Sequence[ScalingRow]) -> go.Scatter:
    """The MLPerf mean time to accuracy of each worker count, the kept repeats' min–max as
    error bars; the hover says how many runs reached the goal."""
    return go.Scatter(
        x=[r.world_size for r in done],
        y=[r.time_to_accuracy_s for r in done],
        mode="lines+markers",
        name="with evaluation (MLPerf mean)",
        error_y=spread_of(done),
        customdata=[
            [
                time_to_accuracy_text(r, units.seconds),
                units.seconds(r.time_to_accuracy_min_s),
                units.seconds(r.time_to_accuracy_max_s),
                r.reached,
                r.runs,
            ]
            for r in done
        ],
        hovertemplate=(
            "%{x} worker(s): %{y:.4g} s (%{customdata[0]})<br>"
            "kept repeats from %{customdata[1]} to %{customdata[2]}<br>"
            "%{customdata[3]} of %{customdata[4]} runs reached the goal"
            "<extra></extra>"
        ),
    )


def _dashed_trace(
    rows: Sequence[ScalingRow], value: str, name: str, hovertemplate: str
) -> go.Scatter:
    """A dashed line of each row's ``value`` (an attribute) per worker count, over the rows
    that have one."""
    having = [r for r in rows if getattr(r, value) is not None]
    return go.Scatter(
        x=[r.world_size for r in having],
        y=[getattr(r, value) for r in having],
        mode="lines+markers",
        line={"dash": "dash"},
        name=name,
        hovertemplate=hovertemplate,
    )


def speedup_figure(
    rows: Sequence[ScalingRow],
    published: Sequence[PublishedPoint] = (),
    ranks_per_node: int = 1,
    runs: Sequence[RunInfo] = (),
) -> go.Figure:
    """Speedup and compute-only speedup against ideal linear scaling (log–log), and the
    ``published`` speedups; with several ranks per node, each count's shape and the node
    boundary. Without a speedup, why (from the sweep's ``runs``)."""
    title = "Speedup against one worker"
    with_speedup = [r for r in rows if r.speedup is not None]
    if not with_speedup:
        return empty_figure(reasons.no_baseline("speedup", rows, runs), title)
    shown = published_traces(published, "speedup", "×")
    sizes = sorted({r.world_size for r in rows} | {x for trace in shown for x in trace.x})
    traces = [
        go.Scatter(
            x=[sizes[0], sizes[-1]],
            y=[sizes[0], sizes[-1]],
            mode="lines",
            line={"color": "#999", "dash": "dot"},
            name="ideal (linear)",
            hovertemplate="ideal: %{y}× at %{x} worker(s)<extra></extra>",
        ),
        go.Scatter(
            x=[r.world_size for r in with_speedup],
            y=[r.speedup for r in with_speedup],
            mode="lines+markers",
            name="speedup = TTA(1) / TTA(k)",
            hovertemplate="%{x} worker(s): speedup %{y:.4g}×<extra></extra>",
        ),
        _dashed_trace(
            rows,
            "compute_speedup",
            "compute speedup (compute time only)",
            "%{x} worker(s): compute speedup %{y:.4g}×<extra></extra>",
        ),
        *shown,
    ]
    flagged = [r for r in with_speedup if r.superlinear]
    if flagged:
        traces.append(
            go.Scatter(
                x=[r.world_size for r in flagged],
                y=[r.speedup for r in flagged],
                mode="markers",
                marker={"symbol": "x", "size": 14, "color": "#d62728"},
                name=SUPERLINEAR_NOTE,
                hovertemplate="%{x} worker(s): speedup %{y:.4g}× (or its compute speedup) is "
                "above the worker count: check contention and threads<extra></extra>",
            )
        )
    ticks = [2.0**i for i in range(-4, 11)]
    yaxis = {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [f"{t:g}×" for t in ticks],
        "title": {"text": "speedup (×)"},
    }
    marks = node_boundary(sizes, ranks_per_node)
    return base_figure(title, traces, workers_axis(sizes, ranks_per_node), yaxis, marks)


def efficiency_figure(
    rows: Sequence[ScalingRow], ranks_per_node: int = 1, runs: Sequence[RunInfo] = ()
) -> go.Figure:
    """Scaling efficiency = speedup(k) / k, as a percentage, with the 100 % line (and the
    node boundary, with several ranks per node), each bar labelled inside the plot. Without
    an efficiency, why (from the sweep's ``runs``)."""
    title = "Scaling efficiency"
    shown = [r for r in rows if r.efficiency is not None]
    if not shown:
        return empty_figure(reasons.no_baseline("efficiency", rows, runs), title)
    bars = go.Bar(
        x=[str(r.world_size) for r in shown],
        y=[r.efficiency for r in shown],
        name="efficiency",
        text=[units.percent(r.efficiency, 0) for r in shown],
        textposition="outside",
        hovertemplate="%{x} worker(s): %{y:.2%} of linear<extra></extra>",
    )
    yaxis = {
        "tickformat": ".0%",
        # room above the highest bar's label and the 100 % line's
        "range": labelled_range(
            [r.efficiency for r in shown if r.efficiency is not None] + [1.0],
            above=LABEL_ROOM_ABOVE,
            zero=True,
        ),
        "title": {"text": "efficiency = speedup / workers"},
    }
    sizes = [r.world_size for r in shown]
    marks = [level_line(1.0, "linear"), *node_boundary(sizes, ranks_per_node, category=True)]
    return base_figure(title, [bars], category_workers(sizes, ranks_per_node), yaxis, marks)


def projection_figure(
    points: Sequence[ProjectedPoint], held: Sequence[HeldOut], message: str = ""
) -> go.Figure:
    """Seconds per step against workers (log–log), per link profile with an all-reduce fit:
    the measured points as markers, the line through them and the projection beyond, each
    line's legend naming the largest leave-one-out error of its profile (step and
    communication seconds); ``message`` (why there is no projection) when there are none."""
    title = "Projected time per step"
    if not points:
        return empty_figure(message or "Nothing to project.", title)
    traces = []
    networks = list(dict.fromkeys(p.network for p in points))
    for index, network in enumerate(networks):
        colour = plots_colour(index)
        row = sorted((p for p in points if p.network == network), key=lambda p: p.world_size)
        error = largest_error(held, network)
        checked = (
            f"leave-one-out error ≤ {error * 100:.1f} %"
            if error is not None
            else "not checked: no point held out"
        )
        bound = ", an upper bound (ddp)" if any(p.upper_bound for p in row) else ""
        traces.append(
            go.Scatter(
                x=[p.world_size for p in row],
                y=[p.step_s for p in row],
                mode="lines",
                line={"color": colour, "dash": "dash"},
                name=f"{network}: projected ({checked}){bound}",
                legendgroup=network,
                customdata=[
                    [
                        units.percent(p.communication_share),
                        units.seconds(p.time_to_accuracy_s),
                        p.basis,
                    ]
                    for p in row
                ],
                hovertemplate=(
                    f"{network}, %{{x}} worker(s): %{{y:.4g}} s per step, "
                    "%{customdata[0]} communicating<br>time to accuracy %{customdata[1]}<br>"
                    "%{customdata[2]}<extra></extra>"
                ),
            )
        )
        traces.append(
            measured_markers(row, network, "step_s", colour, "measured", "%{y:.4g} s per step")
        )
    sizes = [p.world_size for p in points]
    yaxis = {"type": "log", "title": {"text": "seconds per step and rank"}}
    if message:
        title += f"<br><sup>{message}</sup>"
    return base_figure(title, traces, workers_axis(sizes), yaxis)


def plots_colour(index: int) -> str:
    """The theme's colour number ``index`` (cycling)."""
    return THEME_COLOURS[index % len(THEME_COLOURS)]


def scaling_rows_table(rows: list[ScalingRow]) -> list[dict[str, str]]:
    """The numbers behind the figures, with units."""
    return [
        {
            "workers": str(r.world_size),
            "runs (reached goal)": f"{r.runs} ({r.reached})"
            + (f", {r.contended} contended" if r.contended else ""),
            "time to accuracy": time_to_accuracy_text(r, units.seconds),
            "kept repeats": (
                f"{units.seconds(r.time_to_accuracy_min_s)} – "
                f"{units.seconds(r.time_to_accuracy_max_s)}"
                if r.time_to_accuracy_s is not None
                else "—"
            ),
            "without evaluation": units.seconds(r.time_to_accuracy_without_eval_s),
            "speedup": "—"
            if r.speedup is None
            else f"{r.speedup:.3g}×" + (f" ({SUPERLINEAR_NOTE})" if r.superlinear else ""),
            "compute speedup": "—" if r.compute_speedup is None else f"{r.compute_speedup:.3g}×",
            "efficiency": units.percent(r.efficiency),
            "communication ratio": units.percent(r.communication_ratio),
        }
        for r in rows
    ]


def summary(sweep: SweepInfo, rows: dict[str, list[ScalingRow]], runs: list[RunInfo]) -> html.Div:
    """The sweep in a line, the numbers of each shown network profile, what failed."""
    failed = [r for r in runs if r.status != SUCCEEDED]
    tables: list[Any] = []
    for network, network_rows in rows.items():
        if len(rows) > 1:
            tables.append(html.H6(f"network {network}", className="mt-3"))
        tables.append(
            ui.table(
                f"scaling-table-{len(tables)}" if tables else "scaling-table",
                scaling_rows_table(network_rows),
            )
        )
    notes = [html.Li(f"{r.id}: {r.status} — {r.reason or 'no reason recorded'}") for r in failed]
    contended = [
        html.Li(
            f"{r.id}: contended — other processes took {units.percent(r.contention_share)} "
            "of its cores while it ran"
        )
        for r in runs
        if r.contended
    ]
    carried = transports_line(runs)
    return html.Div(
        [
            html.P(
                [
                    ui.badge(sweep.outcome),
                    f" {sweep.task}, {sweep.trigger}, created ",
                    f"{sweep.created_at:%Y-%m-%d %H:%M}, {len(runs)} run(s). ",
                    html.A("Its runs", href=f"/runs?q={sweep.id}"),
                ]
            ),
            *tables,
            html.P(carried, className="small text-muted mt-2 scaling-transports")
            if carried
            else None,
            html.Ul(notes, className="small text-danger mt-2") if notes else None,
            html.Ul(contended, className="small text-warning-emphasis mt-2 contended-runs")
            if contended
            else None,
        ]
    )


def transports_line(runs: list[RunInfo]) -> str:
    """What each worker count's traffic took (its runs' transports, each once), e.g.
    ``transport: 2 workers within nodes P2P; 16 workers within nodes P2P · between nodes
    NET/IB``; ``""`` where no run recorded one."""
    by_size: dict[int, list[str]] = {}
    for run in sorted(runs, key=lambda r: r.world_size):
        text = tables_module.transports_text(run)
        if text != "—" and text not in by_size.setdefault(run.world_size, []):
            by_size[run.world_size].append(text)
    parts = [
        f"{units.workers(size)} {' or '.join(texts)}" for size, texts in by_size.items() if texts
    ]
    return "transport: " + "; ".join(parts) if parts else ""


def projection_table_rows(points: list[Any], held: list[Any]) -> list[dict[str, str]]:
    """The projection's numbers with their basis, and the leave-one-out error where the point
    was measured and predicted from the others."""
    checked = {(h.network, h.world_size): h for h in held}

    def error(value: float | None) -> str:
        return "—" if value is None else f"{value:+.1%}"

    rows = []
    for p in points:
        h = checked.get((p.network, p.world_size)) if p.measured else None
        rows.append(
            {
                "network": p.network,
                "workers": str(p.world_size),
                "step": units.seconds(p.step_s) + (" (upper bound)" if p.upper_bound else ""),
                "communication": units.percent(p.communication_share),
                "time to accuracy": units.seconds(p.time_to_accuracy_s),
                "speedup": "—" if p.speedup is None else f"{p.speedup:.3g}×",
                "leave-one-out error (step, comm, TTA)": "—"
                if h is None
                else f"{error(h.step_error)}, {error(h.communication_error)}, {error(h.tta_error)}",
                "basis": p.basis,
            }
        )
    return rows
