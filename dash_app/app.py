"""The Dash application: a navbar shell around Dash's multi-page container.

    from dash_app.app import create_app
    app = create_app("sqlite:///var/scalebench.db")
    app.run(host="127.0.0.1", port=8050)          # or serve app.server with any WSGI server

Pages (``dash_app/pages``) register themselves and their callbacks on the app
created here, so several apps (tests, different databases) can live in one
process. The app only reads, but for the Nightly page's triage of a finding: see
:mod:`dash_app.data`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from html import escape as html_escape
from traceback import walk_tb
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Dash, html

from dash_app import downloads
from dash_app.data import BadInput, Source
from dash_app.pages import PAGES
from scalebench import config

LOG = logging.getLogger("scalebench.dashboard")

NAV = (
    ("Overview", "/"),
    ("Scaling", "/scaling"),
    ("Communication", "/communication"),
    ("Cost", "/cost"),
    ("Runs", "/runs"),
    ("Compare", "/compare"),
    ("Nightly trend", "/trend"),
    ("Nightly", "/nightly"),
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
    # Plotly imports numpy the first time a figure is given values. When two callbacks of
    # the threaded server do that at once, Python can hand one of them numpy half-imported
    # (rather than deadlock on two import locks), and its page fails. Imported here, numpy
    # is whole before the first request.
    import numpy  # noqa: F401

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
    app.server.before_request(functools.partial(unavailable_page, source))
    app.server.add_url_rule("/healthz", "healthz", functools.partial(health, source))
    app.server.register_error_handler(Exception, refused_request)
    return app


def refused_request(exc: Exception) -> Any:
    """Requests Dash's machinery cannot serve, answered without a traceback in the log: a
    component file that is not there (404); a callback request that is not one (a body
    Dash cannot read), or a callback given inputs of a kind its page never sends (a dict
    where an id belongs: :class:`~dash_app.data.BadInput`), both 400 with one log line
    naming the inputs and their types. Anything else is an error of the dashboard's own,
    and raised as one."""
    from dash.exceptions import DependencyException
    from flask import request
    from werkzeug.exceptions import HTTPException

    if isinstance(exc, HTTPException):
        return exc
    if isinstance(exc, DependencyException):
        LOG.warning("no such component file: %s", request.path[:200])
        return "no such file\n", 404, {"Content-Type": "text/plain; charset=utf-8"}
    if not request.path.startswith("/_dash-update-component"):
        raise exc
    body = _readable_body(request)
    in_pages = any(
        "/dash_app/" in frame.f_code.co_filename for frame, _ in walk_tb(exc.__traceback__)
    )
    if in_pages and not isinstance(exc, BadInput):
        raise exc  # the dashboard's own error, on inputs its pages send
    LOG.warning(
        "callback request refused (%s: %s); inputs: %s",
        type(exc).__name__,
        str(exc).splitlines()[0][:200] if str(exc) else "",
        described_inputs(body),
    )
    return {"error": "not a callback request this dashboard answers"}, 400


def _readable_body(request: Any) -> Any:
    """The request's JSON body, or ``None`` where it cannot be read. ``silent=True`` only
    absorbs what the decoder calls malformed (``ValueError``): a body nested deeper than
    Python's recursion limit raises ``RecursionError`` (and a huge one ``MemoryError``),
    which here would turn one refused request into a 500 and a second traceback."""
    try:
        return request.get_json(silent=True)
    except (RecursionError, MemoryError):
        return None


def described_inputs(body: Any) -> str:
    """A callback request's inputs as ``id.property=<type>``, for one log line."""
    described = [f"{name}={type(value).__name__}" for name, value in _input_items(body)]
    return ", ".join(described) or "none readable"


def _input_items(body: Any) -> list[tuple[str, Any]]:
    inputs = body.get("inputs") if isinstance(body, dict) else None
    if not isinstance(inputs, list):
        return []
    return [
        (f"{str(item.get('id'))[:60]}.{str(item.get('property'))[:30]}", item.get("value"))
        for item in inputs[:12]
        if isinstance(item, dict)
    ]


def health(source: Source) -> tuple[dict[str, str], int]:
    """For container health checks: 200 while the dashboard serves, whatever its database
    (a database that is down is the pages' to explain, not a reason to restart this)."""
    return {"service": "scalebench dashboard", "database": source.health() or "ok"}, 200


# Requests that are not a page: Dash's own machinery, assets and downloads (which answer
# for themselves).
NOT_PAGES = ("/_dash-", "/assets/", "/_favicon", "/_reload-hash", "/download", "/healthz")


def unavailable_page(source: Source) -> tuple[str, int, dict[str, str]] | None:
    """Before a page is served: when its database cannot be read (bad URL, server down,
    no schema), a plain page that says why and what to do, with HTTP 503 (the dashboard
    itself is fine; what it shows is not there). ``None`` lets the request through."""
    from flask import request

    if request.path.startswith(NOT_PAGES):
        return None
    problem = source.health()
    if problem is None:
        return None
    body = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<title>scalebench: results database unavailable</title></head><body "
        "style='font-family: sans-serif; max-width: 48em; margin: 3em auto'>"
        "<h1>The results database cannot be read</h1>"
        f"<p>{html_escape(problem)}</p>"
        "<p>This page tries again when you reload it.</p></body></html>"
    )
    return body, 503, {"Retry-After": "30", "Content-Type": "text/html; charset=utf-8"}
