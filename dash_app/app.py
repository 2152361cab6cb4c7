"""The Dash application: a navbar shell around Dash's multi-page container.

    from dash_app.app import create_app
    app = create_app("sqlite:///var/scalebench.db")
    app.run(host="127.0.0.1", port=8050)          # or serve app.server with any WSGI server

Pages (``dash_app/pages``) register themselves and their callbacks on the app
created here, so several apps (tests, different databases) can live in one
process. The app only reads: see :mod:`dash_app.data`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import dash
import dash_bootstrap_components as dbc
from dash import Dash, html

from dash_app import downloads
from dash_app.data import Source
from dash_app.pages import PAGES
from scalebench import config

NAV = (
    ("Overview", "/"),
    ("Scaling", "/scaling"),
    ("Communication", "/communication"),
    ("Cost", "/cost"),
    ("Runs", "/runs"),
    ("Compare", "/compare"),
    ("Nightly trend", "/trend"),
)


def default_stylesheets() -> list[str]:
    """Bootstrap from its CDN, unless ``SCALEBENCH_DASHBOARD_CSS`` lists others.

    Set ``SCALEBENCH_DASHBOARD_CSS`` to comma-separated URLs (e.g. a copy served
    on an offline network), or to an empty string for none.
    """
    chosen = os.environ.get("SCALEBENCH_DASHBOARD_CSS")
    if chosen is None:
        return [dbc.themes.BOOTSTRAP]
    return [url.strip() for url in chosen.split(",") if url.strip()]


def navbar() -> dbc.Navbar:
    links = [
        dbc.NavItem(
            dbc.NavLink(name, href=path, active="exact", id=f"nav-{path.strip('/') or 'home'}")
        )
        for name, path in NAV
    ]
    return dbc.Navbar(
        dbc.Container(
            [dbc.NavbarBrand("scalebench", href="/"), dbc.Nav(links, navbar=True)], fluid=True
        ),
        color="dark",
        dark=True,
        className="mb-2",
    )


def create_app(database_url: str | None = None, stylesheets: Sequence[str] | None = None) -> Dash:
    """The dashboard on ``database_url`` (default: ``SCALEBENCH_DATABASE_URL``), read-only.

    The WSGI application is ``create_app(...).server``.
    """
    source = Source(database_url or config.database_url())
    app = Dash(
        __name__,
        use_pages=True,
        pages_folder="",
        title="scalebench",
        external_stylesheets=list(default_stylesheets() if stylesheets is None else stylesheets),
        suppress_callback_exceptions=True,
        update_title=None,
    )
    app.server.extensions["scalebench"] = source
    for module in PAGES:
        module.register(app)
    app.layout = html.Div(
        [navbar(), dbc.Container(dash.page_container, fluid=True, className="pb-5")]
    )
    downloads.register(app.server)
    return app
