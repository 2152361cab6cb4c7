"""What the Compare page draws: pure functions from query results to its verdict and
figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import html

from dash_app import reasons, tables
from dash_app.plots import CATEGORY_WORKERS, SECONDS_AXIS, base_figure, empty_figure, spread_of
from results_db.analytics import ScalingRow
from results_db.queries.nightly import RegressionRow
from results_db.queries.runs import RunInfo
from results_db.queries.sweeps import SweepInfo
from scalebench import units


def hardware_warning(a_runs: Sequence[RunInfo], b_runs: Sequence[RunInfo]) -> str | None:
    """Why A and B are not comparable machines, in words (None: same or not recorded)."""
    a_hardware = sorted({r.hardware for r in a_runs if r.hardware})
    b_hardware = sorted({r.hardware for r in b_runs if r.hardware})
    if not a_hardware or not b_hardware or a_hardware == b_hardware:
        return None
    return (
        f"A and B ran on different hardware (A: {'; '.join(a_hardware)}; B: "
        f"{'; '.join(b_hardware)}): their differences are not only the code's."
    )


def verdict(
    a: SweepInfo,
    b: SweepInfo,
    flags: list[RegressionRow],
    deltas: list[tables.Delta],
    hardware: str | None = None,
) -> html.Div:
    """The detector's stored flags for A, then warnings about what is being compared
    (``hardware``: :func:`hardware_warning`)."""
    parts: list[Any] = []
    if flags:
        parts.append(
            dbc.Alert(
                [
                    html.Strong("REGRESSION flagged by the nightly detector for A: "),
                    html.Ul(
                        [
                            html.Li(
                                f"{units.workers(f.world_size)}, {units.measure(f.metric)}: "
                                + (
                                    f"{units.signed_percent(f.change)} worse (p = {f.p_value:.3g})"
                                    if f.change is not None and f.p_value is not None
                                    else f.reason
                                )
                            )
                            for f in flags
                        ]
                    ),
                ],
                color="danger",
                className="regression-verdict",
            )
        )
    elif a.trigger == "scheduled":
        parts.append(
            dbc.Alert(
                "The nightly detector flagged nothing for A.",
                color="success",
                className="regression-verdict",
            )
        )
    else:
        parts.append(
            dbc.Alert(
                "A is not a nightly (scheduled) sweep, so the detector did not "
                "judge it; the table applies its rule to A against B.",
                color="secondary",
                className="regression-verdict",
            )
        )
    if any(d.verdict == "REGRESSION" for d in deltas):
        parts.append(
            dbc.Alert("A is significantly slower than B at some worker count.", color="warning")
        )
    if a.id == b.id:
        parts.append(dbc.Alert("A and B are the same sweep.", color="secondary"))
    elif a.config_hash != b.config_hash or a.task != b.task:
        parts.append(
            dbc.Alert(
                "A and B differ in task or configuration (backend, precision, "
                "variant, light): their differences are not only the code's.",
                color="warning",
            )
        )
    if hardware:
        parts.append(dbc.Alert(hardware, color="warning", className="hardware-differs"))
    if any(d.contended for d in deltas):
        parts.append(
            dbc.Alert(
                "Contended runs (other processes took their cores while they ran) are left "
                "out of the throughputs and the test.",
                color="secondary",
            )
        )
    return html.Div(parts)


def neither_has_time(
    a_rows: Sequence[ScalingRow],
    b_rows: Sequence[ScalingRow],
    a_runs: Sequence[RunInfo] = (),
    b_runs: Sequence[RunInfo] = (),
) -> str:
    """Why neither sweep has a time to accuracy to draw: what became of each one's runs."""
    parts = []
    for side, rows, runs in (("A", a_rows, a_runs), ("B", b_rows, b_runs)):
        if runs:
            parts.append(f"{side}: {reasons.no_time_to_accuracy(runs)}")
        else:
            total = sum(r.runs for r in rows)
            parts.append(
                f"{side}: " + (f"none of its {total} runs reached the goal" if total else "no runs")
            )
    return "No time to accuracy in either sweep. " + "; ".join(parts) + "."


def compare_figure(
    a_rows: Sequence[ScalingRow],
    b_rows: Sequence[ScalingRow],
    a_name: str,
    b_name: str,
    a_runs: Sequence[RunInfo] = (),
    b_runs: Sequence[RunInfo] = (),
) -> go.Figure:
    """Time to accuracy (s) of two sweeps side by side, per worker count; when neither has
    one, why (from each sweep's ``runs`` drawn, or its ``rows``)."""
    title = "Time to accuracy, side by side"
    if not any(r.time_to_accuracy_s for r in [*a_rows, *b_rows]):
        return empty_figure(neither_has_time(a_rows, b_rows, a_runs, b_runs), title)
    traces = []
    for rows, name in ((b_rows, f"B: {b_name}"), (a_rows, f"A: {a_name}")):
        done = [r for r in rows if r.time_to_accuracy_s is not None]
        traces.append(
            go.Bar(
                x=[str(r.world_size) for r in done],
                y=[r.time_to_accuracy_s for r in done],
                name=name,
                error_y=spread_of(done),
                hovertemplate="%{x} worker(s): %{y:.4g} s<extra>" + name[:40] + "</extra>",
            )
        )
    yaxis = {**SECONDS_AXIS, "title": {"text": "time to accuracy (s)"}}
    return base_figure(title, traces, CATEGORY_WORKERS, yaxis, barmode="group")
