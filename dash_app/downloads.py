"""Plain HTTP downloads of one run, linked from its page.

    /download/run/<run id>/evaluations.csv   one row per evaluation (seconds, metric, loss)
    /download/run/<run id>/steps.csv         one row per rank and step (phase seconds), streamed
    /download/run/<run id>/official.txt      the run in the words of the published results

Unknown or malformed run ids answer 404 with a one-line text.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

import flask

from dash_app.data import DataUnavailable, Source
from dash_app.state import IDENTIFIER
from results_db.queries import export as export_queries
from results_db.service import official_result

PREFIX = "/download/run"
FILES = ("evaluations.csv", "steps.csv", "official.txt")


def url(run_id: str, name: str) -> str:
    """The download address of file ``name`` (one of :data:`FILES`) of a run."""
    return f"{PREFIX}/{quote(run_id, safe='')}/{name}"


def _csv_lines(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for count, row in enumerate(rows, start=1):
        writer.writerow(row)
        if count % 2000 == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _text(message: str, status: int) -> flask.Response:
    return flask.Response(message + "\n", status=status, mimetype="text/plain")


def register(server: flask.Flask) -> None:
    """Add the download routes to the dashboard's Flask server."""

    @server.route(f"{PREFIX}/<run_id>/<name>")
    def download(run_id: str, name: str) -> flask.Response:
        source: Source = server.extensions["scalebench"]
        if name not in FILES or not IDENTIFIER.fullmatch(run_id):
            return _text("no such download", 404)
        try:
            run = source.run(run_id)
        except DataUnavailable as exc:
            return _text(str(exc), 503)
        if run is None:
            return _text(f"no run {run_id!r} in the database", 404)
        attachment = {"Content-Disposition": f'attachment; filename="{run_id}-{name}"'}
        if name == "official.txt":
            return flask.Response(
                official_result(run) + "\n", mimetype="text/plain", headers=attachment
            )
        if name == "evaluations.csv":
            rows = source.call(export_queries.run_epochs, run_id)
            body = "".join(_csv_lines(export_queries.EPOCH_EXPORT_COLUMNS, rows))
            return flask.Response(body, mimetype="text/csv", headers=attachment)

        def steps() -> Iterator[str]:
            with source.connect() as conn:
                yield from _csv_lines(
                    export_queries.STEP_EXPORT_COLUMNS, export_queries.iter_run_steps(conn, run_id)
                )

        return flask.Response(steps(), mimetype="text/csv", headers=attachment)
