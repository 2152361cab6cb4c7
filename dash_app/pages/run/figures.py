"""What the Run page draws: loss and the task's metric over time, with the run's events,
and the run's facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import html

from dash_app import components as ui
from dash_app import reasons, tables
from dash_app.choices import is_allreduce
from dash_app.plots import (
    LABEL_ROOM_ABOVE,
    SECONDS_AXIS,
    base_figure,
    empty_figure,
    labelled_range,
    level_line,
    moment_line,
    thin,
)
from results_db.queries.runs import CurvePoint, EvalPoint, EventRow, RunInfo
from scalebench import units


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
        marks.append(moment_line(event.t_s, text, colour, str(reason) if reason else None))
    return marks


def _line(selected: bool) -> dict[str, Any]:
    return {"width": 3 if selected else 1.5}


def loss_figure(
    series: Sequence[RunSeries], events: Sequence[EventRow] = (), run: RunInfo | None = None
) -> go.Figure:
    """Rank 0's training loss vs seconds since the common start, one line per run; without
    any, why (from the selected ``run``)."""
    title = "Training loss"
    if not any(s.loss for s in series):
        why = reasons.run_without(run, "training step") if run else "No training step recorded."
        return empty_figure(why, title)
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
    return base_figure(title, traces, TIME_AXIS, yaxis, _event_marks(events), hovermode="x unified")


def metric_figure(
    series: Sequence[RunSeries],
    metric: str | None,
    target: float | None,
    events: Sequence[EventRow] = (),
    run: RunInfo | None = None,
) -> go.Figure:
    """The goal metric at each evaluation vs seconds since the common start, the target line,
    and the selected run's events; without any evaluation, why (from the selected ``run``)."""
    name = (metric or "validation metric").replace("_", " ")
    title = f"Validation {name}"
    if not any(s.evals for s in series):
        why = reasons.run_without(run, "evaluation") if run else "No evaluation recorded."
        return empty_figure(why, title)
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
    yaxis: dict[str, Any] = {"title": {"text": name}}
    if target is not None:
        marks.append(level_line(target, f"target {target:g}"))
        values = [y for trace in traces for y in trace.y]
        # room above the target line for its label, wherever the curves end
        yaxis["range"] = labelled_range([*values, target], LABEL_ROOM_ABOVE, 0.05)
    return base_figure(title, traces, TIME_AXIS, yaxis, marks, hovermode="x unified")


def facts(run: RunInfo, last_metric: float | None = None) -> html.Div:
    items = tables.run_facts(run, last_metric)
    links = [
        html.A("scaling of its sweep", href=tables.link("/scaling", sweep=run.sweep_id)),
        " · ",
        html.A("communication", href=tables.link("/communication", sweep=run.sweep_id)),
        " · ",
        html.A("cost", href=tables.link("/cost", sweep=run.sweep_id)),
    ]
    if is_allreduce(run.task):
        links = [
            html.A(
                "all-reduce curves of its sweep",
                href=tables.link("/communication", allreduce=run.sweep_id),
            )
        ]
    return html.Div(
        [
            html.H4([ui.badge(run.status), " ", run.id], className="run-title"),
            dbc.Table(
                html.Tbody([html.Tr([html.Th(label), html.Td(value)]) for label, value in items]),
                size="sm",
                bordered=False,
                className="run-facts w-auto",
            ),
            html.P(links, className="small"),
        ]
    )
