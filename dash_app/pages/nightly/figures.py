"""What the Nightly page draws: pure functions from the paired nightly's history
(:class:`~results_db.service.nightly.SeriesHistory`) and findings
(:class:`~results_db.queries.paired_nights.FindingRow`) to a figure and table rows.

A series is one task × link × worker count × metric; each night it has a ratio tonight /
reference (no unit: 1.05 is tonight 5 % slower) with its 95 % interval, and the reference
arm's own seconds. A change point is the first night of a new level of either.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dash_app import tables
from dash_app.plots import SECONDS_AXIS, THEME, empty_figure
from results_db.queries.paired_nights import FindingRow
from results_db.regressions.paired_findings import PAIRED_METRICS
from results_db.regressions.shifts import PAIRED_RULE
from results_db.regressions.triage import FALSE_ALARM, false_alarm_rate
from results_db.service.nightly import NightPoint, SeriesHistory
from scalebench import units

# Each paired metric in words (all in seconds, lower is better), the steady step first.
METRIC_WORDS = {
    "steady_step_s": "steady step",
    "compute_s": "compute",
    "communication_s": "communication",
    "data_s": "data loading",
    "eval_s": "evaluation",
    "time_to_accuracy_s": "time to accuracy",
}
assert tuple(METRIC_WORDS) == PAIRED_METRICS, "a paired metric without words"
ARM_WORDS = {"ratio": "tonight / reference", "reference": "reference arm"}
PANEL_HEIGHT = 420  # px per series: its ratio above its reference arm
RATIO_COLOUR, FLAGGED_COLOUR = "#1f77b4", "#d62728"
REFERENCE_COLOUR = "#555555"
CHANGE_COLOUR, FINDING_COLOUR = "#ff7f0e", "#9467bd"
BAND = "rgba(31,119,180,0.18)"

SeriesId = tuple[str, str, int, str]  # task, network, workers, metric


def series_id(key: Any) -> SeriesId:
    """A series' identity from its key (a ``SeriesKey``) or a finding's series (a dict)."""
    if isinstance(key, Mapping):
        return (key["task"], key["network"], int(key["world_size"]), key["metric"])
    return (key.task, key.network, int(key.world_size), key.metric)


def where(network: str, world_size: int) -> str:
    """``2 workers``, ``2 workers on 1gbit-1ms`` (the host's own link goes unnamed)."""
    link = "" if network == "host" else f" on {network}"
    return units.workers(world_size) + link


def metric_words(metric: str) -> str:
    return METRIC_WORDS.get(metric, metric)


# -- false alarms ------------------------------------------------------------------------


@dataclass(frozen=True)
class FalseAlarms:
    """A series' false alarms: the findings with it that people marked false alarms
    (``count``), the nights it was judged on (``judged``: its nights with enough before
    them, :data:`~results_db.regressions.shifts.PAIRED_RULE`) and their ratio (None before
    any was judged)."""

    count: int
    judged: int
    rate: float | None

    def describe(self) -> str:
        """``1 of 12 judged nights (8.3 %)``; ``none judged yet``."""
        if self.rate is None:
            return "no night judged yet"
        return f"{self.count} of {self.judged} judged nights ({units.percent(self.rate)})"


def false_alarms(
    histories: Sequence[SeriesHistory], findings: Sequence[FindingRow]
) -> dict[SeriesId, FalseAlarms]:
    """Each series' false-alarm rate: the findings in state ``false-alarm`` that name the
    series (either arm), over the nights of its history that had
    :attr:`~results_db.regressions.shifts.PairedRule.min_baseline_nights` nights before them.
    The findings people marked count, and those of A/A nights (tonight's stack the reference
    itself), which the nightly stores as false alarms when it finds them."""
    marked: dict[SeriesId, int] = {}
    for finding in findings:
        if finding.state != FALSE_ALARM:
            continue
        for named in {series_id(s) for s in finding.series}:
            marked[named] = marked.get(named, 0) + 1
    rates = {}
    for history in histories:
        named = series_id(history.key)
        judged = max(0, len(history.points) - PAIRED_RULE.min_baseline_nights)
        count = marked.get(named, 0)
        rates[named] = FalseAlarms(count, judged, false_alarm_rate(count, judged))
    return rates


# -- the figure ------------------------------------------------------------------------------


def panels(histories: Sequence[SeriesHistory], metric: str) -> list[SeriesHistory]:
    """The series of ``metric`` that have a night, by worker count and link."""
    shown = [h for h in histories if h.key.metric == metric and h.points]
    return sorted(shown, key=lambda h: (h.key.world_size, h.key.network))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def segment_levels(values: Sequence[float], starts: Sequence[int]) -> list[tuple[int, int, float]]:
    """Each level of ``values`` between its change points (``starts``: the index where each
    level after the first begins), as ``(first, last, geometric mean)``."""
    bounds = [0, *sorted(i for i in starts if 0 < i < len(values)), len(values)]
    levels = []
    for first, end in itertools.pairwise(bounds):
        chunk = [v for v in values[first:end] if v > 0 and math.isfinite(v)]
        if chunk:
            levels.append((first, end - 1, math.exp(sum(map(math.log, chunk)) / len(chunk))))
    return levels


def _level_trace(
    nights: Sequence[datetime],
    values: Sequence[float],
    starts: Sequence[int],
    colour: str,
    first: bool,
) -> go.Scatter:
    x: list[Any] = []
    y: list[Any] = []
    for begin, end, level in segment_levels(values, starts):
        x += [nights[begin], nights[end], None]
        y += [level, level, None]
    return go.Scatter(
        x=x,
        y=y,
        mode="lines",
        line={"color": colour, "width": 2, "dash": "dash"},
        name="level between change points",
        legendgroup="level",
        showlegend=first,
        hovertemplate="level %{y:.4g}<extra></extra>",
    )


def _change_trace(
    nights: Sequence[datetime], values: Sequence[float], starts: Sequence[int], first: bool
) -> go.Scatter:
    shown = [i for i in starts if 0 <= i < len(values)]
    return go.Scatter(
        x=[nights[i] for i in shown],
        y=[values[i] for i in shown],
        mode="markers",
        marker={"symbol": "triangle-up", "size": 13, "color": CHANGE_COLOUR},
        name="change point (a new level from this night)",
        legendgroup="change",
        showlegend=first,
        hovertemplate="a new level from this night: %{y:.4g}<extra></extra>",
    )


def _vertical(axis: int, x: datetime, colour: str, dash: str) -> dict[str, Any]:
    """A line across one subplot (``axis``: its axes' number) at night ``x``."""
    suffix = "" if axis == 1 else str(axis)
    return {
        "type": "line",
        "xref": f"x{suffix}",
        "yref": f"y{suffix} domain",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": colour, "width": 1.5, "dash": dash},
    }


def _one(axis: int) -> dict[str, Any]:
    """The dotted line at ratio 1 (tonight as fast as the reference) across one subplot."""
    suffix = "" if axis == 1 else str(axis)
    return {
        "type": "line",
        "xref": f"x{suffix} domain",
        "yref": f"y{suffix}",
        "x0": 0,
        "x1": 1,
        "y0": 1,
        "y1": 1,
        "line": {"color": "#777", "width": 1.5, "dash": "dot"},
    }


def panel_title(
    history: SeriesHistory, alarms: FalseAlarms | None, finding: FindingRow | None
) -> str:
    """A series' title: where it ran, whether it is flagged or moved in the finding shown,
    and its false alarms."""
    key = history.key
    parts = [f"{where(key.network, key.world_size)}: {metric_words(key.metric)}"]
    if history.flagged:
        parts.insert(0, "FLAGGED")
    if finding is not None and series_id(key) in {series_id(s) for s in finding.series}:
        parts.append(f"moved in finding {finding.id}")
    if alarms is not None:
        parts.append(f"false alarms: {alarms.describe()}")
    return " · ".join(parts)


def _ratio_traces(history: SeriesHistory, first: bool) -> list[go.Scatter]:
    """A series' ratio per night with its interval as a band, its levels and change points;
    the legend's entries only for the ``first`` series drawn."""
    points = history.points
    nights = [p.night for p in points]
    ratios = [p.ratio for p in points]
    colour = FLAGGED_COLOUR if history.flagged else RATIO_COLOUR
    place = where(history.key.network, history.key.world_size)
    return [
        go.Scatter(
            x=nights,
            y=[_finite(p.high) for p in points],
            mode="lines",
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
            legendgroup="interval",
        ),
        go.Scatter(
            x=nights,
            y=[_finite(p.low) for p in points],
            mode="lines",
            line={"width": 0},
            fill="tonexty",
            fillcolor=BAND,
            hoverinfo="skip",
            name="95 % interval of the ratio",
            legendgroup="interval",
            showlegend=first,
        ),
        go.Scatter(
            x=nights,
            y=ratios,
            mode="lines+markers",
            marker={"size": 7, "color": colour},
            line={"color": colour, "width": 1},
            name=f"{ARM_WORDS['ratio']}, {place}",
            customdata=[
                [p.sweep_id, units.number(p.low, 4), units.number(p.high, 4), _rounds(p)]
                for p in points
            ],
            hovertemplate=(
                "%{customdata[0]}<br>tonight / reference ×%{y:.4f} "
                "[%{customdata[1]}, %{customdata[2]}], %{customdata[3]}<extra></extra>"
            ),
        ),
        _level_trace(nights, ratios, history.ratio_changes, colour, first),
        _change_trace(nights, ratios, history.ratio_changes, first),
    ]


def _rounds(point: NightPoint) -> str:
    """A night's rounds in words, with the values pulled in before it was judged."""
    rounds = f"{point.rounds} round{'s' * (point.rounds != 1)}"
    if not point.pulled_in:
        return rounds
    pulled = f"{point.pulled_in} far-off ratio{'s' * (point.pulled_in != 1)}"
    return f"{rounds} ({pulled} pulled in to the night's bound)"


def _reference_traces(history: SeriesHistory) -> list[go.Scatter]:
    """A series' reference arm: its seconds per night, its levels and change points."""
    points = history.points
    nights = [p.night for p in points]
    seconds = [p.reference_s for p in points]
    place = where(history.key.network, history.key.world_size)
    return [
        go.Scatter(
            x=nights,
            y=seconds,
            mode="lines+markers",
            marker={"size": 6, "color": REFERENCE_COLOUR},
            line={"color": REFERENCE_COLOUR, "width": 1},
            name=f"reference arm's seconds, {place}",
            text=[units.seconds(s) for s in seconds],
            customdata=[p.sweep_id for p in points],
            hovertemplate="%{customdata}<br>reference arm %{text}<extra></extra>",
        ),
        _level_trace(nights, seconds, history.reference_changes, REFERENCE_COLOUR, False),
        _change_trace(nights, seconds, history.reference_changes, False),
    ]


def _lines(
    history: SeriesHistory, ratio_row: int, finding: FindingRow | None
) -> list[dict[str, Any]]:
    """A series' lines: 1 across its ratio, its change points across each arm's subplot, and
    the first night of ``finding`` across both where the finding moved it."""
    nights = [p.night for p in history.points]
    reference_row = ratio_row + 1
    lines = [_one(ratio_row)]
    for row, starts in (
        (ratio_row, history.ratio_changes),
        (reference_row, history.reference_changes),
    ):
        lines += [
            _vertical(row, nights[i], CHANGE_COLOUR, "dash") for i in starts if i < len(nights)
        ]
    if finding is not None and series_id(history.key) in {series_id(s) for s in finding.series}:
        night = next(
            (p.night for p in history.points if p.sweep_id == finding.first_sweep_id), None
        )
        if night is not None:
            lines += [
                _vertical(r, night, FINDING_COLOUR, "solid") for r in (ratio_row, reference_row)
            ]
    return lines


def nightly_figure(
    histories: Sequence[SeriesHistory],
    metric: str,
    alarms: Mapping[SeriesId, FalseAlarms] | None = None,
    finding: FindingRow | None = None,
) -> go.Figure:
    """For each series of ``metric`` (one per worker count and link), its ratio tonight /
    reference per night with its 95 % interval as a band, the line at 1 and its change
    points (a dashed vertical line, a triangle, and each level between them); beneath it,
    sharing the nights' axis, the reference arm's own seconds per night with its change
    points. A flagged series is drawn red and titled FLAGGED; the first night of
    ``finding`` is a purple line on the series it moved. Each series' title gives its false
    alarms (``alarms``)."""
    shown = panels(histories, metric)
    title = f"Tonight / reference per night: {metric_words(metric)}"
    if not shown:
        return empty_figure(f"No paired night measured the {metric_words(metric)} yet.", title)
    alarms = alarms or {}
    subtitles = []
    for history in shown:
        alarm = alarms.get(series_id(history.key))
        subtitles += [panel_title(history, alarm, finding), "reference arm (s)"]
    figure = make_subplots(
        rows=2 * len(shown),
        cols=1,
        shared_xaxes=True,
        row_heights=[share / len(shown) for share in (0.64, 0.36) * len(shown)],
        vertical_spacing=0.1 / len(shown),
        subplot_titles=subtitles,
    )
    traces: list[go.Scatter] = []
    rows: list[int] = []
    lines: list[dict[str, Any]] = []
    axes: dict[str, Any] = {}
    for index, history in enumerate(shown):
        ratio_row = 2 * index + 1
        for row, drawn in (
            (ratio_row, _ratio_traces(history, index == 0)),
            (ratio_row + 1, _reference_traces(history)),
        ):
            traces += drawn
            rows += [row] * len(drawn)
        lines += _lines(history, ratio_row, finding)
        axes["yaxis" if ratio_row == 1 else f"yaxis{ratio_row}"] = {
            "title": {"text": "ratio"},
            "tickformat": ".3f",
        }
        axes[f"yaxis{ratio_row + 1}"] = {"title": {"text": "seconds"}, **SECONDS_AXIS}
    axes[f"xaxis{2 * len(shown)}"] = {"title": {"text": "night"}}
    figure.add_traces(traces, rows=rows, cols=[1] * len(traces))
    notes = list(figure.layout.annotations)
    for index, history in enumerate(shown):
        notes[2 * index].update(
            font={"size": 12, "color": FLAGGED_COLOUR if history.flagged else "#333"}
        )
        notes[2 * index + 1].update(font={"size": 11, "color": REFERENCE_COLOUR})
    figure.update_layout(
        title={"text": title, "x": 0.01, "font": {"size": 15}},
        template=THEME,
        height=PANEL_HEIGHT * len(shown) + 60,
        margin={"l": 70, "r": 20, "t": 80, "b": 60},
        legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0},
        hovermode="closest",
        shapes=lines,
        annotations=notes,
        **axes,
    )
    return figure


# -- tables --------------------------------------------------------------------------------


def series_rows(
    histories: Sequence[SeriesHistory], alarms: Mapping[SeriesId, FalseAlarms]
) -> list[dict[str, Any]]:
    """One row per series, flagged ones first, then the steady step, by worker count: its
    newest night's ratio with its interval, its change points, and its false alarms."""
    order = {metric: i for i, metric in enumerate(PAIRED_METRICS)}
    ranked = sorted(
        (h for h in histories if h.points),
        key=lambda h: (not h.flagged, order.get(h.key.metric, 99), h.key.world_size, h.key.network),
    )
    rows = []
    for history in ranked:
        newest = history.points[-1]
        named = series_id(history.key)
        found = alarms.get(named)
        rows.append(
            {
                "series": f"{where(history.key.network, history.key.world_size)}: "
                f"{metric_words(history.key.metric)}",
                "verdict": "FLAGGED" if history.flagged else "ok",
                "nights": len(history.points),
                "newest ratio (95 %)": ratio_text(newest.ratio, newest.low, newest.high),
                "ratio changes": len(history.ratio_changes),
                "reference changes": len(history.reference_changes),
                "false alarms": found.describe() if found else "—",
            }
        )
    return rows


def ratio_text(size: float, low: float, high: float) -> str:
    """``×1.053 [1.031, 1.075]``; an interval without bounds (one round) as ``[—]``."""
    if math.isfinite(low) and math.isfinite(high) and low > 0:
        return f"×{size:.3f} [{low:.3f}, {high:.3f}]"
    return f"×{size:.3f} [—]"


def moved_text(finding: FindingRow, most: int = 3) -> str:
    """The series a finding moved, in few words: ``1 worker compute (ratio ×1.079), …``."""
    named = [
        f"{where(s['network'], s['world_size'])} {metric_words(s['metric'])} "
        f"({s['arm']} ×{s['size']:.3f})"
        for s in finding.series[:most]
    ]
    more = f" and {len(finding.series) - most} more" if len(finding.series) > most else ""
    return ", ".join(named) + more


def finding_link(finding_id: int) -> str:
    """The page of one finding, as the nightly's messages link it."""
    return tables.link("/nightly", finding=str(finding_id))


def finding_rows(findings: Sequence[FindingRow]) -> list[dict[str, Any]]:
    """One row per finding as given (newest first night first): its link, first night,
    state, attribution, size with interval, phases, moved series and what changed."""
    return [
        {
            "finding": f"[{f.id}]({finding_link(f.id)})",
            "first night": f"{f.first_night:%Y-%m-%d}",
            "state": f.state,
            "attribution": f.attribution,
            "size (95 %)": ratio_text(f.size, f.low, f.high),
            "phases": ", ".join(f.phases) or "—",
            "moved": moved_text(f),
            "changed": ", ".join((f.diff or {}).get("changed") or {}) or "nothing recorded",
        }
        for f in findings
    ]


def finding_options(
    findings: Sequence[FindingRow], chosen: FindingRow | None = None
) -> list[dict[str, Any]]:
    """The finding picker's options (``chosen`` first where the list lacks it)."""
    shown = list(findings)
    if chosen is not None and all(f.id != chosen.id for f in shown):
        shown.insert(0, chosen)
    return [
        {
            "label": f"{f.id} · {f.first_night:%Y-%m-%d} · {f.attribution} · "
            f"×{f.size:.3f} · {f.state}",
            "value": f.id,
        }
        for f in shown
    ]


def finding_task(finding: FindingRow) -> str | None:
    """The task a finding's series ran (the first one's)."""
    return finding.series[0]["task"] if finding.series else None


def headline_metric(finding: FindingRow) -> str:
    """The metric a finding is drawn by: the steady step where it moved, else its first
    series'."""
    metrics = [s["metric"] for s in finding.series]
    if "steady_step_s" in metrics or not metrics:
        return "steady_step_s"
    return metrics[0]


def finding_facts(finding: FindingRow) -> list[tuple[str, str]]:
    """A finding's facts, each as (what, value)."""
    change = finding.size - 1
    direction = "slower" if change >= 0 else "faster"
    diff = finding.diff or {}
    before = diff.get("before_sweep") or "—"
    return [
        ("state", finding.state),
        ("first night", f"{finding.first_night:%Y-%m-%d} (sweep {finding.first_sweep_id})"),
        ("attribution", finding.attribution),
        (
            "size (95 %)",
            f"{ratio_text(finding.size, finding.low, finding.high)}: "
            f"{units.percent(abs(change))} {direction}, p = {finding.p_value:.2g}",
        ),
        ("phases", ", ".join(finding.phases) or "—"),
        (
            "what changed",
            f"{diff.get('part', finding.attribution)}: sweep {before} → "
            f"{diff.get('after_sweep') or finding.first_sweep_id}",
        ),
        ("note", finding.note or "—"),
        ("updated", tables.when(finding.updated_at)),
    ]


def moved_rows(finding: FindingRow) -> list[dict[str, Any]]:
    """Each series a finding moved: where, what, which arm, by how much, on how many nights."""
    return [
        {
            "series": f"{where(s['network'], s['world_size'])}: {metric_words(s['metric'])}",
            "arm": ARM_WORDS.get(s["arm"], s["arm"]),
            "size (95 %)": ratio_text(s["size"], s["low"], s["high"]),
            "p": f"{s['p_value']:.2g}",
            "nights": s.get("nights", "—"),
            "rounds": s.get("rounds", "—"),
        }
        for s in finding.series
    ]


def shown_value(value: Any) -> str:
    """A recorded value as text: absent as ``—``, lists and mappings as JSON."""
    if value is None:
        return "—"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def diff_rows(finding: FindingRow) -> list[dict[str, str]]:
    """What changed across the finding's first night (``diff["changed"]``), one row per key:
    its value the night before and on the first night."""
    changed = (finding.diff or {}).get("changed") or {}
    return [
        {"key": key, "before": shown_value(values[0]), "after": shown_value(values[1])}
        for key, values in sorted(changed.items())
        if isinstance(values, list | tuple) and len(values) == 2
    ]
