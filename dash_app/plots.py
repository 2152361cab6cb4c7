"""What every figure shares: the theme, bounded series, empty figures, the workers axis,
level lines and one panel per network profile. Each page builds its own figures (in
``dash_app/pages/<page>/figures.py`` or the page module) from these.

Figure builders are pure: query rows in, a Plotly figure out.

No database, no Dash: every function here takes the plain rows of
:mod:`results_db.queries` and returns a ``plotly.graph_objects.Figure``, so
they are tested with numbers alone. Units are stated on every axis (seconds,
GB/s, dollars, bytes with IEC suffixes) and every hover label gives the exact
value. Series are bounded: the queries aggregate per-step rows in SQL, and
:func:`thin` strides anything that could still grow past :data:`MAX_POINTS`.

Each builder collects its traces and lines first and creates the figure in
one call (:func:`base_figure`): Plotly validates every property it is given, and
one constructor is several times faster than a chain of updates.

Definitions (see ``results_db.analytics``): time-to-accuracy (TTA) runs from
the group's common start to the end of the first evaluation meeting the goal;
speedup(k) = TTA(1) / TTA(k); compute speedup uses compute seconds only;
efficiency = speedup / k; communication ratio = communication / step time;
cost(k) = k × (node $/h + GPU $/h) × TTA(k) h; price index = (cost(k)/cost(1)) /
speedup(k); busbw = algbw × 2(n−1)/n.
"""

from __future__ import annotations

import copy
import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import plotly.graph_objects as go

from results_db.analytics import ScalingRow
from scalebench.nodes import shape_label
from scalebench.tasks.published import PublishedPoint
from workers.records import PHASES

if TYPE_CHECKING:
    from results_db.projection import ProjectedPoint
    from results_db.queries.runs import RunInfo

T = TypeVar("T")
MAX_POINTS = 5000  # per trace
HEIGHT = 360
PHASE_NAMES = PHASES  # as the records name them (workers/records/schema.py)
PHASE_COLOURS = ("#9e9e9e", "#1f77b4", "#aec7e8", "#2ca02c", "#ff9896", "#d62728", "#ff7f0e")
SECONDS_AXIS = {"tickformat": "~s", "ticksuffix": "s"}
SINGLE_RUN = {"size": 6, "color": "rgba(80,80,80,0.45)"}
GRID = "#e5e9f0"
# A small template of our own: Plotly's named templates are deep-copied into every
# figure, which costs more than building the figure itself.
THEME_COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
THEME = go.layout.Template(
    layout={
        "colorway": list(THEME_COLOURS),
        "font": {
            "family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
            "color": "#333",
        },
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {
            "gridcolor": GRID,
            "zerolinecolor": GRID,
            "linecolor": "#999",
            "automargin": True,
        },
        "yaxis": {
            "gridcolor": GRID,
            "zerolinecolor": GRID,
            "linecolor": "#999",
            "automargin": True,
        },
        "hoverlabel": {"align": "left"},
    }
)


def thin(values: Sequence[T], limit: int = MAX_POINTS) -> list[T]:
    """At most ``limit`` items of ``values``, evenly strided, the last one kept."""
    if len(values) <= limit:
        return list(values)
    step = -(-len(values) // limit)
    kept = list(values[::step])
    if kept[-1] is not values[-1]:
        kept[-1] = values[-1]
    return kept


SUBTITLE_CHARS = 80  # a subtitle's line: it fits a half-width figure at 1,280 px


def wrap_subtitles(title: str, width: int = SUBTITLE_CHARS) -> str:
    """``title`` with each ``<sup>`` line (a subtitle: what the figure leaves out, or rests
    on) longer than ``width`` characters broken between words onto more lines: Plotly draws
    a title on one line however wide, past the figure's edge."""
    lines = []
    for line in title.split("<br>"):
        inner = line.removeprefix("<sup>").removesuffix("</sup>")
        if inner == line or len(inner) <= width:
            lines.append(line)
            continue
        wrapped = textwrap.wrap(inner, width, break_long_words=False, break_on_hyphens=False)
        lines += [f"<sup>{part}</sup>" for part in wrapped]
    return "<br>".join(lines)


def base_figure(
    title: str,
    traces: Sequence[Any],
    xaxis: dict[str, Any],
    yaxis: dict[str, Any],
    marks: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (),
    **layout: Any,
) -> go.Figure:
    """A figure in one constructor call: traces, axes, lines with their labels (``marks``);
    a long subtitle wrapped (:func:`wrap_subtitles`), the top margin taller for each line
    past the second."""
    title = wrap_subtitles(title)
    return go.Figure(
        data=list(traces),
        layout={
            "title": {"text": title, "x": 0.01, "font": {"size": 15}},
            "template": THEME,
            "height": HEIGHT,
            "margin": {"l": 60, "r": 20, "t": 50 + 12 * max(0, title.count("<br>") - 1), "b": 50},
            # the legend at the figure's foot, below the x axis's title (a share of the plot
            # height put it over a title pushed down by two-line ticks)
            "legend": {
                "orientation": "h",
                "yref": "container",
                "y": 0,
                "yanchor": "bottom",
                "x": 0,
            },
            "hovermode": "closest",
            "xaxis": xaxis,
            "yaxis": yaxis,
            "shapes": [shape for shape, _ in marks],
            "annotations": [label for _, label in marks],
            **layout,
        },
    )


# Room kept for a point's or a bar's label: a share of the axis's span above the highest
# labelled value (a label of 11-12 px above its marker or bar, in a plot area of about 250 px)
# and beside the outermost ones (half a label's width, centred on its marker).
LABEL_ROOM_ABOVE = 0.16
LABEL_ROOM_BESIDE = 0.08


def labelled_range(
    values: Sequence[float], above: float = 0.0, beside: float = 0.0, zero: bool = False
) -> list[float]:
    """A linear axis's range over ``values`` with room for their labels: ``above`` (a share
    of the span) past the highest, ``beside`` past both ends; with ``zero``, from 0 (the
    values are not negative). Plotly's autorange leaves no room for text, which the plot
    area then clips; an explicit range keeps every label inside it."""
    low, high = min(values), max(values)
    if zero:
        low = min(low, 0.0)
    span = (high - low) or abs(high) or 1.0
    start = low if zero else low - beside * span
    return [start, high + max(above, beside) * span]


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A blank figure that says why it is blank."""
    note = {
        "text": message,
        "showarrow": False,
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "font": {"size": 14, "color": "#666"},
    }
    return go.Figure(
        layout={
            "title": {"text": title, "x": 0.01, "font": {"size": 15}},
            "template": THEME,
            "height": HEIGHT,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [note],
        }
    )


def level_line(y: float, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dotted horizontal line across the plot at ``y``, labelled at its right end."""
    shape = {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"dash": "dot", "color": "#777", "width": 1.5},
    }
    label = {
        "text": text,
        "xref": "paper",
        "x": 1,
        "y": y,
        "xanchor": "right",
        "yanchor": "bottom",
        "showarrow": False,
        "font": {"size": 11, "color": "#555"},
    }
    return shape, label


def moment_line(
    x: float, text: str, colour: str, hover: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dotted vertical line at ``x`` (an event), labelled at its top."""
    shape = {
        "type": "line",
        "yref": "paper",
        "y0": 0,
        "y1": 1,
        "x0": x,
        "x1": x,
        "line": {"dash": "dot", "color": colour, "width": 1.5},
    }
    label = {
        "text": text,
        "yref": "paper",
        "y": 1,
        "x": x,
        "xanchor": "left",
        "yanchor": "top",
        "showarrow": False,
        "hovertext": hover,
        "font": {"size": 11, "color": colour},
    }
    return shape, label


CATEGORY_WORKERS = {"type": "category", "title": {"text": "workers"}}


def workers_axis(sizes: Sequence[int], ranks_per_node: int = 1) -> dict[str, Any]:
    """A log axis of worker counts with a tick at each one measured; where nodes held several
    ranks (``ranks_per_node`` above 1) each tick also gives its group's shape, ``nodes×ranks``."""
    ticks = sorted(set(sizes))
    return {
        "type": "log",
        "tickvals": ticks,
        "ticktext": [workers_tick(k, ranks_per_node) for k in ticks],
        "title": {"text": "workers" if ranks_per_node == 1 else "workers (nodes×ranks)"},
    }


def workers_tick(world_size: int, ranks_per_node: int = 1) -> str:
    """``8``, or with several ranks per node ``8<br>2×4`` (a count no request can lay out on
    its nodes, a projected one say, is written alone)."""
    shape = shape_label(world_size, ranks_per_node)
    return str(world_size) if ranks_per_node == 1 or shape == "?" else f"{world_size}<br>{shape}"


def category_workers(sizes: Sequence[int], ranks_per_node: int = 1) -> dict[str, Any]:
    """A category axis of worker counts (bars), with each group's shape as
    :func:`workers_axis` gives it."""
    if ranks_per_node == 1:
        return CATEGORY_WORKERS
    ticks = [str(k) for k in sizes]
    return {
        **CATEGORY_WORKERS,
        "tickvals": ticks,
        "ticktext": [workers_tick(k, ranks_per_node) for k in sizes],
        "title": {"text": "workers (nodes×ranks)"},
    }


BOUNDARY_COLOUR = "#8c564b"


def node_boundary(
    sizes: Sequence[int], ranks_per_node: int, category: bool = False
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """A dashed vertical line where the worker count passes one node (``ranks_per_node``
    ranks), labelled: between the largest measured count that fits one node and the next.
    None where every count shown fits one node, or every one spans several (one rank per
    node: every group of two or more crosses nodes). ``category``: on a category axis of
    ``sizes`` (bars), else on a log axis."""
    shown = sorted(set(sizes))
    inside = [k for k in shown if k <= ranks_per_node]
    if ranks_per_node <= 1 or not inside or len(inside) == len(shown):
        return []
    last, first_across = inside[-1], shown[len(inside)]
    if category:
        x = line_x = label_x = len(inside) - 0.5  # between the two bars
    else:
        x = math.sqrt(last * first_across)  # halfway on the log axis
        # Shapes take data coordinates on a log axis, annotations its logarithm.
        line_x, label_x = x, math.log10(x)
    shape = {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": line_x,
        "x1": line_x,
        "y0": 0,
        "y1": 1,
        "line": {"dash": "dash", "color": BOUNDARY_COLOUR, "width": 1.5},
    }
    label = {
        "text": f"node boundary ({ranks_per_node} ranks per node)",
        "xref": "x",
        "yref": "paper",
        "x": label_x,
        "y": 1,
        "xanchor": "left",
        "yanchor": "top",
        "showarrow": False,
        "font": {"size": 11, "color": BOUNDARY_COLOUR},
    }
    return [(shape, label)]


def ranks_per_node_of(runs: Sequence[RunInfo]) -> int:
    """The ranks per node of a sweep's runs (one request, one value; 1 for none)."""
    return max((r.ranks_per_node for r in runs), default=1)


def spread_of(rows: Sequence[ScalingRow]) -> dict[str, Any]:
    """Error bars from each row's TTA down to its fastest and up to its slowest kept repeat."""
    return {
        "type": "data",
        "symmetric": False,
        "array": [r.time_to_accuracy_max_s - r.time_to_accuracy_s for r in rows],
        "arrayminus": [r.time_to_accuracy_s - r.time_to_accuracy_min_s for r in rows],
    }


PUBLISHED_SYMBOLS = ("diamond", "square", "triangle-up", "star")


def published_traces(
    points: Sequence[PublishedPoint], value: str, unit: str, category: bool = False
) -> list[go.Scatter]:
    """The published results with a ``value`` (a :class:`PublishedPoint` field), as black
    markers, one trace per hardware; ``category``: x is the worker count as text."""
    by_hardware: dict[str, list[PublishedPoint]] = defaultdict(list)
    for point in points:
        if getattr(point, value) is not None:
            by_hardware[point.hardware].append(point)
    return [
        go.Scatter(
            x=[str(p.world_size) if category else p.world_size for p in group],
            y=[getattr(p, value) for p in group],
            mode="markers",
            marker={"size": 11, "color": "black", "symbol": PUBLISHED_SYMBOLS[i % 4]},
            name=group[0].label,
            text=[p.note for p in group],
            hovertemplate=(
                f"published, {hardware}<br>%{{x}} worker(s): %{{y:.4g}} {unit}"
                "<br>%{text}<extra></extra>"
            ),
        )
        for i, (hardware, group) in enumerate(by_hardware.items())
    ]


def measured_markers(
    row: Sequence[ProjectedPoint], network: str, value: str, colour: str, name: str, hover: str
) -> go.Scatter:
    """The measured points of ``network``'s projection (``row``, that link profile's
    points) as markers of ``colour`` at their ``value`` (a :class:`ProjectedPoint` field), in
    the profile's legend group, named ``<network>: <name>``; ``hover`` is the value as the
    hover writes it."""
    measured = [p for p in row if p.measured]
    return go.Scatter(
        x=[p.world_size for p in measured],
        y=[getattr(p, value) for p in measured],
        mode="markers",
        marker={"color": colour, "size": 10},
        name=f"{network}: {name}",
        legendgroup=network,
        hovertemplate=f"{network}, %{{x}} worker(s): {hover}, measured<extra></extra>",
    )


NETWORK_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def per_network(figures: Mapping[str, go.Figure]) -> go.Figure:
    """One figure from the same figure drawn for each network profile (``{profile: figure}``,
    in the order to show): every trace named and grouped by its profile, the profiles told
    apart by line style, the colours kept per quantity; an ideal line that every profile
    draws alike is drawn once. A single profile is returned as it is; profiles whose
    figure has no data are left out."""
    drawn = {name: figure for name, figure in figures.items() if figure.data}
    if len(figures) == 1 or not drawn:
        return next(iter(drawn.values()), next(iter(figures.values())))

    def signature(trace: Any) -> tuple[Any, ...]:
        return (trace.name, tuple(trace.x or ()), tuple(trace.y or ()))

    shared = set.intersection(
        *({signature(t) for t in f.data if str(t.name).startswith("ideal")} for f in drawn.values())
    )
    first = next(iter(drawn.values()))
    combined = go.Figure(layout=first.layout)
    for trace in first.data:
        if signature(trace) in shared:
            combined.add_trace(trace)
    for index, (network, figure) in enumerate(drawn.items()):
        own = [t for t in figure.data if signature(t) not in shared]
        for position, trace in enumerate(own):
            trace = copy.deepcopy(trace)
            colour = THEME_COLOURS[position % len(THEME_COLOURS)]
            trace.name = f"{trace.name} · {network}"
            trace.legendgroup = network
            if position == 0:
                trace.legendgrouptitle = {"text": network}
            if isinstance(trace, go.Scatter):
                trace.line.color = trace.line.color or colour
                trace.marker.color = trace.marker.color or colour
                trace.line.dash = NETWORK_DASHES[index % len(NETWORK_DASHES)]
            if trace.hovertemplate:
                trace.hovertemplate = f"{network}: {trace.hovertemplate}"
            combined.add_trace(trace)
    combined.update_layout(legend={"groupclick": "toggleitem"}, **_shared_ranges(drawn.values()))
    return combined


def _shared_ranges(figures: Iterable[go.Figure]) -> dict[str, Any]:
    """The axes whose range the figures set (to keep their labels inside the plot), each
    widened to hold every figure's range: the combined figure draws every profile's points."""
    shared: dict[str, Any] = {}
    shown = list(figures)
    for axis in ("xaxis", "yaxis"):
        ranges = [list(f.layout[axis].range) for f in shown if f.layout[axis].range]
        if ranges:
            shared[f"{axis}_range"] = [min(r[0] for r in ranges), max(r[1] for r in ranges)]
    return shared
