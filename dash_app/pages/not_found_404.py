"""The page for addresses the dashboard does not know."""

from __future__ import annotations

from typing import Any

import dash
from dash import Dash, dcc, html

from dash_app import components as ui


def layout(**_params: Any) -> html.Div:
    return ui.page(
        "Page not found",
        "There is no such page in the dashboard.",
        html.P(["Start from the ", dcc.Link("overview", href="/"), "."]),
    )


def register(app: Dash) -> None:
    dash.register_page(
        __name__, path="/404", name="Not found", title="scalebench · not found", layout=layout
    )
