"""Overview: flagged regressions first, then the nightly status and the latest sweep of each task.

URL: ``/`` (no parameters). With an empty database it says what to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dash import Dash, dcc, html

from dash_app import components as ui
from dash_app import data
from dash_app.pages.overview import figures
from dash_app.state import Query
from dash_app.wiring import Outputs, Page, message, refresh, tick
from scalebench.statuses import RUNNING

PAGE = Page(
    __name__,
    "/",
    "Overview",
    "The latest results of every benchmark task and how last night went.",
    order=0,
    tab="scalebench",
)


# -- the page's URL state -----------------------------------------------------------


@dataclass(frozen=True)
class OverviewState:
    """The overview has no filters."""


def parse_overview(params: Mapping[str, Any]) -> tuple[OverviewState, list[str]]:
    return OverviewState(), Query(params).problems()


def build(_state: OverviewState, problems: list[str]) -> html.Div:
    """The page: its content is :func:`update`'s."""
    return PAGE(
        ui.refresher("overview"),
        dcc.Loading(html.Div(id="overview-content")),
        problems=problems,
    )


OUTPUTS = Outputs(content=message("overview-content"), refresh_off=refresh("overview"))


def update(_tick: int | None = None) -> dict[str, Any]:
    """The page's content, and whether it stops refreshing."""
    source = data.current()
    latest = source.latest_per_task()
    if not latest:
        return OUTPUTS.answer(content=ui.empty_database(), refresh_off=True)
    nightly = source.latest_per_task("scheduled")
    flags = source.regressions(sweep_ids=[s.id for s in nightly]) if nightly else []
    running = source.running()
    now: list[Any] = []
    if running:
        now = [html.H4("Running now", className="mt-4"), figures.running_table(running)]
    content = html.Div(
        [
            figures.regressions_alert(flags),
            *now,
            html.H4("Nightly", className="mt-4"),
            figures.nightly_table(nightly, flags),
            html.H4("Latest sweep of each task", className="mt-4"),
            figures.latest_table(latest),
        ]
    )
    live = bool(running) or any(s.outcome == RUNNING for s in [*latest, *nightly])
    return OUTPUTS.answer(content=content, refresh_off=not live)


def register(app: Dash) -> None:
    PAGE.register(parse_overview, build)
    OUTPUTS.wire(app, update, tick("overview"))
