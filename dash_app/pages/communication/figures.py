"""What the Communication page draws: the communication ratio, the phases of a step,
all-reduce latency and bus bandwidth against message size, and the ring model's fits."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go
from dash import html

from dash_app import components as ui
from dash_app import reasons
from dash_app.plots import (
    CATEGORY_WORKERS,
    PHASE_COLOURS,
    PHASE_NAMES,
    SECONDS_AXIS,
    SINGLE_RUN,
    base_figure,
    empty_figure,
    node_boundary,
    ranks_per_node_of,
    thin,
    workers_axis,
)
from results_db.analytics import ScalingRow, communication_to_computation
from results_db.queries.communication import AllReduceRow, PhaseRow
from results_db.queries.runs import RunInfo
from scalebench import units
from workers.records import RECORDS_NOTE


def communication_ratio_figure(
    rows: Sequence[ScalingRow], runs: Sequence[RunInfo] = (), phases: Sequence[PhaseRow] = ()
) -> go.Figure:
    """Communication ratio = communication / total step time per worker count (mean of the
    sweep's runs, and each run), and, from the phase means, communication / computation
    (forward, loss, backward and optimizer): the text uses both. Where the runs' nodes held
    several ranks, each count's shape and the node boundary, where the ratio jumps. Without
    a ratio, why (from the ``runs``)."""
    title = "Communication ratio: communication / step time"
    shown = [r for r in rows if r.communication_ratio is not None]
    if not shown:
        return empty_figure(reasons.no_step_timings(runs), title)
    if any(r.communication_includes_packing for r in runs):
        title += "<br><sup>Some runs were " + RECORDS_NOTE + "</sup>"
    traces = [
        go.Scatter(
            x=[r.world_size for r in shown],
            y=[r.communication_ratio for r in shown],
            mode="lines+markers",
            name="communication / step time (mean over runs)",
            hovertemplate="%{x} worker(s): %{y:.2%} of step time communicating<extra></extra>",
        )
    ]
    computing = [
        (p.world_size, ratio)
        for p in phases
        if (
            ratio := communication_to_computation(
                p.communication_s, p.forward_s, p.loss_s, p.backward_s, p.optimizer_s
            )
        )
        is not None
    ]
    if computing:
        traces.append(
            go.Scatter(
                x=[size for size, _ in computing],
                y=[ratio for _, ratio in computing],
                mode="lines+markers",
                line={"dash": "dot"},
                name="communication / computation",
                hovertemplate="%{x} worker(s): communication is %{y:.2%} of computation"
                "<extra></extra>",
            )
        )
    single = thin([r for r in runs if r.communication_ratio is not None])
    if single:
        traces.append(
            go.Scatter(
                x=[r.world_size for r in single],
                y=[r.communication_ratio for r in single],
                mode="markers",
                marker=SINGLE_RUN,
                name="single runs",
                text=[r.id for r in single],
                hovertemplate="%{text}: %{y:.2%}<extra></extra>",
            )
        )
    yaxis = {
        "tickformat": ".0%",
        "rangemode": "tozero",
        "title": {"text": "ratio"},
    }
    sizes, per_node = [r.world_size for r in shown], ranks_per_node_of(runs)
    marks = node_boundary(sizes, per_node)
    return base_figure(title, traces, workers_axis(sizes, per_node), yaxis, marks)


def phase_figure(
    rows: Sequence[PhaseRow], to_goal: bool = False, runs: Sequence[RunInfo] = ()
) -> go.Figure:
    """Seconds in each phase, stacked, per worker count: per step and rank
    (:func:`results_db.queries.communication.phase_means`), or with ``to_goal`` per rank
    over a whole run to the goal (:func:`results_db.queries.communication.phase_totals`).
    Without rows, why (from the ``runs`` of the profile shown)."""
    title = "Time in each phase to reach the goal" if to_goal else "Where a step's time goes"
    unit = "rank, to the goal" if to_goal else "step and rank"
    if not rows:
        why = reasons.no_phase_totals(runs) if to_goal else reasons.no_step_timings(runs)
        return empty_figure(why, title)
    sizes = [str(r.world_size) for r in rows]
    totals = [sum(getattr(r, f"{p}_s") for p in PHASE_NAMES) for r in rows]
    traces = []
    for phase, colour in zip(PHASE_NAMES, PHASE_COLOURS, strict=True):
        values = [getattr(r, f"{phase}_s") for r in rows]
        traces.append(
            go.Bar(
                x=sizes,
                y=values,
                name=phase,
                marker_color=colour,
                customdata=[
                    [units.seconds(v), units.percent(v / t if t else None)]
                    for v, t in zip(values, totals, strict=True)
                ],
                hovertemplate=(
                    f"{phase}: %{{y:.4g}} s (%{{customdata[0]}}, "
                    "%{customdata[1]} of the total) at %{x} worker(s)<extra></extra>"
                ),
            )
        )
    yaxis = {**SECONDS_AXIS, "title": {"text": f"time per {unit} (s)"}}
    return base_figure(title, traces, CATEGORY_WORKERS, yaxis, barmode="stack")


def short_sweep(sweep_id: str) -> str:
    """``task0-allreduce-20261122T021847Z-80d9`` → ``20261122T021847Z-80d9``: what tells
    one sweep of a task from another."""
    parts = sweep_id.rsplit("-", 2)
    return "-".join(parts[1:]) if len(parts) == 3 else sweep_id


def _allreduce_groups(rows: Sequence[AllReduceRow], dtype: str) -> dict[str, list[AllReduceRow]]:
    """One curve per (sweep, backend, device, network, dtype, workers), keyed by its legend
    name.

    The name says only what differs: the device where the curves hold both CPU and GPU
    tensors, the network profile where there are several, the sweep where two sweeps would
    otherwise share a name.
    """
    Key = tuple[str, str, str, str, int, str]
    groups: dict[Key, list[AllReduceRow]] = defaultdict(list)
    for row in rows:
        if dtype in ("all", row.dtype):
            key = (row.backend, row.device, row.network, row.dtype, row.world_size, row.sweep)
            groups[key].append(row)
    several_devices = len({key[1] for key in groups}) > 1
    several_networks = len({key[2] for key in groups}) > 1

    def base(key: Key) -> str:
        backend, device, network, kind, size, _ = key
        device_part = f"{device} " if several_devices else ""
        network_part = f" on {network}" if several_networks else ""
        return f"{backend} {device_part}{kind} ×{size}{network_part}"

    sweeps_per_name: dict[str, set[str]] = defaultdict(set)
    for key in groups:
        sweeps_per_name[base(key)].add(key[5])
    named = {}
    for key, group in sorted(groups.items()):
        name = base(key)
        if len(sweeps_per_name[name]) > 1:
            name += f" · {short_sweep(key[5])}"
        named[name] = group
    return named


def _curve_title(row: AllReduceRow) -> str:
    """The first hover line of a curve: everything that identifies it."""
    device = f" {row.device}" if row.device else ""
    network = f" on {row.network}" if row.network != "host" else ""
    sweep = f"<br>sweep {row.sweep}" if row.sweep else ""
    return f"{row.backend}{device} {row.dtype}, {units.workers(row.world_size)}{network}{sweep}"


def _bytes_axis(rows: Sequence[AllReduceRow]) -> dict[str, Any]:
    values, labels = units.byte_ticks(min(r.bytes for r in rows), max(r.bytes for r in rows))
    return {
        "type": "log",
        "tickvals": values,
        "ticktext": labels,
        "title": {"text": "message size"},
    }


def _size_traces(
    groups: dict[str, list[AllReduceRow]],
    y: Callable[[AllReduceRow], float],
    data: Callable[[AllReduceRow], list[Any]],
    hover: str,
) -> list[go.Scatter]:
    """One line per curve of ``groups`` against the message size: each point's ``y``, and
    its ``data`` behind the hover (``customdata[2]`` on; 0 and 1 are the size in words and in
    bytes), whose ``hover`` lines follow the curve's title and the size."""
    return [
        go.Scatter(
            x=[r.bytes for r in group],
            y=[y(r) for r in group],
            mode="lines+markers",
            marker={"size": 4},
            name=name,
            customdata=[[units.byte_size(r.bytes), r.bytes, *data(r)] for r in group],
            hovertemplate=(
                f"{_curve_title(group[0])}<br>%{{customdata[0]}} (%{{customdata[1]:,}} B)<br>"
                f"{hover}<extra></extra>"
            ),
        )
        for name, group in groups.items()
    ]


def allreduce_latency_figure(
    rows: Sequence[AllReduceRow], dtype: str = "all", runs: Sequence[RunInfo] = ()
) -> go.Figure:
    """All-reduce p50 latency (s) vs message size (bytes), log–log, one line per backend,
    dtype and world size; the hover gives p50, mean and p95. Without samples of ``dtype``,
    why (from the rows of other dtypes, or the sweeps' ``runs``)."""
    title = "All-reduce latency (p50)"
    groups = _allreduce_groups(rows, dtype)
    if not groups:
        return empty_figure(reasons.no_allreduce_samples(rows, dtype, runs), title)
    traces = _size_traces(
        groups,
        lambda r: r.p50_s,
        lambda r: [
            units.seconds(r.p50_s),
            units.seconds(r.mean_s),
            units.seconds(r.p95_s),
            r.samples,
        ],
        "p50 %{customdata[2]} (%{y:.4g} s), mean %{customdata[3]}, "
        "p95 %{customdata[4]}<br>%{customdata[5]} repetitions",
    )
    shown = [r for group in groups.values() for r in group]
    ticks, labels = units.log_ticks(
        min(r.p50_s for r in shown), max(r.p50_s for r in shown), units.seconds
    )
    yaxis = {"type": "log", "tickvals": ticks, "ticktext": labels, "title": {"text": "latency"}}
    return base_figure(title, traces, _bytes_axis(shown), yaxis)


def allreduce_busbw_figure(
    rows: Sequence[AllReduceRow], dtype: str = "all", runs: Sequence[RunInfo] = ()
) -> go.Figure:
    """All-reduce bus bandwidth (GB/s) = algbw × 2(n−1)/n vs message size, log–log; without
    samples, why (as :func:`allreduce_latency_figure`)."""
    title = "All-reduce bus bandwidth"
    groups = _allreduce_groups(rows, dtype)
    if not groups:
        return empty_figure(reasons.no_allreduce_samples(rows, dtype, runs), title)
    traces = _size_traces(
        groups,
        lambda r: r.busbw / 1e9,
        lambda r: [units.bandwidth(r.algbw)],
        "busbw %{y:.4g} GB/s, algbw %{customdata[2]}",
    )
    shown = [r for group in groups.values() for r in group]
    low, high = min(r.busbw for r in shown) / 1e9, max(r.busbw for r in shown) / 1e9
    ticks, labels = units.log_ticks(low, high, lambda v: f"{v:g}")
    yaxis = {
        "type": "log",
        "tickvals": ticks,
        "ticktext": labels,
        "title": {"text": "bus bandwidth (GB/s)"},
    }
    return base_figure(title, traces, _bytes_axis(shown), yaxis)


FITS_HELP = (
    "Ring model of each configuration: t(n, k) = 2(k−1)·α + 2(k−1)/k·n/β, fitted to the "
    "median time of each size in relative error (least absolute log error, robust to the few "
    "sizes a busy machine or a link's burst disturbed). α: seconds per ring step; β: one "
    "link's bandwidth; residual: root mean square of the sizes' relative errors, with their "
    "median and largest. gloo runs a ring (halving-doubling and bcube send the same bytes in "
    "fewer steps); nccl switches to trees for small messages across many nodes, where this "
    "model overestimates the latency."
)


def fits_section(fits: list[Any], dtype: str, sweeps: int) -> html.Div | None:
    """The table of the shown all-reduce sweeps' fits (α, β, residual), one row each."""
    shown = [f for f in fits if dtype in ("all", f.dtype)]
    if not shown:
        return None
    rows = [
        {
            **({"sweep": short_sweep(f.sweep_id)} if sweeps > 1 else {}),
            "configuration": f"{f.backend} {f.device} {f.dtype}, {f.world_size} workers",
            "network": f.network,
            "α (per ring step)": units.seconds(f.alpha_s),
            "β (per link)": units.bandwidth(f.beta_bytes_per_s),
            "residual (RMS)": units.percent(f.residual),
            "median error": units.percent(f.median_error),
            "largest error": units.percent(f.max_error),
            "sizes": f"{f.sizes}",
        }
        for f in shown
    ]
    return html.Div(
        [
            html.H6("All-reduce model: latency α and bandwidth β"),
            html.P(FITS_HELP, className="small text-muted"),
            ui.table("comm-fits-table", rows),
        ]
    )
