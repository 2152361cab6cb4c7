"""What the Compare page draws: pure functions from query results to its verdict and
figure, and from a sweep's :class:`~results_db.service.stacks.StackReport` to its stacks'
forest plot and tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import dcc, html

from dash_app import components as ui
from dash_app import reasons, tables
from dash_app.pages.nightly.figures import metric_words, where
from dash_app.plots import (
    CATEGORY_WORKERS,
    HEIGHT,
    SECONDS_AXIS,
    base_figure,
    empty_figure,
    moment_line,
    spread_of,
)
from results_db.analytics import ScalingRow
from results_db.queries.nightly import RegressionRow
from results_db.queries.runs import RunInfo
from results_db.queries.stacks import ARM_METRICS
from results_db.queries.sweeps import SweepInfo
from results_db.regressions.paired import RatioInterval, StackComparison
from results_db.service.stacks import StackReport
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


# -- a sweep's stacks, each against its first ---------------------------------------------

SLOWER, FASTER, NO_DIFFERENCE, ONE_PAIR = "slower", "faster", "no difference", "one pair"
# Each kind of interval: its colour and its legend's words.
INTERVAL_KINDS = {
    SLOWER: ("#d62728", "slower: interval wholly above 1"),
    FASTER: ("#2ca02c", "faster: interval wholly below 1"),
    NO_DIFFERENCE: ("#1f77b4", "no difference shown: interval holds 1"),
    ONE_PAIR: ("#7f7f7f", "one pair: no interval"),
}
ROW_HEIGHT = 24  # px per ratio drawn
# What each stack ran (StackReport.identities), in words, in this order; other keys follow.
IDENTITY_WORDS = {
    "executable": "interpreter",
    "python": "Python",
    "torch": "torch",
    "cuda": "CUDA",
    "nccl": "NCCL",
    "numpy": "numpy",
    "image_digest": "image",
}
# The identities table's first and last columns (with spaces: no stack is named so).
WHAT_RAN, SAME = "what ran", "same in every stack"


def interval_kind(interval: RatioInterval) -> str:
    """Whether the interval says slower (wholly above 1), faster (wholly below), neither,
    or nothing (one pair: unbounded)."""
    if interval.pairs < 2:
        return ONE_PAIR
    if interval.low > 1:
        return SLOWER
    if interval.high < 1:
        return FASTER
    return NO_DIFFERENCE


def interval_words(interval: RatioInterval) -> str:
    """The verdict in words: ``slower by 3.1–7.5 %``, ``one pair: no interval``."""
    kind = interval_kind(interval)
    if kind == ONE_PAIR:
        return "one pair: no interval"
    if kind == SLOWER:
        return f"slower by {100 * (interval.low - 1):.1f}–{100 * (interval.high - 1):.1f} %"
    if kind == FASTER:
        return f"faster by {100 * (1 - interval.high):.1f}–{100 * (1 - interval.low):.1f} %"
    return "no difference shown"


def pairs_words(pairs: int) -> str:
    return f"{pairs} pair" if pairs == 1 else f"{pairs} pairs"


def metrics_compared(report: StackReport) -> list[str]:
    """The metrics some comparison has, in :data:`ARM_METRICS`' order (others after)."""
    found = {m for c in report.comparisons for m in c.metrics}
    return [m for m in ARM_METRICS if m in found] + sorted(found - set(ARM_METRICS))


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def stack_ratio_rows(report: StackReport) -> list[dict[str, Any]]:
    """One row per worker count, link, stack and metric: the ratio to the first stack, its
    95 % interval (none for one pair), the pairs and the verdict. A metric some comparison
    has and this one lacks (not measured by both stacks in any round) is a row without
    numbers that says so."""
    rows = []
    for comparison in report.comparisons:
        for metric in metrics_compared(report):
            interval = comparison.metrics.get(metric)
            row: dict[str, Any] = {
                "workers": comparison.world_size,
                "link": comparison.network,
                "stack": comparison.stack,
                "against": comparison.against,
                "metric": metric_words(metric),
            }
            if interval is None:
                row.update(ratio=None, low=None, high=None, pairs=0)
                row["verdict"] = "not measured by both stacks in any round"
            else:
                bounded = interval_kind(interval) != ONE_PAIR
                row.update(
                    ratio=_finite(interval.ratio),
                    low=_finite(interval.low) if bounded else None,
                    high=_finite(interval.high) if bounded else None,
                    pairs=interval.pairs,
                    verdict=interval_words(interval),
                )
            rows.append(row)
    return rows


def _identity_value(value: object) -> str:
    if value is None or value == "":
        return "—"
    return str(value)


def stack_identity_rows(report: StackReport) -> list[dict[str, str]]:
    """What each stack ran, side by side: a row per recorded item (interpreter, versions,
    image) and per variable a stack set, a column per stack, and whether they agree."""
    identities = {name: report.identities.get(name) or {} for name in report.stacks}
    keys = [k for k in IDENTITY_WORDS if any(k in i for i in identities.values())]
    others = {k for i in identities.values() for k in i if k not in IDENTITY_WORDS}
    keys += sorted(others - {"env"})
    rows = []
    for key in keys:
        row = {WHAT_RAN: IDENTITY_WORDS.get(key, key)}
        for name, identity in identities.items():
            if not identity and key == "executable":
                row[name] = "no run measured"
            else:
                row[name] = _identity_value(identity.get(key))
        rows.append(row)
    variables = sorted({v for i in identities.values() for v in dict(i.get("env") or {})})
    for variable in variables:
        row = {WHAT_RAN: f"variable {variable}"}
        for name, identity in identities.items():
            env = dict(identity.get("env") or {})
            row[name] = _identity_value(env[variable]) if variable in env else "not set"
        rows.append(row)
    for row in rows:
        row[SAME] = "yes" if len({row[name] for name in report.stacks}) == 1 else "no"
    return rows


def _bar(length: float) -> float:
    return length if math.isfinite(length) else 0.0


def _log_range(values: Sequence[float], room_right: float) -> list[float]:
    """A log axis's range (in powers of ten) over ``values`` (those finite and above 0),
    with a little
    room each side and ``room_right`` (a share of the span) for labels right of a point."""
    drawn = [v for v in values if math.isfinite(v) and v > 0]
    low, high = math.log10(min(drawn)), math.log10(max(drawn))
    span = max(high - low, 0.02)
    return [low - 0.08 * span, high + (0.08 + room_right) * span]


@dataclass(frozen=True)
class Drawn:
    """One ratio of the forest plot: its row's label, where and what, and its interval."""

    label: str
    comparison: StackComparison
    metric: str
    interval: RatioInterval

    @property
    def kind(self) -> str:
        return interval_kind(self.interval)

    def hover(self) -> str:
        """``tonight / base, 1 worker, steady step: ×1.200 [1.100, 1.300], 5 pairs: …``."""
        c, i = self.comparison, self.interval
        span = "" if self.kind == ONE_PAIR else f" [{i.low:.3f}, {i.high:.3f}]"
        return (
            f"{c.stack} / {c.against}, {where(c.network, c.world_size)}, "
            f"{metric_words(self.metric)}: ×{i.ratio:.3f}{span}, {pairs_words(i.pairs)}: "
            f"{interval_words(i)}"
        )


def drawn_ratios(report: StackReport) -> tuple[list[Drawn], int]:
    """The ratios the forest plot draws, in the table's order, and how many of the metrics
    compared elsewhere each comparison lacks (not measured by both stacks in any round)."""
    drawn, missing = [], 0
    for c in report.comparisons:
        for metric in metrics_compared(report):
            interval = c.metrics.get(metric)
            if interval is None or not (math.isfinite(interval.ratio) and interval.ratio > 0):
                missing += 1
                continue
            label = (
                f"{where(c.network, c.world_size)} · {c.stack} / {c.against} · "
                f"{metric_words(metric)} · {pairs_words(interval.pairs)}"
            )
            drawn.append(Drawn(label, c, metric, interval))
    return drawn, missing


def _ratio_trace(kind: str, drawn: Sequence[Drawn]) -> go.Scatter:
    """The ratios of one kind (:func:`interval_kind`): points with their intervals as
    error bars, or, of one pair, open markers that say so."""
    colour, words = INTERVAL_KINDS[kind]
    one_pair = kind == ONE_PAIR
    trace: dict[str, Any] = {
        "x": [d.interval.ratio for d in drawn],
        "y": [d.label for d in drawn],
        "name": words,
        "mode": "markers+text" if one_pair else "markers",
        "marker": {"color": colour, "size": 9, "symbol": "circle-open" if one_pair else "circle"},
        "customdata": [d.hover() for d in drawn],
        "hovertemplate": "%{customdata}<extra></extra>",
    }
    if one_pair:
        trace.update(text=["one pair: no interval"] * len(drawn), textposition="middle right")
        trace["textfont"] = {"size": 11, "color": colour}
    else:
        trace["error_x"] = {
            "type": "data",
            "symmetric": False,
            # an end past what a float holds (a log-ratio above ~709) is left undrawn
            "array": [_bar(d.interval.high - d.interval.ratio) for d in drawn],
            "arrayminus": [_bar(d.interval.ratio - d.interval.low) for d in drawn],
            "color": colour,
            "thickness": 1.5,
            "width": 4,
        }
    return go.Scatter(**trace)


def stacks_figure(report: StackReport) -> go.Figure:
    """Each stack against the sweep's first, per worker count and link, as a forest plot:
    each metric's ratio (log axis) as a point with its 95 % interval as an error bar,
    coloured by what the interval says (:func:`interval_kind`), the line at 1, and the
    pairs in each row's label. A ratio of one pair has no interval: an open marker, no bar.
    A metric not measured by both stacks is left out, and the subtitle says how many."""
    first = report.stacks[0] if report.stacks else "the first stack"
    title = f"Each stack against {first}: ratio with its 95 % interval"
    if not report.comparisons:
        return empty_figure(
            f"No round in which {first} and another stack both succeeded: nothing to compare.",
            title,
        )
    drawn, missing = drawn_ratios(report)
    if not drawn:
        return empty_figure("No metric was measured by both stacks in any round.", title)
    traces = []
    for kind in INTERVAL_KINDS:
        of_kind = [d for d in drawn if d.kind == kind]
        if of_kind:
            traces.append(_ratio_trace(kind, of_kind))
    bounded = [d.interval for d in drawn if d.kind != ONE_PAIR]
    extent = [1.0, *(d.interval.ratio for d in drawn)]
    extent += [i.low for i in bounded] + [i.high for i in bounded]
    room = 0.45 if any(d.kind == ONE_PAIR for d in drawn) else 0.0
    xaxis = {
        "type": "log",
        "range": _log_range(extent, room),
        "title": {"text": f"ratio to {first} (log scale; above 1: slower)"},
    }
    yaxis = {
        "type": "category",
        "categoryorder": "array",
        "categoryarray": [d.label for d in drawn],
        "autorange": "reversed",
    }
    subtitle = "bars: 95 % intervals over the pairs (rounds both stacks ran)"
    if missing:
        subtitle += f"; {missing} not measured by both stacks (see the table)"
    return base_figure(
        f"{title}<br><sup>{subtitle}</sup>",
        traces,
        xaxis,
        yaxis,
        marks=[moment_line(1.0, f"1: as fast as {first}", "#777", None)],
        height=max(HEIGHT, 150 + ROW_HEIGHT * len(drawn)),
    )


def stacks_section(report: StackReport) -> html.Div | None:
    """Sweep A's stacks side by side: the forest plot, the ratios' table and what each
    stack ran; for a sweep of one stack a short note; of none, nothing."""
    if not report.stacks:
        return None
    if len(report.stacks) < 2:
        return html.Div(
            html.P(
                f"A ran one stack ({report.stacks[0]}): comparing stacks needs a sweep of two "
                "or more (scalebench run TASK --stack A=PYTHON --stack B=PYTHON --pairs 5).",
                className="text-muted small",
            ),
            className="stacks-note",
        )
    ratios = stack_ratio_rows(report)
    return html.Div(
        [
            html.H5(f"A's stacks side by side: each against {report.stacks[0]}"),
            html.P(
                "Each round ran every stack once on the same machines; a ratio is the "
                "geometric mean over the rounds both stacks ran (a pair each) of the stack's "
                f"seconds over {report.stacks[0]}'s, above 1 slower, with its 95 % interval. "
                "One pair gives no interval.",
                className="small",
            ),
            dcc.Graph(
                id="compare-stacks-figure",
                figure=stacks_figure(report),
                config={"displaylogo": False, "responsive": True},
            ),
            ui.table("compare-stacks-ratios", ratios)
            if ratios
            else html.P("No ratio to show.", className="text-muted"),
            html.H6("What each stack ran", className="mt-3"),
            ui.table("compare-stacks-identities", stack_identity_rows(report)),
        ],
        className="stacks-section mt-4",
    )
