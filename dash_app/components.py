"""Building blocks every page shares: page frame, alerts, badges, graphs, pickers, grids.

How a page is registered, and how its callbacks are wired and guarded, is
:mod:`dash_app.wiring`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import dcc, html

from dash_app import plots, reasons
from dash_app.data import FIRST_SWEEP, QUICKSTART
from results_db import regressions
from results_db.queries.sweeps import SweepInfo
from scalebench import statuses
from scalebench.tasks.published import SOURCE, PublishedPoint, published_points

REFRESH_MS = 10_000  # how often a page with a running sweep reloads its figures


DEFINITIONS = {
    "time_to_accuracy": "Time to accuracy: wall time from the group's common start to the end "
    "of the first evaluation that meets the goal (also shown without evaluation time). "
    "Repeats are combined by MLPerf's rule: drop the fastest and slowest of three or more, "
    "then take the mean.",
    "speedup": "Speedup(k) = TTA(1) / TTA(k); compute speedup uses compute time only "
    "(forward, loss, backward, optimizer). Efficiency = speedup(k) / k.",
    "communication": "Communication ratio = communication time / total step time, per rank, "
    "averaged. All-reduce: p50 latency per message size; algbw = bytes / time; busbw = algbw × "
    "2(n−1)/n (the nccl-tests convention).",
    "cost": "Cost(k) = k × (node $/h + GPU $/h) × TTA(k) in hours. Price index(k) = "
    "(cost(k) / cost(1)) / speedup(k): below 1.0 the extra workers pay for themselves.",
    "regression": f"A nightly is flagged when {regressions.RULE.describe()}.",
}


def page(title: str, intro: str, *children: Any, problems: Sequence[str] = ()) -> html.Div:
    """A page: its title, a line saying what it shows, URL problems, then the content."""
    return html.Div(
        [
            html.H2(title, className="mt-3"),
            html.P(intro, className="text-muted"),
            problems_alert(problems),
            *children,
        ],
        className="page",
    )


def problems_alert(problems: Sequence[str]) -> dbc.Alert | None:
    """What was wrong with the link, if anything, as a dismissable warning."""
    if not problems:
        return None
    return dbc.Alert(
        [
            html.Strong("Some of this link's settings were not used: "),
            html.Ul([html.Li(p) for p in problems], className="mb-0"),
        ],
        color="warning",
        dismissable=True,
        className="url-problems",
    )


def error_alert(message: str) -> dbc.Alert:
    return dbc.Alert(message, color="danger", className="data-error")


def empty_database() -> dbc.Alert:
    """What to run when there is nothing to show yet."""
    return dbc.Alert(
        [
            html.H4("No results yet", className="alert-heading"),
            html.P("Run the embedded set-up, which runs two light sweeps and loads them here:"),
            html.Pre(html.Code(QUICKSTART)),
            html.P("or run a first sweep yourself:"),
            html.Pre(html.Code(FIRST_SWEEP)),
            html.P("then reload this page.", className="mb-0"),
        ],
        color="info",
        className="empty-state",
    )


def badge(outcome: str | None) -> dbc.Badge:
    """A sweep's or run's outcome as a coloured badge."""
    text = outcome or "unknown"
    return dbc.Badge(text, color=statuses.colour(text), className="me-1")


def graph(element_id: str) -> dcc.Graph:
    """A graph slot, blank until its callback fills it."""
    return dcc.Graph(
        id=element_id,
        figure=plots.empty_figure("Loading…"),
        config={"displaylogo": False, "responsive": True},
    )


def location(prefix: str) -> dcc.Location:
    """The page's own address-bar writer: updating its ``search`` does not reload the page."""
    return dcc.Location(id=f"{prefix}-url", refresh=False)


def refresher(prefix: str) -> dcc.Interval:
    """Reloads the page's figures every few seconds; enabled only while a sweep is running."""
    return dcc.Interval(id=f"{prefix}-refresh", interval=REFRESH_MS, disabled=True)


def sweep_label(sweep: SweepInfo) -> str:
    sizes = ",".join(str(k) for k in sweep.world_sizes) or "?"
    return (
        f"{sweep.created_at:%Y-%m-%d %H:%M} · {sweep.task} · {sweep.trigger} · "
        f"workers {sizes} · {sweep.outcome or 'unknown'} · {sweep.id}"
    )


MEASURE_ALLREDUCE = (
    "To measure one on the sweep's links: "
    "scalebench run task0-allreduce --light --workers 2 --network <profiles>"
)


def no_allreduce_sweep(stored: int) -> str:
    """Why a projection has no all-reduce sweep to give it communication (``stored``: how
    many the database holds), and how to measure one."""
    missing = reasons.no_sweep("all-reduce", [], [], stored)
    return f"{missing} Its fits give the projection its communication. {MEASURE_ALLREDUCE}"


def allreduce_picker(element_id: str, offered: Sequence[SweepInfo], newest: str | None) -> dbc.Col:
    """A projection's all-reduce sweeps (several, their fits pooled), ``newest`` picked to
    begin with."""
    return sweep_picker(
        element_id,
        offered,
        [newest] if newest else [],
        "All-reduce sweeps whose fits give communication (pooled)",
        multi=True,
    )


def picked(value: str | list[str] | None) -> list[str]:
    """A sweep dropdown's value as a list of sweep ids (one, several or none)."""
    if not value:
        return []
    return [value] if isinstance(value, str) else [v for v in value if v]


def sweep_picker(
    element_id: str,
    sweeps: Sequence[SweepInfo],
    value: str | list[str] | None,
    label: str,
    multi: bool = False,
) -> dbc.Col:
    """A labelled, searchable sweep dropdown; ``multi``: several sweeps (``value`` a list)."""
    return dbc.Col(
        [
            dbc.Label(label, html_for=element_id),
            dcc.Dropdown(
                id=element_id,
                options=[{"label": sweep_label(s), "value": s.id} for s in sweeps],
                value=value,
                multi=multi,
                clearable=multi,
                placeholder="no sweep yet",
            ),
        ],
        md=6,
    )


ALL_NETWORKS = "all"


@dataclass(frozen=True)
class NetworkChoice:
    """What a network picker's value means for a sweep with several profiles or one."""

    shown: list[str]  # the profiles drawn: the one picked, or all
    picked: str | None  # the one for the address (None: all, or the sweep has one only)
    options: list[dict[str, str]]  # the picker's options
    several: bool  # the sweep has several profiles

    @property
    def style(self) -> dict[str, str] | None:
        """The picker's column: hidden while there is one profile."""
        return None if self.several else {"display": "none"}

    def values(self) -> dict[str, Any]:
        """The picker's options and its column's style, as the named outputs
        ``network_options`` and ``network_style`` of a page's callback."""
        return {"network_options": self.options, "network_style": self.style}


def choose_networks(networks: Sequence[str], value: str | None) -> NetworkChoice:
    """The profiles a picker's ``value`` shows for a sweep with ``networks``: one, or all
    (also for a profile the sweep does not have, e.g. after the sweep changed)."""
    several = len(networks) > 1
    options = [{"label": f"all ({len(networks)}), a curve each", "value": ALL_NETWORKS}]
    options += [{"label": name, "value": name} for name in networks]
    return NetworkChoice(
        shown=[value] if value in networks else list(networks),  # type: ignore[list-item]
        picked=value if value in networks and several else None,
        options=options,
        several=several,
    )


def network_picker(element_id: str, networks: Sequence[str], value: str | None) -> dbc.Col:
    """The network profiles of a sweep to show: each alone, or all of them, a curve each
    (``value`` None). Hidden while the sweep has one profile only."""
    choice = choose_networks(networks, value)
    return dbc.Col(
        [
            dbc.Label("Network profile", html_for=element_id),
            dcc.Dropdown(
                id=element_id,
                options=choice.options,
                value=value or ALL_NETWORKS,
                clearable=False,
                searchable=False,
            ),
        ],
        md=3,
        id=f"{element_id}-column",
        style=choice.style,
    )


def published_switch(element_id: str, value: str) -> dbc.Col:
    """A switch that overlays the benchmark text's published results (``value``: on or off)."""
    return dbc.Col(
        [
            dbc.Label("Published results", html_for=element_id),
            dcc.RadioItems(
                id=element_id,
                options=[{"label": "hide", "value": "off"}, {"label": "overlay", "value": "on"}],
                value=value,
                inline=True,
                inputClassName="me-1",
                labelClassName="me-3",
            ),
        ],
        md=3,
    )


def published_note(task: str, light: bool, points: Sequence[PublishedPoint]) -> html.P:
    """Why an overlay asked for shows nothing, or where its points come from."""
    if light:
        text = "Published results are for the full task; this sweep ran the light variant."
    elif not points:
        text = f"The benchmark text states no result for {task} in figures we can draw."
    else:
        text = f"Black markers: {SOURCE}, labelled with their hardware; hover for how each "
        text += "number was obtained."
    return html.P(text, className="small text-muted")


def published_for(sweep: SweepInfo, wanted: bool) -> tuple[tuple[PublishedPoint, ...], Any]:
    """The published results to overlay on ``sweep``'s figures (full sweeps only), and the
    note that says where they come from or why there are none."""
    if not wanted:
        return (), None
    points = () if sweep.light else published_points(sweep.task)
    return points, published_note(sweep.task, sweep.light, points)


# Every grid: the grid as tall as its rows, every row and every column drawn (none left out of
# the page for being off screen: the grids hold a page of runs or a short table, and the
# browser's find sees all of it), cells drawn as soon as their rows arrive (not in later
# animation frames, which a busy or hidden browser tab delays), field names taken literally (a
# column may be named "p (95 %)" or "v1.2"), one sorted column at a time, and a cell's full
# text on hover where it is cut (a column dragged narrower than its text).
GRID_OPTIONS: dict[str, Any] = {
    "domLayout": "autoHeight",
    "suppressColumnVirtualisation": True,
    "suppressRowVirtualisation": True,
    "suppressAnimationFrame": True,
    "suppressFieldDotNotation": True,
    "suppressMultiSort": True,
    "enableCellTextSelection": True,
    "tooltipShowMode": "whenTruncated",
    "tooltipShowDelay": 300,
    "animateRows": False,  # rows take their place at once as the columns are fitted
}
# Headers wrap rather than being cut, the header row as tall as the tallest.
COLUMN_DEFAULTS: dict[str, Any] = {
    "sortable": True,
    "resizable": True,
    "wrapHeaderText": True,
    "autoHeaderHeight": True,
}
# Columns are sized to their text in the browser, each as wide as its widest cell and its
# header: once the grid is ready (columnSize "autoSize"), and again when its rows change, its
# columns are set anew or its width changes; then fitted to the grid's width
# (assets/dashAgGridFunctions.js, fitColumns): too wide, a column of long text and a header of
# several words give way first, their text wrapping; too narrow, every column grows in
# proportion to its width.
FIT_COLUMNS = ["fitColumns(params)"]
FIT_ON = {
    event: FIT_COLUMNS
    for event in ("rowDataUpdated", "newColumnsLoaded", "gridSizeChanged", "columnResized")
}
# A column of long text (a failure's reason, a projection's basis) wraps where the grid is too
# narrow for every column's text on one line, down to WRAP_NARROWEST pixels, its rows as tall
# as their lines. A table's column wraps where a value is words longer than LONG_TEXT
# characters (an identifier is never broken).
WRAP_NARROWEST = 160
LONG_TEXT = 24


def column(
    field: str, header: str | None = None, link: bool = False, wrap: bool = False
) -> dict[str, Any]:
    """A grid column showing ``field``, as wide as its text and its header; with ``link``,
    its value is a Markdown link (``[text](href)``) followed in the same tab; with ``wrap``,
    long text that wraps where the grid is too narrow (down to :data:`WRAP_NARROWEST`). A
    cell's full text shows on hover where it is cut."""
    definition: dict[str, Any] = {"field": field, "headerName": header or field}
    if link:
        definition["cellRenderer"] = "markdown"
    else:
        definition["tooltipField"] = field
    if wrap:
        definition.update(wrapText=True, autoHeight=True, minWidth=WRAP_NARROWEST)
    return definition


def grid(
    element_id: str,
    columns: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    **options: Any,
) -> dag.AgGrid:
    """An AG Grid of ``rows`` under ``columns`` (see :func:`column`), as tall as its rows, its
    columns fitted to their text in the browser (:data:`FIT_ON`) and filling the page's
    width; ``options`` are further :class:`dash_ag_grid.AgGrid` properties."""
    grid_options = {**GRID_OPTIONS, **options.pop("dashGridOptions", {})}
    return dag.AgGrid(
        id=element_id,
        columnDefs=columns,
        rowData=rows,
        defaultColDef=COLUMN_DEFAULTS,
        columnSize="autoSize",
        dashGridOptions=grid_options,
        eventListeners=FIT_ON,
        style={"height": None, "width": "100%"},
        **options,
    )


def long_text(rows: Sequence[dict[str, Any]], name: str) -> bool:
    """Whether column ``name`` of ``rows`` holds words longer than :data:`LONG_TEXT`
    characters in all (text that may wrap between them)."""
    return any(
        len(text := str(row.get(name, ""))) > LONG_TEXT and " " in text.strip() for row in rows
    )


def table(element_id: str, rows: list[dict[str, Any]], links: Sequence[str] = ()) -> dag.AgGrid:
    """A plain, compact grid of ``rows`` (dicts with the same keys), sortable by any column
    in the browser; the columns named in ``links`` hold Markdown links, and a column of long
    text wraps (:func:`long_text`)."""
    names = list(rows[0]) if rows else []
    columns = [
        column(name, link=name in links, wrap=name not in links and long_text(rows, name))
        for name in names
    ]
    return grid(element_id, columns, rows)


def help_text(key: str) -> html.Details:
    """A collapsed definition, opened on demand."""
    return html.Details(
        [html.Summary("How is this computed?"), html.P(DEFINITIONS[key], className="small")],
        className="mb-3 definitions",
    )
