"""What the Nightly trend page draws: pure functions from query results to figures."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import plotly.graph_objects as go

from dash_app import reasons
from dash_app.plots import SECONDS_AXIS, base_figure, empty_figure, thin
from results_db import regressions
from results_db.queries.nightly import RegressionRow, TrendPoint
from scalebench import units


def trend_figure(
    points: Sequence[TrendPoint], flags: Sequence[RegressionRow], metric: str
) -> go.Figure:
    """A metric of every nightly (``time_to_accuracy_s`` or ``samples_per_s``) per worker
    count over time; nights the detector flagged are marked with a red cross. Without a
    value of the metric, why (:func:`dash_app.reasons.no_trend`)."""
    measure, unit = units.MEASURES[metric]
    title = f"Nightly {measure}"
    shown = [p for p in points if getattr(p, metric) is not None]
    if not shown:
        return empty_figure(reasons.no_trend(points, metric), title)
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
                x=[p.when for p in group],
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
    changes = {
        (f.sweep_id, f.world_size): f.change
        for f in flags
        if metric in (f.metric, regressions.PER_REFERENCE.get(f.metric))
    }
    marked = [p for p in shown if (p.sweep_id, p.world_size) in changes]
    if marked:
        traces.append(
            go.Scatter(
                x=[p.when for p in marked],
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
    return base_figure(title, traces, {"title": {"text": "night"}}, yaxis)
