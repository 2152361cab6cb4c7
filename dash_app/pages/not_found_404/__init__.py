"""The page for addresses the dashboard does not know (Dash serves the package named
``not_found_404`` there). It shows no data, so it has no figures and no callback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import Dash, dcc, html

from dash_app.wiring import Page

PAGE = Page(
    __name__,
    "/404",
    "Page not found",
    "There is no such page in the dashboard.",
    name="Not found",
    tab="scalebench · not found",
)


def parse(_params: Mapping[str, Any]) -> tuple[None, list[str]]:
    """Its address's parameters say nothing: no state, no problems."""
    return None, []


def build(_state: None, problems: list[str]) -> html.Div:
    """A link back to the overview."""
    return PAGE(html.P(["Start from the ", dcc.Link("overview", href="/"), "."]), problems=problems)


def register(app: Dash) -> None:
    PAGE.register(parse, build)
