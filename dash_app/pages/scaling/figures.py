"""The Scaling page's figures: time to accuracy, speedup and efficiency against workers, and
the projection of step time to worker counts not measured."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from dash_app.plots import (
    SINGLE_RUN,
    THEME_COLOURS,
    base_figure,
    category_workers,
    empty_figure,
    level_line,
    node_boundary,
    published_traces,
    spread_of,
    thin,
    workers_axis,
)
from results_db.analytics import SUPERLINEAR_NOTE, ScalingRow, time_to_accuracy_text
from results_db.projection import HeldOut, ProjectedPoint, largest_error
from results_db.queries.runs import RunInfo
from scalebench import units
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
            return empty_figure("No run of this sweep reached its goal yet.", title)
        return empty_figure(f"Too few repeats reached the goal. {short}", title)
    if short:
        title += f"<br><sup>no time to accuracy for {short}</sup>"
    single = [units.workers(r.world_size) for r in done if r.runs == 1]
    if single:
        # One repeat behind a point: no spread to draw, and a reader must know it.
        title += f"<br><sup>a single repeat, no spread: {', '.join(single)}</sup>"
    traces = [
        go.Scatter(
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
        ),
    ]
    without = [r for r in done if r.time_to_accuracy_without_eval_s is not None]
    traces.append(
        go.Scatter(
            x=[r.world_size for r in without],
            y=[r.time_to_accuracy_without_eval_s for r in without],
            mode="lines+markers",
            line={"dash": "dash"},
            name="without evaluation time",
            hovertemplate="%{x} worker(s): %{y:.4g} s without evaluation<extra></extra>",
        )
    )
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


def speedup_figure(
    rows: Sequence[ScalingRow], published: Sequence[PublishedPoint] = (), ranks_per_node: int = 1
) -> go.Figure:
    """Speedup and compute-only speedup against ideal linear scaling (log–log), and the
    ``published`` speedups; with several ranks per node, each count's shape and the node
    boundary."""
    title = "Speedup against one worker"
    with_speedup = [r for r in rows if r.speedup is not None]
    if not with_speedup:
        return empty_figure("Speedup needs a 1-worker run that reached the goal.", title)
    shown = published_traces(published, "speedup", "×")
    sizes = sorted({r.world_size for r in rows} | {x for trace in shown for x in trace.x})
    compute = [r for r in rows if r.compute_speedup is not None]
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
        go.Scatter(
            x=[r.world_size for r in compute],
            y=[r.compute_speedup for r in compute],
            mode="lines+markers",
            line={"dash": "dash"},
            name="compute speedup (compute time only)",
            hovertemplate="%{x} worker(s): compute speedup %{y:.4g}×<extra></extra>",
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


def efficiency_figure(rows: Sequence[ScalingRow], ranks_per_node: int = 1) -> go.Figure:
    """Scaling efficiency = speedup(k) / k, as a percentage, with the 100 % line (and the
    node boundary, with several ranks per node)."""
    title = "Scaling efficiency"
    shown = [r for r in rows if r.efficiency is not None]
    if not shown:
        return empty_figure("Efficiency needs a 1-worker run that reached the goal.", title)
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
        "rangemode": "tozero",
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
        measured = [p for p in row if p.measured]
        traces.append(
            go.Scatter(
                x=[p.world_size for p in measured],
                y=[p.step_s for p in measured],
                mode="markers",
                marker={"color": colour, "size": 10},
                name=f"{network}: measured",
                legendgroup=network,
                hovertemplate=f"{network}, %{{x}} worker(s): %{{y:.4g}} s per step, measured"
                "<extra></extra>",
            )
        )
    sizes = [p.world_size for p in points]
    yaxis = {"type": "log", "title": {"text": "seconds per step and rank"}}
    if message:
        title += f"<br><sup>{message}</sup>"
    return base_figure(title, traces, workers_axis(sizes), yaxis)


def plots_colour(index: int) -> str:
    """The theme's colour number ``index`` (cycling)."""
    return THEME_COLOURS[index % len(THEME_COLOURS)]
