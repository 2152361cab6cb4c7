"""Pure figure builders: query rows in, a Plotly figure out.

No database, no Dash: every function here takes the plain rows of
:mod:`results_db.queries` and returns a ``plotly.graph_objects.Figure``, so
they are tested with numbers alone. Units are stated on every axis (seconds,
GB/s, dollars, bytes with IEC suffixes) and every hover label gives the exact
value. Series are bounded: the queries aggregate per-step rows in SQL, and
:func:`thin` strides anything that could still grow past :data:`MAX_POINTS`.

Each builder collects its traces and lines first and creates the figure in
one call (:func:`_figure`): Plotly validates every property it is given, and
one constructor is several times faster than a chain of updates.

Definitions (see ``results_db.analytics``): time-to-accuracy (TTA) runs from
the group's common start to the end of the first evaluation meeting the goal;
speedup(k) = TTA(1) / TTA(k); compute speedup uses compute seconds only;
efficiency = speedup / k; communication ratio = communication / step time;
cost(k) = k × (node $/h + GPU $/h) × TTA(k) h; price index = (cost(k)/cost(1)) /
speedup(k); busbw = algbw × 2(n−1)/n.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import plotly.graph_objects as go

from results_db.analytics import ScalingRow, communication_to_computation, time_to_accuracy_text
from results_db.queries import (
    AllReduceRow,
    CostRow,
    CurvePoint,
    EvalPoint,
    EventRow,
    PhaseRow,
    RegressionRow,
    RunInfo,
    TrendPoint,
)
from scalebench import units
from scalebench.tasks.published import PublishedPoint
from workers.records import PHASES

T = TypeVar("T")
MAX_POINTS = 5000  # per trace
HEIGHT = 360
PHASE_NAMES = PHASES  # as the records name them (workers/records.py)
PHASE_COLOURS = ("#9e9e9e", "#1f77b4", "#aec7e8", "#2ca02c", "#d62728", "#ff7f0e")
SECONDS_AXIS = {"tickformat": "~s", "ticksuffix": "s"}
SINGLE_RUN = {"size": 6, "color": "rgba(80,80,80,0.45)"}
GRID = "#e5e9f0"
# A small template of our own: Plotly's named templates are deep-copied into every
# figure, which costs more than building the figure itself.
THEME_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
THEME = go.layout.Template(
    layout={
        "colorway": list(THEME_COLOURS),
        "font": {
            "family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
            "color": "#333",
        },
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {
            "gridcolor": GRID,
            "zerolinecolor": GRID,
            "linecolor": "#999",
            "automargin": True,
        },
        "yaxis": {
            "gridcolor": GRID,
            "zerolinecolor": GRID,
            "linecolor": "#999",
            "automargin": True,
        },
        "hoverlabel": {"align": "left"},
    }
)


def thin(values: Sequence[T], limit: int = MAX_POINTS) -> list[T]:
    """At most ``limit`` items of ``values``, evenly strided, the last one kept."""
    if len(values) <= limit:
        return list(values)
    step = -(-len(values) // limit)
    kept = list(values[::step])
    if kept[-1] is not values[-1]:
        kept[-1] = values[-1]
    return kept


def _figure(
    title: str,
    traces: Sequence[Any],
    xaxis: dict[str, Any],
    yaxis: dict[str, Any],
    marks: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (),
    **layout: Any,
) -> go.Figure:
    """A figure in one constructor call: traces, axes, lines with their labels (``marks``)."""
    return go.Figure(
        data=list(traces),
        layout={
            "title": {"text": title, "x": 0.01, "font": {"size": 15}},
            "template": THEME,
            "height": HEIGHT,
            "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
            "legend": {"orientation": "h", "y": -0.22, "x": 0},
            "hovermode": "closest",
            "xaxis": xaxis,
            "yaxis": yaxis,
            "shapes": [shape for shape, _ in marks],
            "annotations": [label for _, label in marks],
            **layout,
        },
    )


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A blank figure that says why it is blank."""
    note = {
        "text": message,
        "showarrow": False,
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "font": {"size": 14, "color": "#666"},
    }
    return go.Figure(
        layout={
            "title": {"text": title, "x": 0.01, "font": {"size": 15}},
            "template": THEME,
            "height": HEIGHT,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [note],
        }
    )


def _level(y: float, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dotted horizontal line across the plot at ``y``, labelled at its right end."""
    shape = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"dash": "dot", "color": "#777", "width": 1.5},
    }
    label = {
        "text": text,
        "xref": "paper",
        "x": 1,
        "y": y,
        "xanchor": "right",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": 11, "color": "#555"},
    }
    return shape, label


def _moment(
    x: float, text: str, colour: str, hover: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dotted vertical line at ``x`` (an event), labelled at its top."""
    shape = {
        "type": "line",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": x,
        "x1": x,
        "line": {"dash": "dot", "color": colour, "width": 1.5},
    }
    label = {
        "text": text,
        "yref": "paper",
        "y": 1,
        "x": x,
        "xanchor": "left",
        "yanchor": "top",
        "showarrow": False,
        "hovertext": hover,
        "font": {"size": 11, "color": colour},
    }
    return shape, label


def _workers_axis(sizes: Sequence[int]) -> dict[str, Any]:
    """A log axis of worker counts with a tick at each one measured."""
    ticks = sorted(set(sizes))
    return {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [str(k) for k in ticks],
        "title": {"text": "workers"},
    }


CATEGORY_WORKERS = {"type": "category", "title": {"text": "workers"}}


def _spread(rows: Sequence[ScalingRow]) -> dict[str, Any]:
    """Error bars from each row's TTA down to its fastest and up to its slowest kept repeat."""
    return {
        "type": "data",
        "symmetric": False,
        "array": [r.time_to_accuracy_max_s - r.time_to_accuracy_s for r in rows],
        "arrayminus": [r.time_to_accuracy_s - r.time_to_accuracy_min_s for r in rows],
    }


PUBLISHED_SYMBOLS = ("diamond", "square", "triangle-up", "star")


def published_traces(
    points: Sequence[PublishedPoint], value: str, unit: str, category: bool = False
) -> list[go.Scatter]:
    """The published results with a ``value`` (a :class:`PublishedPoint` field), as black
    markers, one trace per hardware; ``category``: x is the worker count as text."""
    by_hardware: dict[str, list[PublishedPoint]] = defaultdict(list)
    for point in points:
        if getattr(point, value) is not None:
            by_hardware[point.hardware].append(point)
    return [
        go.Scatter(
            x=[str(p.world_size) if category else p.world_size for p in group],
            y=[getattr(p, value) for p in group],
            mode="markers",
            marker={"size": 11, "color": "black", "symbol": PUBLISHED_SYMBOLS[i % 4]},
            name=group[0].label,
            text=[p.note for p in group],
            hovertemplate=(
                f"published, {hardware}<br>%{{x}} worker(s): %{{y:.4g}} {unit}"
                "<br>%{text}<extra></extra>"
            ),
        )
        for i, (hardware, group) in enumerate(by_hardware.items())
    ]


NETWORK_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def per_network(figures: Mapping[str, go.Figure]) -> go.Figure:
    """One figure from the same figure drawn for each network profile (``{profile: figure}``,
    in the order to show): every trace named and grouped by its profile, the profiles told
    apart by line style, the colours kept per quantity; an ideal line that every profile
    draws alike is drawn once. A single profile is returned as it is; profiles whose
    figure has no data are left out."""
    drawn = {name: figure for name, figure in figures.items() if figure.data}
    if len(figures) == 1 or not drawn:
        return next(iter(drawn.values()), next(iter(figures.values())))

    def signature(trace: Any) -> tuple[Any, ...]:
        return (trace.name, tuple(trace.x or ()), tuple(trace.y or ()))

    shared = set.intersection(
        *({signature(t) for t in f.data if str(t.name).startswith("ideal")} for f in drawn.values())
    )
    first = next(iter(drawn.values()))
    combined = go.Figure(layout=first.layout)
    for trace in first.data:
        if signature(trace) in shared:
            combined.add_trace(trace)
    for index, (network, figure) in enumerate(drawn.items()):
        own = [t for t in figure.data if signature(t) not in shared]
        for position, trace in enumerate(own):
            trace = copy.deepcopy(trace)
            colour = THEME_COLOURS[position % len(THEME_COLOURS)]
            trace.name = f"{trace.name} · {network}"
            trace.legendgroup = network
            if position == 0:
                trace.legendgrouptitle = {"text": network}
            if isinstance(trace, go.Scatter):
                trace.line.color = trace.line.color or colour
                trace.marker.color = trace.marker.color or colour
                trace.line.dash = NETWORK_DASHES[index % len(NETWORK_DASHES)]
            if trace.hovertemplate:
                trace.hovertemplate = f"{network}: {trace.hovertemplate}"
            combined.add_trace(trace)
    combined.update_layout(legend={"groupclick": "toggleitem"})
    return combined


# -- Scaling ---------------------------------------------------------------------------------


def tta_figure(
    rows: Sequence[ScalingRow],
    runs: Sequence[RunInfo] = (),
    published: Sequence[PublishedPoint] = (),
) -> go.Figure:
    """Time-to-accuracy (s) per worker count: MLPerf mean with the kept repeats' min–max as
    error bars, the same without evaluation time, every run that reached the goal, and the
    ``published`` results that give a time."""
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
            error_y=_spread(done),
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
    return _figure(title, traces, _workers_axis(sizes), yaxis)


def speedup_figure(
    rows: Sequence[ScalingRow], published: Sequence[PublishedPoint] = ()
) -> go.Figure:
    """Speedup and compute-only speedup against ideal linear scaling (log–log), and the
    ``published`` speedups."""
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
    ticks = [2.0**i for i in range(-4, 11)]
    yaxis = {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [f"{t:g}×" for t in ticks],
        "title": {"text": "speedup (×)"},
    }
    return _figure(title, traces, _workers_axis(sizes), yaxis)


def efficiency_figure(rows: Sequence[ScalingRow]) -> go.Figure:
    """Scaling efficiency = speedup(k) / k, as a percentage, with the 100 % line."""
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
    return _figure(title, [bars], CATEGORY_WORKERS, yaxis, [_level(1.0, "linear")])


# -- Communication ---------------------------------------------------------------------------


def communication_ratio_figure(
    rows: Sequence[ScalingRow], runs: Sequence[RunInfo] = (), phases: Sequence[PhaseRow] = ()
) -> go.Figure:
    """Communication ratio = communication / total step time per worker count (mean of the
    sweep's runs, and each run), and, from the phase means, communication / computation
    (forward, loss, backward and optimizer): the text uses both."""
    title = "Communication share of step time"
    shown = [r for r in rows if r.communication_ratio is not None]
    if not shown:
        return empty_figure("No step timings with a communication phase in this sweep.", title)
    traces = [
        go.Scatter(
            x=[r.world_size for r in shown],
            y=[r.communication_ratio for r in shown],
            mode="lines+markers",
            name="communication / step time (mean over runs)",
            hovertemplate="%{x} worker(s): %{y:.2%} of step time communicating<extra></extra>",
        )
    ]
    computing = [
        (p.world_size, ratio)
        for p in phases
        if (
            ratio := communication_to_computation(
                p.communication_s, p.forward_s, p.loss_s, p.backward_s, p.optimizer_s
            )
        )
        is not None
    ]
    if computing:
        traces.append(
            go.Scatter(
                x=[size for size, _ in computing],
                y=[ratio for _, ratio in computing],
                mode="lines+markers",
                line={"dash": "dot"},
                name="communication / computation",
                hovertemplate="%{x} worker(s): communication is %{y:.2%} of computation"
                "<extra></extra>",
            )
        )
    single = thin([r for r in runs if r.communication_ratio is not None])
    if single:
        traces.append(
            go.Scatter(
                x=[r.world_size for r in single],
                y=[r.communication_ratio for r in single],
                mode="markers",
                marker=SINGLE_RUN,
                name="single runs",
                text=[r.id for r in single],
                hovertemplate="%{text}: %{y:.2%}<extra></extra>",
            )
        )
    yaxis = {
        "tickformat": ".0%",
        "rangemode": "tozero",
        "title": {"text": "ratio"},
    }
    return _figure(title, traces, _workers_axis([r.world_size for r in shown]), yaxis)


def phase_figure(rows: Sequence[PhaseRow], to_goal: bool = False) -> go.Figure:
    """Seconds in each phase, stacked, per worker count: per step and rank
    (:func:`results_db.queries.phase_means`), or with ``to_goal`` per rank over a whole run
    to the goal (:func:`results_db.queries.phase_totals`)."""
    title = "Time in each phase to reach the goal" if to_goal else "Where a step's time goes"
    unit = "rank, to the goal" if to_goal else "step and rank"
    if not rows:
        return empty_figure(
            "No run of this sweep reached its goal yet."
            if to_goal
            else "No step timings recorded for this sweep.",
            title,
        )
    sizes = [str(r.world_size) for r in rows]
    totals = [sum(getattr(r, f"{p}_s") for p in PHASE_NAMES) for r in rows]
    traces = []
    for phase, colour in zip(PHASE_NAMES, PHASE_COLOURS, strict=True):
        values = [getattr(r, f"{phase}_s") for r in rows]
        traces.append(
            go.Bar(
                x=sizes,
                y=values,
                name=phase,
                marker_color=colour,
                customdata=[
                    [units.seconds(v), units.percent(v / t if t else None)]
                    for v, t in zip(values, totals, strict=True)
                ],
                hovertemplate=(
                    f"{phase}: %{{y:.4g}} s (%{{customdata[0]}}, "
                    "%{customdata[1]} of the total) at %{x} worker(s)<extra></extra>"
                ),
            )
        )
    yaxis = {**SECONDS_AXIS, "title": {"text": f"time per {unit} (s)"}}
    return _figure(title, traces, CATEGORY_WORKERS, yaxis, barmode="stack")


def short_sweep(sweep_id: str) -> str:
    """``task0-allreduce-20261122T021847Z-80d9`` → ``20261122T021847Z-80d9``: what tells
    one sweep of a task from another."""
    parts = sweep_id.rsplit("-", 2)
    return "-".join(parts[1:]) if len(parts) == 3 else sweep_id


def _allreduce_groups(rows: Sequence[AllReduceRow], dtype: str) -> dict[str, list[AllReduceRow]]:
    """One curve per (sweep, backend, device, network, dtype, workers), keyed by its legend
    name.

    The name says only what differs: the device where the curves hold both CPU and GPU
    tensors, the network profile where there are several, the sweep where two sweeps would
    otherwise share a name.
    """
    Key = tuple[str, str, str, str, int, str]
    groups: dict[Key, list[AllReduceRow]] = defaultdict(list)
    for row in rows:
        if dtype in ("all", row.dtype):
            key = (row.backend, row.device, row.network, row.dtype, row.world_size, row.sweep)
            groups[key].append(row)
    several_devices = len({key[1] for key in groups}) > 1
    several_networks = len({key[2] for key in groups}) > 1

    def base(key: Key) -> str:
        backend, device, network, kind, size, _ = key
        device_part = f"{device} " if several_devices else ""
        network_part = f" on {network}" if several_networks else ""
        return f"{backend} {device_part}{kind} ×{size}{network_part}"

    sweeps_per_name: dict[str, set[str]] = defaultdict(set)
    for key in groups:
        sweeps_per_name[base(key)].add(key[5])
    named = {}
    for key, group in sorted(groups.items()):
        name = base(key)
        if len(sweeps_per_name[name]) > 1:
            name += f" · {short_sweep(key[5])}"
        named[name] = group
    return named


def _curve_title(row: AllReduceRow) -> str:
    """The first hover line of a curve: everything that identifies it."""
    device = f" {row.device}" if row.device else ""
    network = f" on {row.network}" if row.network != "host" else ""
    sweep = f"<br>sweep {row.sweep}" if row.sweep else ""
    return f"{row.backend}{device} {row.dtype}, {units.workers(row.world_size)}{network}{sweep}"


def _bytes_axis(rows: Sequence[AllReduceRow]) -> dict[str, Any]:
    values, labels = units.byte_ticks(min(r.bytes for r in rows), max(r.bytes for r in rows))
    return {
        "type": "log",
        "tickvals": values,
        "ticktext": labels,
        "title": {"text": "message size"},
    }


def allreduce_latency_figure(rows: Sequence[AllReduceRow], dtype: str = "all") -> go.Figure:
    """All-reduce p50 latency (s) vs message size (bytes), log–log, one line per backend,
    dtype and world size; the hover gives p50, mean and p95."""
    title = "All-reduce latency (p50)"
    groups = _allreduce_groups(rows, dtype)
    if not groups:
        return empty_figure("No all-reduce samples for this choice.", title)
    traces = [
        go.Scatter(
            x=[r.bytes for r in group],
            y=[r.p50_s for r in group],
            mode="lines+markers",
            marker={"size": 4},
            name=name,
            customdata=[
                [
                    units.byte_size(r.bytes),
                    r.bytes,
                    units.seconds(r.p50_s),
                    units.seconds(r.mean_s),
                    units.seconds(r.p95_s),
                    r.samples,
                ]
                for r in group
            ],
            hovertemplate=(
                f"{_curve_title(group[0])}<br>"
                "%{customdata[0]} (%{customdata[1]:,} B)<br>"
                "p50 %{customdata[2]} (%{y:.4g} s), mean %{customdata[3]}, "
                "p95 %{customdata[4]}<br>%{customdata[5]} repetitions"
                "<extra></extra>"
            ),
        )
        for name, group in groups.items()
    ]
    shown = [r for group in groups.values() for r in group]
    ticks, labels = units.log_ticks(
        min(r.p50_s for r in shown), max(r.p50_s for r in shown), units.seconds
    )
    yaxis = {"type": "log", "tickvals": ticks, "ticktext": labels, "title": {"text": "latency"}}
    return _figure(title, traces, _bytes_axis(shown), yaxis)


def allreduce_busbw_figure(rows: Sequence[AllReduceRow], dtype: str = "all") -> go.Figure:
    """All-reduce bus bandwidth (GB/s) = algbw × 2(n−1)/n vs message size, log–log."""
    title = "All-reduce bus bandwidth"
    groups = _allreduce_groups(rows, dtype)
    if not groups:
        return empty_figure("No all-reduce samples for this choice.", title)
    traces = [
        go.Scatter(
            x=[r.bytes for r in group],
            y=[r.busbw / 1e9 for r in group],
            mode="lines+markers",
            marker={"size": 4},
            name=name,
            customdata=[
                [units.byte_size(r.bytes), r.bytes, units.bandwidth(r.algbw)] for r in group
            ],
            hovertemplate=(
                f"{_curve_title(group[0])}<br>"
                "%{customdata[0]} (%{customdata[1]:,} B)<br>"
                "busbw %{y:.4g} GB/s, algbw %{customdata[2]}<extra></extra>"
            ),
        )
        for name, group in groups.items()
    ]
    shown = [r for group in groups.values() for r in group]
    low, high = min(r.busbw for r in shown) / 1e9, max(r.busbw for r in shown) / 1e9
    ticks, labels = units.log_ticks(low, high, lambda v: f"{v:g}")
    yaxis = {
        "type": "log",
        "tickvals": ticks,
        "ticktext": labels,
        "title": {"text": "bus bandwidth (GB/s)"},
    }
    return _figure(title, traces, _bytes_axis(shown), yaxis)


# -- Cost ------------------------------------------------------------------------------------

PRICE_KINDS = (
    ("regular", "cost_regular", "price_index_regular"),
    ("preemptible", "cost_preemptible", "price_index_preemptible"),
)
DOLLARS_AXIS = {"tickprefix": "$", "rangemode": "tozero", "title": {"text": "cost (US$)"}}


def cost_figure(rows: Sequence[CostRow], published: Sequence[PublishedPoint] = ()) -> go.Figure:
    """Dollars to reach the goal per worker count, at regular and preemptible prices, and
    the ``published`` costs."""
    title = "Cost to reach the goal"
    if not rows:
        return empty_figure("Costs need a 1-worker run that reached the goal.", title)
    traces = [
        go.Bar(
            x=[str(r.world_size) for r in rows],
            y=[getattr(r, cost) for r in rows],
            name=f"{name} prices",
            text=[units.dollars(getattr(r, cost)) for r in rows],
            textposition="outside",
            hovertemplate=f"%{{x}} worker(s), {name}: $%{{y:.4f}}<extra></extra>",
        )
        for name, cost, _ in PRICE_KINDS
    ]
    traces += published_traces(published, "cost_usd", "US$", category=True)
    return _figure(title, traces, CATEGORY_WORKERS, DOLLARS_AXIS, barmode="group")


def price_index_figure(rows: Sequence[CostRow]) -> go.Figure:
    """Price index = (cost(k)/cost(1)) / speedup(k) per worker count, with the 1.0 line."""
    title = "Price index"
    if not rows:
        return empty_figure("The price index needs a 1-worker run that reached the goal.", title)
    kinds = list(PRICE_KINDS)
    # Cost grows linearly with the workers at both prices, so the two indices are the same
    # numbers whenever prices are per worker: draw that line once, and say so.
    if all(
        math.isclose(r.price_index_regular, r.price_index_preemptible, rel_tol=1e-9) for r in rows
    ):
        kinds = [("regular and preemptible", *PRICE_KINDS[0][1:])]
        title += "<br><sup>the same at regular and preemptible prices: both scale with k</sup>"
    traces = [
        go.Scatter(
            x=[r.world_size for r in rows],
            y=[getattr(r, index) for r in rows],
            mode="lines+markers",
            name=f"{name} prices",
            hovertemplate=f"%{{x}} worker(s), {name}: price index %{{y:.4f}}<extra></extra>",
        )
        for name, _, index in kinds
    ]
    yaxis = {"rangemode": "tozero", "title": {"text": "price index (1.0: cost grows as speed)"}}
    line = _level(1.0, "1.0: below it the extra workers pay for themselves")
    return _figure(title, traces, _workers_axis([r.world_size for r in rows]), yaxis, [line])


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both time and cost (both lower is
    better), ordered by time."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front: list[int] = []
    cheapest = float("inf")
    for index in order:
        if points[index][1] < cheapest:
            front.append(index)
            cheapest = points[index][1]
    return front


def cost_time_figure(
    rows: Sequence[CostRow], published: Sequence[PublishedPoint] = ()
) -> go.Figure:
    """Cost ($) against time to accuracy (s) per worker count and price kind; the Pareto
    front (no configuration is both faster and cheaper) drawn as a line; the ``published``
    results that give both."""
    title = "Cost against time to accuracy"
    if not rows:
        return empty_figure("Costs need a 1-worker run that reached the goal.", title)
    colours = {"regular": "#1f77b4", "preemptible": "#2ca02c"}
    traces = []
    for name, cost, _ in PRICE_KINDS:
        points = [(r.time_to_accuracy_s, getattr(r, cost)) for r in rows]
        front = pareto_front(points)
        traces.append(
            go.Scatter(
                x=[p[0] for p in points],
                y=[p[1] for p in points],
                mode="markers+text",
                marker={"size": 9, "color": colours[name], "opacity": 0.5},
                text=[f"{r.world_size}w" for r in rows],
                textposition="top center",
                name=f"{name} prices",
                hovertemplate=f"%{{text}}, {name}: %{{x:.4g}} s, $%{{y:.4f}}<extra></extra>",
            )
        )
        traces.append(
            go.Scatter(
                x=[points[i][0] for i in front],
                y=[points[i][1] for i in front],
                mode="lines+markers",
                marker={"size": 12, "symbol": "star", "color": colours[name]},
                line={"width": 3, "color": colours[name]},
                name=f"Pareto front, {name}",
                text=[units.workers(rows[i].world_size) for i in front],
                hovertemplate=(
                    f"Pareto, {name}: %{{text}}, %{{x:.4g}} s, $%{{y:.4f}}<extra></extra>"
                ),
            )
        )
    for point in published:
        if point.time_to_accuracy_s is not None and point.cost_usd is not None:
            traces.append(
                go.Scatter(
                    x=[point.time_to_accuracy_s],
                    y=[point.cost_usd],
                    mode="markers+text",
                    marker={"size": 11, "color": "black", "symbol": "diamond"},
                    text=[f"{point.world_size}w"],
                    textposition="top center",
                    name=point.label,
                    hovertemplate=(
                        f"published, {point.hardware}: %{{x:.4g}} s, $%{{y:.4f}}"
                        f"<br>{point.note}<extra></extra>"
                    ),
                )
            )
    xaxis = {**SECONDS_AXIS, "title": {"text": "time to accuracy (s)"}}
    return _figure(title, traces, xaxis, DOLLARS_AXIS)


# -- A run and its sweep ---------------------------------------------------------------------


@dataclass(frozen=True)
class RunSeries:
    """What the run page draws for one run: its bucketed loss and its evaluations."""

    label: str
    run_id: str
    selected: bool
    loss: Sequence[CurvePoint]
    evals: Sequence[EvalPoint]


EVENT_COLOURS = {"goal_reached": "#2ca02c", "diverged": "#d62728", "failed": "#d62728"}
TIME_AXIS = {**SECONDS_AXIS, "title": {"text": "time since the common start (s)"}}


def _event_marks(events: Sequence[EventRow]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One labelled line per kind of event (every rank reports the same failure)."""
    marks = []
    seen: set[str] = set()
    for event in events:
        if event.event not in EVENT_COLOURS or event.event in seen:
            continue
        seen.add(event.event)
        reason = event.details.get("reason")
        text = f"{event.event.replace('_', ' ')} ({units.seconds(event.t_s)})"
        colour = EVENT_COLOURS[event.event]
        marks.append(_moment(event.t_s, text, colour, str(reason) if reason else None))
    return marks


def _line(selected: bool) -> dict[str, Any]:
    return {"width": 3 if selected else 1.5}


def loss_figure(series: Sequence[RunSeries], events: Sequence[EventRow] = ()) -> go.Figure:
    """Rank 0's training loss vs seconds since the common start, one line per run."""
    title = "Training loss"
    if not any(s.loss for s in series):
        return empty_figure("No training steps recorded.", title)
    traces = []
    for s in series:
        points = thin(s.loss)
        traces.append(
            go.Scatter(
                x=[p.t_s for p in points],
                y=[p.loss for p in points],
                mode="lines",
                name=s.label,
                line=_line(s.selected),
                opacity=1.0 if s.selected else 0.6,
                customdata=[p.steps for p in points],
                hovertemplate=(
                    f"{s.label}: loss %{{y:.4f}} at %{{x:.4g}} s "
                    "(mean of %{customdata} steps)<extra></extra>"
                ),
            )
        )
    yaxis = {"title": {"text": "training loss (rank 0)"}}
    return _figure(title, traces, TIME_AXIS, yaxis, _event_marks(events), hovermode="x unified")


def metric_figure(
    series: Sequence[RunSeries],
    metric: str | None,
    target: float | None,
    events: Sequence[EventRow] = (),
) -> go.Figure:
    """The goal metric at each evaluation vs seconds since the common start, the target line,
    and the selected run's events."""
    name = (metric or "validation metric").replace("_", " ")
    title = f"Validation {name}"
    if not any(s.evals for s in series):
        return empty_figure("No evaluation recorded.", title)
    traces = []
    for s in series:
        points = thin([p for p in s.evals if p.metric_value is not None])
        traces.append(
            go.Scatter(
                x=[p.t_s for p in points],
                y=[p.metric_value for p in points],
                mode="lines+markers",
                name=s.label,
                line=_line(s.selected),
                opacity=1.0 if s.selected else 0.6,
                customdata=[p.epoch + 1 for p in points],
                hovertemplate=(
                    f"{s.label}: {name} %{{y:.4g}} after epoch %{{customdata}}, "
                    "%{x:.4g} s<extra></extra>"
                ),
            )
        )
    marks = _event_marks(events)
    if target is not None:
        marks.append(_level(target, f"target {target:g}"))
    yaxis = {"title": {"text": name}}
    return _figure(title, traces, TIME_AXIS, yaxis, marks, hovermode="x unified")


# -- Compare and nightly trend ---------------------------------------------------------------


def compare_figure(
    a_rows: Sequence[ScalingRow], b_rows: Sequence[ScalingRow], a_name: str, b_name: str
) -> go.Figure:
    """Time to accuracy (s) of two sweeps side by side, per worker count."""
    title = "Time to accuracy, side by side"
    if not any(r.time_to_accuracy_s for r in [*a_rows, *b_rows]):
        return empty_figure("Neither sweep has a run that reached its goal.", title)
    traces = []
    for rows, name in ((b_rows, f"B: {b_name}"), (a_rows, f"A: {a_name}")):
        done = [r for r in rows if r.time_to_accuracy_s is not None]
        traces.append(
            go.Bar(
                x=[str(r.world_size) for r in done],
                y=[r.time_to_accuracy_s for r in done],
                name=name,
                error_y=_spread(done),
                hovertemplate="%{x} worker(s): %{y:.4g} s<extra>" + name[:40] + "</extra>",
            )
        )
    yaxis = {**SECONDS_AXIS, "title": {"text": "time to accuracy (s)"}}
    return _figure(title, traces, CATEGORY_WORKERS, yaxis, barmode="group")


def trend_figure(
    points: Sequence[TrendPoint], flags: Sequence[RegressionRow], metric: str
) -> go.Figure:
    """A metric of every nightly (``time_to_accuracy_s`` or ``samples_per_s``) per worker
    count over time; nights the detector flagged are marked with a red cross."""
    measure, unit = units.MEASURES[metric]
    title = f"Nightly {measure}"
    shown = [p for p in points if getattr(p, metric) is not None]
    if not shown:
        return empty_figure("No scheduled sweep with this measure yet.", title)
    configs = sorted({p.config_hash for p in shown})
    networks = {p.network for p in shown}
    series: dict[tuple[int, str, str], list[TrendPoint]] = defaultdict(list)
    for point in shown:
        series[(point.world_size, point.network, point.config_hash)].append(point)
    traces = []
    for (size, network, config), group in sorted(series.items()):
        group = thin(group)
        suffix = f" on {network}" if len(networks) > 1 else ""
        suffix += f" (configuration {config[:6]})" if len(configs) > 1 else ""
        traces.append(
            go.Scatter(
                x=[p.created_at for p in group],
                y=[getattr(p, metric) for p in group],
                mode="lines+markers",
                marker={"size": 5},
                name=units.workers(size) + suffix,
                text=[p.sweep_id for p in group],
                customdata=[[p.succeeded, p.runs] for p in group],
                hovertemplate=(
                    f"%{{text}}<br>%{{y:.4g}} {unit} (%{{customdata[0]}} of "
                    f"%{{customdata[1]}} runs succeeded)<extra>{units.workers(size)}"
                    "</extra>"
                ),
            )
        )
    changes = {(f.sweep_id, f.world_size): f.change for f in flags if f.metric == metric}
    marked = [p for p in shown if (p.sweep_id, p.world_size) in changes]
    if marked:
        traces.append(
            go.Scatter(
                x=[p.created_at for p in marked],
                y=[getattr(p, metric) for p in marked],
                mode="markers",
                marker={"size": 14, "symbol": "x", "color": "#d62728"},
                name="flagged regression",
                text=[
                    f"{p.sweep_id}, {units.workers(p.world_size)}: "
                    f"{units.signed_percent(changes[(p.sweep_id, p.world_size)])} worse"
                    for p in marked
                ],
                hovertemplate="REGRESSION %{text}<extra></extra>",
            )
        )
    yaxis = {"rangemode": "tozero", "title": {"text": f"{measure} ({unit})"}}
    if unit == "s":
        yaxis.update(SECONDS_AXIS)
    return _figure(title, traces, {"title": {"text": "night"}}, yaxis)
