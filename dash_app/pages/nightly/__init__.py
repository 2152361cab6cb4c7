"""Nightly: the paired nightly, tonight's software stack against the pinned reference stack
night after night, the changes it found (findings) and their triage.

URL: ``/nightly?task=<task>&metric=<metric>&state=<state>&finding=<id>``. A finding's link
(``/nightly?finding=<id>``, as the nightly's messages send it) opens on its task and the
measure it moved. The triage buttons are the dashboard's one write
(:meth:`dash_app.data.Source.triage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
from dash import Dash, Input, State, ctx, dcc, html

from dash_app import components as ui
from dash_app import data
from dash_app.nightly_data import TriageRefused
from dash_app.pages.nightly import figures
from dash_app.state import Query, to_search
from dash_app.wiring import (
    NotShown,
    Outputs,
    Page,
    blank_figure,
    cleared,
    guarded,
    kept,
    message,
    tick,
    values,
)
from results_db.queries.paired_nights import FindingRow
from results_db.regressions.paired_findings import PAIRED_METRICS
from results_db.regressions.shifts import PAIRED_RULE
from results_db.regressions.triage import STATES
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/nightly",
    "Nightly",
    "Tonight's software stack against the pinned reference stack, night after night: the "
    "ratio of the two, the reference's own time, and the changes found in them.",
    order=8,
)
DEFAULT_METRIC = "steady_step_s"
ANY = "any"
STATE_FILTERS = (ANY, *STATES)
NO_PAIRED_NIGHT = [
    html.H4("No paired night yet", className="alert-heading"),
    html.P(
        "The nightly runs tonight's software stack beside a reference stack once one is "
        "pinned; each such night, and the changes found in it, appear here. Pin the "
        "reference (an interpreter, or an image for Kubernetes with --image):"
    ),
    html.Pre(html.Code("scalebench nightly pin PYTHON_OR_IMAGE")),
    html.P(
        [
            "or set ",
            html.Code("SCALEBENCH_NIGHTLY_REFERENCE_STACK"),
            ' (JSON, e.g. {"python": "/opt/reference/bin/python"}) where the nightly runs; '
            "the next night runs both.",
        ],
        className="mb-0",
    ),
]
HOW = (
    "Each night runs both stacks in rounds, each round both at the same seed. A series (a "
    "measure at one worker count on one link) has each night's ratio tonight / reference, the "
    "geometric mean over the rounds with its 95 % interval, and the reference arm's own "
    "seconds. A change point is the first night of a new level. A series is flagged where its "
    f"newest nights moved by at least {PAIRED_RULE.min_change:.0%} against at least "
    f"{PAIRED_RULE.min_baseline_nights} nights before them (at most {PAIRED_RULE.alpha:.0%} "
    "false alarms per series and night); the series that moved on the same night make one "
    "finding, blamed on the stack where only the ratio moved, on the platform where the "
    "reference arm moved too. False alarms: the findings people marked false-alarm that name "
    "the series, over the nights it was judged on."
)


def button_id(state: str) -> str:
    """The id of the triage button that sets ``state``."""
    return f"nightly-triage-{state}"


BUTTON_STATES = {button_id(state): state for state in STATES}
STATE_COLOURS = {
    "open": "danger",
    "acknowledged": "warning",
    "expected": "info",
    "false-alarm": "secondary",
    "fixed": "success",
}


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class NightlyState:
    """The paired series of one task (``metric``: the measure drawn, None for the steady
    step, or the one ``finding`` moved), the findings of ``state`` and the one shown
    (``finding``; 0: none)."""

    task: str | None = None
    metric: str | None = None
    state: str = ANY
    finding: int = 0


def parse_nightly(params: Mapping[str, Any]) -> tuple[NightlyState, list[str]]:
    query = Query(params)
    metric = query.choice("metric", PAIRED_METRICS, "")
    state = NightlyState(
        task=query.identifier("task", "task"),
        metric=metric or None,
        state=query.choice("state", STATE_FILTERS, ANY),
        finding=query.integer("finding", 0, 1, 2**31 - 1),
    )
    return state, query.problems()


def build(state: NightlyState, problems: list[str]) -> html.Div:
    """The page for ``state``: its controls and the slots :func:`update` fills; without a
    paired night, how to start one."""
    source = data.current()
    chosen = None
    if state.finding:
        found = source.findings(finding_id=state.finding)
        chosen = found[0] if found else None
        if chosen is None:
            problems = [*problems, f"finding: there is no finding {state.finding}."]
    tasks = source.paired_tasks()
    own = figures.finding_task(chosen) if chosen is not None else None
    if own is not None and own not in tasks:
        tasks.append(own)  # its nights are gone; the finding is still shown
    if not tasks:
        alert = dbc.Alert(NO_PAIRED_NIGHT, color="info", className="empty-state")
        return PAGE(alert, problems=problems)
    task = state.task or own
    if task not in tasks:
        if task is not None:
            problems = [*problems, f"task: no paired night of {task!r}; showing {tasks[0]}."]
        task = tasks[0]
    metric = state.metric or (figures.headline_metric(chosen) if chosen else DEFAULT_METRIC)
    listed = source.findings(states=None if state.state == ANY else (state.state,), task=task)
    controls = dbc.Row(
        [
            dbc.Col(
                [
                    dbc.Label("Task", html_for="nightly-task"),
                    dcc.Dropdown(id="nightly-task", options=tasks, value=task, clearable=False),
                ],
                md=4,
            ),
            dbc.Col(
                [
                    dbc.Label("Measure", html_for="nightly-metric"),
                    dcc.Dropdown(
                        id="nightly-metric",
                        options=[
                            {"label": figures.metric_words(m), "value": m} for m in PAIRED_METRICS
                        ],
                        value=metric,
                        clearable=False,
                        searchable=False,
                    ),
                ],
                md=3,
            ),
        ],
        className="mb-2",
    )
    finding_controls = dbc.Row(
        [
            dbc.Col(
                [
                    dbc.Label("Findings in state", html_for="nightly-state"),
                    dcc.Dropdown(
                        id="nightly-state",
                        options=list(STATE_FILTERS),
                        value=state.state,
                        clearable=False,
                        searchable=False,
                    ),
                ],
                md=3,
            ),
            dbc.Col(
                [
                    dbc.Label("Finding shown", html_for="nightly-finding"),
                    dcc.Dropdown(
                        id="nightly-finding",
                        options=figures.finding_options(listed, chosen),
                        value=chosen.id if chosen is not None else None,
                        placeholder="choose a finding",
                    ),
                ],
                md=6,
            ),
        ],
        className="my-2",
    )
    return PAGE(
        ui.location("nightly"),
        ui.refresher("nightly"),
        dcc.Store(id="nightly-triaged", data=0),
        controls,
        html.Details(
            [html.Summary("How is this judged?"), html.P(HOW, className="small")],
            className="mb-3 definitions",
        ),
        ui.graph("nightly-figure"),
        html.H5("Series", className="mt-3"),
        html.Div(id="nightly-series"),
        html.H5("Findings", className="mt-3"),
        finding_controls,
        html.Div(id="nightly-findings"),
        html.Div(id="nightly-detail", className="mt-3"),
        triage_box(),
        problems=problems,
    )


def triage_box() -> html.Div:
    """A button per triage state, a note, and where the answer is said; hidden until a
    finding is shown."""
    return html.Div(
        [
            html.H6("Triage", className="mt-2"),
            dbc.Input(
                id="nightly-note",
                type="text",
                maxLength=2000,
                placeholder="a note (optional; kept as it is when empty)",
                className="mb-2",
            ),
            html.Div(
                [
                    dbc.Button(
                        state,
                        id=button_id(state),
                        n_clicks=0,
                        color="secondary",
                        outline=True,
                        size="sm",
                        className="me-2",
                    )
                    for state in STATES
                ]
            ),
            html.Div(id="nightly-triage-message", className="mt-2"),
        ],
        id="nightly-triage-box",
        style={"display": "none"},
    )


# -- the main callback ------------------------------------------------------------------


OUTPUTS = Outputs.of_page(
    "nightly",
    figure=blank_figure("nightly-figure"),
    series=message("nightly-series"),
    findings=message("nightly-findings"),
    finding_options=kept("nightly-finding", "options"),
    detail=cleared("nightly-detail"),
    triage_style=cleared("nightly-triage-box", "style", {"display": "none"}),
)


def update(
    task: str | None,
    metric: str | None,
    state: str | None,
    finding_id: int | None,
    _triaged: int | None = None,
    _tick: int | None = None,
) -> dict[str, Any]:
    """The named :data:`OUTPUTS`: URL search, the series' figure and table, the findings,
    the one shown with its triage, refresh disabled."""
    if not task:
        raise NotShown("Choose a task.")
    metric = metric if metric in PAIRED_METRICS else DEFAULT_METRIC
    state = state if state in STATE_FILTERS else ANY
    source = data.current()
    histories = source.nightly_history(task)
    of_task = source.findings(task=task)
    listed = [f for f in of_task if state == ANY or f.state == state]
    chosen = None
    if finding_id:
        found = source.findings(finding_id=finding_id)
        chosen = found[0] if found else None
    alarms = figures.false_alarms(histories, of_task)
    series_rows = figures.series_rows(histories, alarms)
    newest = max((p for h in histories for p in h.points), key=lambda p: p.night, default=None)
    sweep = source.sweep(newest.sweep_id) if newest is not None else None
    running = sweep is not None and sweep.outcome == RUNNING
    shown = NightlyState(
        task=task,
        metric=None if metric == DEFAULT_METRIC else metric,
        state=state,
        finding=chosen.id if chosen is not None else 0,
    )
    return OUTPUTS.answer(
        search=to_search(shown),
        figure=figures.nightly_figure(histories, metric, alarms, chosen),
        series=ui.table("nightly-series-table", series_rows)
        if series_rows
        else html.P(f"No paired night of {task} has a result yet."),
        findings=ui.table("nightly-finding-table", figures.finding_rows(listed), links=("finding",))
        if listed
        else html.P("No finding in this state." if state != ANY else "No finding yet."),
        finding_options=figures.finding_options(listed, chosen),
        detail=detail(chosen, finding_id),
        triage_style=None if chosen is not None else {"display": "none"},
        refresh_off=not running,
    )


def detail(finding: FindingRow | None, asked: int | None) -> Any:
    """The finding shown: its facts, the series it moved, and what changed as a table."""
    if finding is None:
        if asked:
            return ui.error_alert(f"There is no finding {asked} in the database.")
        return html.P("Choose a finding to see what changed and to triage it.", className="small")
    diff = figures.diff_rows(finding)
    part = (finding.diff or {}).get("part", finding.attribution)
    return html.Div(
        [
            html.H5(
                [
                    f"Finding {finding.id} ",
                    dbc.Badge(
                        finding.state,
                        color=STATE_COLOURS.get(finding.state, "secondary"),
                        id="nightly-finding-state",
                        className="ms-1",
                    ),
                ]
            ),
            html.Dl(
                [
                    item
                    for what, value in figures.finding_facts(finding)
                    for item in (
                        html.Dt(what, className="col-sm-2"),
                        html.Dd(value, className="col-sm-10 mb-1"),
                    )
                ],
                id="nightly-facts",
                className="row small",
            ),
            html.H6("Series it moved"),
            ui.table("nightly-moved-table", figures.moved_rows(finding)),
            html.H6(f"What changed ({part})", className="mt-3"),
            ui.table("nightly-diff-table", diff)
            if diff
            else html.P(
                "Nothing recorded differs between the night before and this one.",
                id="nightly-diff-none",
            ),
        ],
        id="nightly-finding-detail",
    )


# -- triage ----------------------------------------------------------------------------


TRIAGE = Outputs(
    said=message("nightly-triage-message"),
    triaged=kept("nightly-triaged", "data"),
)


def triage(
    pressed: str | None, finding_id: int | None, note: str | None, count: int | None
) -> dict[str, Any]:
    """A triage button ``pressed`` (its id) for the finding shown: its state stored with
    ``note``, said, and the page's view read again (``triaged``: a count of triages)."""
    state = BUTTON_STATES.get(pressed or "")
    if state is None:
        return TRIAGE.answer()
    if not finding_id:
        raise NotShown("Choose a finding first.")
    try:
        said = data.current().triage(finding_id, state, (note or "").strip() or None)
    except TriageRefused as exc:
        return TRIAGE.answer(said=ui.error_alert(str(exc)))
    return TRIAGE.answer(
        said=dbc.Alert(said, color="success", className="triage-done"),
        triaged=(count or 0) + 1,
    )


def register(app: Dash) -> None:
    PAGE.register(parse_nightly, build)
    OUTPUTS.wire(
        app,
        update,
        *values("nightly-task", "nightly-metric", "nightly-state", "nightly-finding"),
        Input("nightly-triaged", "data"),
        tick("nightly"),
    )
    safe = guarded(TRIAGE.failure)(triage)

    def clicked(*answers: Any) -> Any:
        return safe(ctx.triggered_id, *answers[len(STATES) :])

    app.callback(
        output=TRIAGE.outputs,
        inputs=[Input(button, "n_clicks") for button in BUTTON_STATES],
        state=[
            State("nightly-finding", "value"),
            State("nightly-note", "value"),
            State("nightly-triaged", "data"),
        ],
        prevent_initial_call=True,
    )(clicked)
