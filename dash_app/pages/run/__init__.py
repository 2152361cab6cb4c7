"""One run: its numbers, training loss and validation metric over time next to the other worker
counts of its sweep (an all-reduce run: its latency and bus bandwidth against message size),
its events, environment and downloads.

URL: ``/run?id=<run id>`` (default: the newest run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, dcc, html

from dash_app import components as ui
from dash_app import data, downloads, reasons, tables
from dash_app.choices import is_allreduce
from dash_app.pages.communication.figures import allreduce_busbw_figure, allreduce_latency_figure
from dash_app.pages.run import figures
from dash_app.state import Query, to_search
from dash_app.wiring import (
    Outputs,
    Page,
    blank_figure,
    chosen,
    cleared,
    message,
    tick,
    values,
)
from results_db.queries.runs import RunInfo
from scalebench import units
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/run",
    "Run",
    "One group at one worker count: a training run beside the other worker counts of its "
    "sweep, an all-reduce run with its latency and bandwidth curves.",
    order=5,
)


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class RunState:
    """A run's page (None: the newest run)."""

    id: str | None = None


def parse_run(params: Mapping[str, Any]) -> tuple[RunState, list[str]]:
    query = Query(params)
    return RunState(id=query.identifier("id", "run")), query.problems()


def build(state: RunState, problems: list[str]) -> html.Div:
    """The page of ``state``'s run (the newest when there is no such run): a picker of
    its sweep's runs, and the slots :func:`update` fills."""
    source = data.current()
    run = source.run(state.id) if state.id else None
    if state.id and run is None:
        problems = [
            *problems,
            f"id: there is no run {state.id!r} in the database; showing the newest run instead.",
        ]
    if run is None:
        newest = source.runs(limit=1)
        if not newest:
            return PAGE.empty(problems)
        run = newest[0]
    siblings = source.sweep_runs(run.sweep_id)
    picker = dcc.Dropdown(
        id="run-id",
        options=[{"label": run_label(r), "value": r.id} for r in siblings],
        value=run.id,
        clearable=False,
    )
    return PAGE(
        ui.location("run"),
        ui.refresher("run"),
        dbc.Row(
            dbc.Col([dbc.Label("Run of sweep " + run.sweep_id, html_for="run-id"), picker], lg=8)
        ),
        html.Div(id="run-facts", className="my-3"),
        dbc.Row([dbc.Col(ui.graph("run-loss"), lg=6), dbc.Col(ui.graph("run-metric"), lg=6)]),
        dbc.Row(
            [
                dbc.Col([html.H5("Events"), html.Div(id="run-events")], lg=6),
                dbc.Col([html.H5("Environment"), html.Div(id="run-environment")], lg=6),
            ],
            className="mt-3",
        ),
        html.H5("Downloads", className="mt-3"),
        html.Div(id="run-downloads"),
        problems=problems,
    )


def run_label(run: RunInfo) -> str:
    return f"{units.workers(run.world_size)}, repeat {run.repeat + 1}, {run.status}: {run.id}"


def companions(run: RunInfo, siblings: list[RunInfo]) -> list[RunInfo]:
    """The run and, for every other worker count of its sweep, the run with the same repeat
    (or that count's first repeat), by worker count."""
    chosen: dict[int, RunInfo] = {}
    for other in sorted(siblings, key=lambda r: (r.world_size, r.repeat != run.repeat, r.repeat)):
        chosen.setdefault(other.world_size, other)
    chosen[run.world_size] = run
    return [chosen[size] for size in sorted(chosen)]


OUTPUTS = Outputs.of_page(
    "run",
    facts=message("run-facts"),
    loss=blank_figure("run-loss"),
    metric=blank_figure("run-metric"),
    events=cleared("run-events"),
    environment=cleared("run-environment"),
    downloads=cleared("run-downloads"),
)


def update(run_id: str | None, _tick: int | None = None) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, facts, loss and metric figures, events,
    environment, downloads, refresh disabled."""
    source = data.current()
    run = chosen(run_id, source.run, "run")
    sweep = source.sweep(run.sweep_id)
    shown = companions(run, source.sweep_runs(run.sweep_id))
    curves = source.curves(run.sweep_id, shown)
    series = [
        figures.RunSeries(
            label=units.workers(r.world_size) + (" (this run)" if r.id == run.id else ""),
            run_id=r.id,
            selected=r.id == run.id,
            loss=curves[r.id][0],
            evals=curves[r.id][1],
        )
        for r in shown
    ]
    events = source.events(run.id)
    event_rows = tables.event_rows(events)
    environment = tables.environment_rows(source.environments(run.id))
    files = html.Ul(
        [
            html.Li(html.A("evaluations (CSV)", href=downloads.url(run.id, "evaluations.csv"))),
            html.Li(html.A("steps of every rank (CSV)", href=downloads.url(run.id, "steps.csv"))),
            html.Li(html.A("official result (text)", href=downloads.url(run.id, "official.txt"))),
        ]
    )
    if is_allreduce(run.task):  # no training: the run's own all-reduce curves instead
        measured = source.run_allreduce(run.sweep_id, run.id)
        left = allreduce_latency_figure(measured, runs=[run])
        right = allreduce_busbw_figure(measured, runs=[run])
    else:
        left = figures.loss_figure(series, events, run)
        right = figures.metric_figure(series, run.goal_metric, run.goal_target, events, run)
    return OUTPUTS.answer(
        search=to_search(RunState(id=run.id)),
        facts=figures.facts(run, next((e.metric_value for e in reversed(curves[run.id][1])), None)),
        loss=left,
        metric=right,
        events=ui.table("run-events-table", event_rows)
        if event_rows
        else html.P(reasons.run_without(run, "event"), className="text-muted"),
        environment=ui.table("run-env-table", environment)
        if environment
        else html.P(reasons.run_without(run, "environment"), className="text-muted"),
        downloads=files,
        refresh_off=sweep is None or sweep.outcome != RUNNING,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_run, build)
    OUTPUTS.wire(app, update, *values("run-id"), tick("run"))
