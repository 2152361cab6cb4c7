"""The Cost page's figures: dollars to the goal, the price index, cost against time, and the
projected cost at worker counts not measured."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from dash_app.plots import (
    LABEL_ROOM_ABOVE,
    LABEL_ROOM_BESIDE,
    SECONDS_AXIS,
    THEME_COLOURS,
    base_figure,
    category_workers,
    empty_figure,
    labelled_range,
    level_line,
    measured_markers,
    node_boundary,
    published_traces,
    workers_axis,
)
from results_db.projection import ProjectedPoint
from results_db.queries.costs import CostRow
from scalebench import units
from scalebench.tasks.published import PublishedPoint

PRICE_KINDS = (
    ("regular", "cost_regular", "price_index_regular"),
    ("preemptible", "cost_preemptible", "price_index_preemptible"),
)
DOLLARS_AXIS = {"tickprefix": "$", "rangemode": "tozero", "title": {"text": "cost (US$)"}}
# Without a cause given (reasons.no_baseline says which), why a cost figure is empty.
NO_BASELINE = "No costs without the time to accuracy of 1 worker."


def cost_figure(
    rows: Sequence[CostRow],
    published: Sequence[PublishedPoint] = (),
    ranks_per_node: int = 1,
    why: str = NO_BASELINE,
) -> go.Figure:
    """Dollars to reach the goal per worker count, at regular and preemptible prices, each
    bar labelled inside the plot, and the ``published`` costs; with several ranks per node,
    each count's shape and the node boundary. Without rows, ``why``."""
    title = "Cost to reach the goal"
    if not rows:
        return empty_figure(why, title)
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
    sizes = [r.world_size for r in rows]
    marks = node_boundary(sizes, ranks_per_node, category=True)
    axis = category_workers(sizes, ranks_per_node)
    costs = [y for trace in traces for y in trace.y if y is not None]
    yaxis = {**DOLLARS_AXIS, "range": labelled_range(costs, above=LABEL_ROOM_ABOVE, zero=True)}
    return base_figure(title, traces, axis, yaxis, marks, barmode="group")


def price_index_figure(
    rows: Sequence[CostRow], ranks_per_node: int = 1, why: str = NO_BASELINE
) -> go.Figure:
    """Price index = (cost(k)/cost(1)) / speedup(k) per worker count, with the 1.0 line (and
    the node boundary, with several ranks per node). Without rows, ``why``."""
    title = "Price index"
    if not rows:
        return empty_figure(why, title)
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
    indices = [y for trace in traces for y in trace.y if y is not None]
    yaxis = {  # room above the 1.0 line for its label
        "range": labelled_range([*indices, 1.0], above=LABEL_ROOM_ABOVE, zero=True),
        "title": {"text": "price index (1.0: cost grows as speed)"},
    }
    line = level_line(1.0, "1.0: below it the extra workers pay for themselves")
    sizes = [r.world_size for r in rows]
    marks = [line, *node_boundary(sizes, ranks_per_node)]
    return base_figure(title, traces, workers_axis(sizes, ranks_per_node), yaxis, marks)


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
    rows: Sequence[CostRow], published: Sequence[PublishedPoint] = (), why: str = NO_BASELINE
) -> go.Figure:
    """Cost ($) against time to accuracy (s) per worker count and price kind, each point
    labelled with its workers inside the plot; the Pareto front (no configuration is both
    faster and cheaper) drawn as a line; the ``published`` results that give both. Without
    rows, ``why``."""
    title = "Cost against time to accuracy"
    if not rows:
        return empty_figure(why, title)
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
    # every point's label (above it, centred) inside the plot
    times = [x for trace in traces for x in trace.x]
    costs = [y for trace in traces for y in trace.y]
    xaxis = {
        **SECONDS_AXIS,
        "range": labelled_range(times, beside=LABEL_ROOM_BESIDE),
        "title": {"text": "time to accuracy (s)"},
    }
    yaxis = {**DOLLARS_AXIS, "range": labelled_range(costs, above=LABEL_ROOM_ABOVE, zero=True)}
    return base_figure(title, traces, xaxis, yaxis)


def projected_cost_figure(points: Sequence[ProjectedPoint], message: str = "") -> go.Figure:
    """Dollars to reach the goal against workers (log axis), per link profile: the projection
    at regular prices as a dashed line and at preemptible prices as a dotted one, the measured
    points as markers; ``message`` (what could not be projected or priced) in the title, or
    alone when nothing could."""
    title = "Projected cost to reach the goal"
    priced = [p for p in points if p.cost_regular is not None]
    if not priced:
        return empty_figure(message or "Nothing to project.", title)
    traces = []
    for index, network in enumerate(dict.fromkeys(p.network for p in priced)):
        colour = THEME_COLOURS[index % len(THEME_COLOURS)]
        row = sorted((p for p in priced if p.network == network), key=lambda p: p.world_size)
        for kind, dash in (("regular", "dash"), ("preemptible", "dot")):
            traces.append(
                go.Scatter(
                    x=[p.world_size for p in row],
                    y=[getattr(p, f"cost_{kind}") for p in row],
                    mode="lines",
                    line={"color": colour, "dash": dash},
                    name=f"{network}: projected, {kind} prices",
                    legendgroup=network,
                    customdata=[[units.seconds(p.time_to_accuracy_s), p.basis] for p in row],
                    hovertemplate=(
                        f"{network}, %{{x}} worker(s), {kind}: $%{{y:.4g}}<br>time to accuracy "
                        "%{customdata[0]}<br>%{customdata[1]}<extra></extra>"
                    ),
                )
            )
        traces.append(
            measured_markers(
                row, network, "cost_regular", colour, "measured, regular prices", "$%{y:.4g}"
            )
        )
    if message:
        title += f"<br><sup>{message}</sup>"
    # ticks of our own, each labelled in dollars: Plotly's own on a log axis of less than a
    # few decades write every minor tick's digit, over one another
    costs = [y for trace in traces for y in trace.y if y]
    ticks, labels = units.log_ticks(min(costs), max(costs), units.dollars)
    yaxis = {
        "type": "log",
        "tickvals": ticks,
        "ticktext": labels,
        "title": DOLLARS_AXIS["title"],
    }
    return base_figure(title, traces, workers_axis([p.world_size for p in priced]), yaxis)
