"""The dashboard's pure parts: units, figure and table builders, on hand-made rows."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dash_app import plots, tables
from dash_app.pages.communication import figures as communication_figures
from dash_app.pages.cost import figures as cost_figures
from dash_app.pages.run import figures as run_figures
from dash_app.pages.scaling import figures as scaling_figures
from dash_app.pages.trend import figures as trend_figures
from results_db.analytics import scaling_rows
from results_db.queries.communication import AllReduceRow, PhaseRow
from results_db.queries.costs import CostRow
from results_db.queries.runs import CurvePoint, EvalPoint, EventRow, RunInfo
from scalebench import units


class FakeRunRow:
    def __init__(self, size: int, tta: float | None, compute: float = 10.0) -> None:
        self.world_size = size
        self.goal_reached = tta is not None
        self.time_to_accuracy_s = tta
        self.time_to_accuracy_without_eval_s = None if tta is None else tta * 0.9
        self.compute_s = compute
        self.communication_ratio = 0.1 * size


def run_info(
    run_id: str,
    size: int,
    tta: float | None,
    status: str = "succeeded",
    started: datetime | None = None,
    records_version: int | None = 3,
) -> RunInfo:
    return RunInfo(
        id=run_id,
        sweep_id="s",
        task="t",
        world_size=size,
        repeat=0,
        backend="gloo",
        device="cpu",
        precision="fp32",
        compile="auto",
        compiled=True,
        compile_s=12.5,
        recompilations=0,
        variant="sync",
        light=True,
        status=status,
        reason="",
        started_at=started,
        ended_at=None,
        goal_reached=tta is not None,
        goal_metric=None,
        goal_target=None,
        time_to_accuracy_s=tta,
        time_to_accuracy_without_eval_s=None,
        eval_s=0.0,
        compute_s=1.0,
        communication_s=0.1,
        step_s=1.2,
        communication_ratio=None,
        epochs=1,
        steps=1,
        samples_per_s=None if tta is None else 100.0 / tta,
        quarantined_lines=0,
        records_version=records_version,
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0000042, "4.2 µs"),
        (0.0123, "12.3 ms"),
        (1.5, "1.5 s"),
        (95.44, "95.4 s"),
        (240.0, "240 s"),
        (5400.0, "1 h 30 min"),
        (900.0, "15.0 min"),
        (None, "—"),
    ],
)
def test_seconds(value: float | None, text: str) -> None:
    assert units.seconds(value) == text


def test_bytes_bandwidth_dollars_percent() -> None:
    assert units.byte_size(4_000_000) == "3.81 MiB"
    assert units.byte_size(4_000_000, binary=False) == "4 MB"
    assert units.byte_size(512) == "512 B"
    assert units.bandwidth(12.5e9) == "12.5 GB/s"
    assert units.dollars(1.234) == "$1.23" and units.dollars(0.0042) == "$0.0042"
    assert units.percent(0.125) == "12.5 %" and units.signed_percent(0.081) == "+8.1 %"
    assert units.workers(1) == "1 worker" and units.workers(8) == "8 workers"


def test_axis_ticks() -> None:
    values, labels = units.byte_ticks(2, 4e8)
    assert labels == ["1 B", "32 B", "1 KiB", "32 KiB", "1 MiB", "32 MiB"]
    assert values[labels.index("32 KiB")] == 32 * 1024
    values, labels = units.log_ticks(2e-4, 8e-3, units.seconds)
    assert labels[:4] == ["200 µs", "500 µs", "1 ms", "2 ms"] and values[-1] == 0.01
    assert units.log_ticks(1e-6, 1.0, str)[0] == [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    assert units.log_ticks(0, 1, str) == ([], [])


def test_thin_keeps_the_ends_and_the_limit() -> None:
    values = list(range(1_000_001))
    kept = plots.thin(values, 5000)
    assert len(kept) <= 5000 and kept[0] == 0 and kept[-1] == 1_000_000
    assert plots.thin([1, 2, 3]) == [1, 2, 3]


def test_tta_speedup_and_efficiency_figures() -> None:
    rows = scaling_rows(
        [
            FakeRunRow(1, 100.0),
            FakeRunRow(1, 90.0),
            FakeRunRow(1, 110.0),
            FakeRunRow(2, 60.0, compute=5.0),
            FakeRunRow(4, None),
        ]
    )
    tta = scaling_figures.tta_figure(rows)
    assert list(tta.data[0].x) == [1, 2] and list(tta.data[0].y) == [100.0, 60.0]
    speedup = scaling_figures.speedup_figure(rows)
    names = [t.name for t in speedup.data]
    assert names == [
        "ideal (linear)",
        "speedup = TTA(1) / TTA(k)",
        "compute speedup (compute time only)",
    ]
    assert list(speedup.data[0].y) == [1, 4]  # ideal line up to the largest worker count
    assert list(speedup.data[1].y) == pytest.approx([1.0, 100 / 60])
    assert list(speedup.data[2].y) == pytest.approx([1.0, 2.0])
    assert speedup.layout.xaxis.type == "log" and list(speedup.layout.xaxis.tickvals) == [1, 2, 4]
    efficiency = scaling_figures.efficiency_figure(rows)
    assert list(efficiency.data[0].y) == pytest.approx([1.0, 100 / 60 / 2])
    assert efficiency.layout.shapes[0].y0 == 1.0  # the 100 % line


def test_figures_of_a_sweep_on_nodes_mark_the_node_boundary_and_each_shape() -> None:
    """A sweep at 1, 2, 4, 8 workers on nodes of 4 ranks: the line between 4 and 8 where the
    groups start to cross nodes, and every worker count with its nodes×ranks."""
    runs = [FakeRunRow(k, 100.0 / k**0.5) for k in (1, 1, 1, 2, 4, 8)]
    rows = scaling_rows(runs)
    infos = [replace(run_info(f"r{k}", k, 10.0), ranks_per_node=4) for k in (1, 2, 4, 8)]
    assert plots.ranks_per_node_of(infos) == 4 and plots.ranks_per_node_of([]) == 1
    boundary = math.sqrt(4 * 8)
    for figure in (
        scaling_figures.tta_figure(rows, ranks_per_node=4),
        scaling_figures.speedup_figure(rows, ranks_per_node=4),
        communication_figures.communication_ratio_figure(rows, infos),
    ):
        (line,) = [s for s in figure.layout.shapes if s.yref == "paper"]
        assert line.x0 == line.x1 == pytest.approx(boundary)
        (label,) = [a for a in figure.layout.annotations if "node boundary" in a.text]
        assert label.x == pytest.approx(math.log10(boundary))  # annotations: log coordinates
        assert label.text == "node boundary (4 ranks per node)"
        ticks = list(figure.layout.xaxis.ticktext)
        assert ticks == ["1<br>1×1", "2<br>1×2", "4<br>1×4", "8<br>2×4"]
    efficiency = scaling_figures.efficiency_figure(rows, ranks_per_node=4)
    bars = [s for s in efficiency.layout.shapes if s.yref == "paper"]
    assert [b.x0 for b in bars] == [2.5]  # between the bars of 4 and 8 workers
    assert list(efficiency.layout.xaxis.ticktext)[-1] == "8<br>2×4"
    # one rank per node, or every count inside one node: no boundary to mark
    assert not scaling_figures.tta_figure(rows).layout.shapes
    assert plots.node_boundary([1, 2, 4], 4) == [] and plots.node_boundary([8, 16], 4) == []
    assert plots.workers_axis([1, 8])["ticktext"] == ["1", "8"]


def test_the_time_to_accuracy_figure_says_what_each_point_rests_on() -> None:
    three = [FakeRunRow(1, t) for t in (100.0, 90.0, 110.0)]
    tta = scaling_figures.tta_figure(scaling_rows([*three, FakeRunRow(2, 60.0)]))
    hover = [point[0] for point in tta.data[0].customdata]
    assert hover[0].endswith("(middle of 3)") and hover[1].endswith("(1 repeat)")
    assert "a single repeat, no spread: 2 workers" in tta.layout.title.text
    assert "single repeat" not in scaling_figures.tta_figure(scaling_rows(three)).layout.title.text
    # MLPerf's rule: 1 of 3 converged is no time at all, and the figure says so.
    short = scaling_figures.tta_figure(
        scaling_rows([FakeRunRow(1, 100.0), FakeRunRow(1, None), FakeRunRow(1, None)])
    )
    assert not short.data
    assert short.layout.annotations[0].text == (
        "Too few repeats reached the goal. 1 worker: 1 of 3 reached the goal"
    )


def test_published_results_are_drawn_with_their_hardware() -> None:
    from scalebench.tasks.published import published_points

    rows = scaling_rows([FakeRunRow(1, 100.0), FakeRunRow(2, 60.0)])
    gnmt = published_points("task4a-gnmt-wmt16")
    speedup = scaling_figures.speedup_figure(rows, gnmt)
    (mark,) = [t for t in speedup.data if t.name.startswith("published")]
    assert list(mark.x) == [1, 4] and list(mark.y) == [1.0, 2.56]
    assert mark.name == "published: 1 T4 per n1-standard-4"
    assert 4 in speedup.layout.xaxis.tickvals  # the axis reaches the published point
    costs = cost_figures.cost_figure([], gnmt)  # nothing to compare with: no overlay either
    assert not [t for t in costs.data if t.name and t.name.startswith("published")]
    # The price index the text's numbers imply: ($18 / $10) / 2.56 = 0.70 at 4 workers.
    cost_1, cost_4 = (p.cost_usd for p in gnmt)
    assert cost_4 / cost_1 / gnmt[1].speedup == pytest.approx(0.703, abs=1e-3)
    assert published_points("task0-allreduce") == ()


def test_empty_inputs_give_figures_that_say_why() -> None:
    for figure in (
        scaling_figures.tta_figure([]),
        scaling_figures.speedup_figure([]),
        communication_figures.phase_figure([]),
        cost_figures.cost_figure([]),
        communication_figures.allreduce_latency_figure([]),
        run_figures.loss_figure([]),
        trend_figures.trend_figure([], [], "time_to_accuracy_s"),
    ):
        assert not figure.data and figure.layout.annotations[0].text


def test_phase_figure_stacks_every_phase() -> None:
    rows = [
        PhaseRow(1, 0.001, 0.02, 0.001, 0.04, 0.0, 0.0, 0.003),
        PhaseRow(4, 0.001, 0.02, 0.001, 0.04, 0.002, 0.015, 0.003),
    ]
    figure = communication_figures.phase_figure(rows)
    assert figure.layout.barmode == "stack"
    # One list of phases from the step records to the figure's bars and the rows' fields.
    from dataclasses import fields

    from workers.records import PHASES

    assert plots.PHASE_NAMES is PHASES
    assert [f.name for f in fields(PhaseRow)][1:] == [f"{p}_s" for p in PHASES]
    assert [t.name for t in figure.data] == list(plots.PHASE_NAMES)
    communication = figure.data[PHASES.index("communication")]
    assert list(communication.y) == [0.0, 0.015]
    assert communication.customdata[1][0] == "15 ms"
    assert communication.customdata[1][1] == "18.3 %"  # of a 0.082 s step


def test_allreduce_figures_split_by_backend_dtype_and_size() -> None:
    rows = [
        AllReduceRow("nccl", dtype, size, nbytes, 1e-5 * nbytes, 1e-5, 2e-5, 1e9, 1.5e9, 100)
        for dtype in ("float32", "float16")
        for size in (2, 8)
        for nbytes in (4, 4096)
    ]
    latency = communication_figures.allreduce_latency_figure(rows)
    assert [t.name for t in latency.data] == [
        "nccl float16 ×2",
        "nccl float16 ×8",
        "nccl float32 ×2",
        "nccl float32 ×8",
    ]
    only = communication_figures.allreduce_busbw_figure(rows, "float32")
    assert len(only.data) == 2 and list(only.data[0].y) == [1.5, 1.5]  # GB/s
    assert only.layout.yaxis.title.text == "bus bandwidth (GB/s)"


def test_overlaid_allreduce_curves_are_named_by_what_tells_them_apart() -> None:
    def curve(sweep: str, device: str, backend: str = "gloo") -> list[AllReduceRow]:
        return [
            AllReduceRow(
                backend,
                "float32",
                2,
                nbytes,
                1e-4,
                1e-4,
                2e-4,
                1e8,
                1e8,
                10,
                sweep=sweep,
                device=device,
            )
            for nbytes in (4, 4096)
        ]

    first, second = "task0-allreduce-20261123T010000Z-aaaa", "task0-allreduce-20261124T010000Z-bbbb"
    assert communication_figures.short_sweep(first) == "20261123T010000Z-aaaa"
    rows = curve(first, "cpu") + curve(second, "cpu") + curve(second, "cuda", "nccl")
    names = [t.name for t in communication_figures.allreduce_latency_figure(rows).data]
    assert names == [
        "gloo cpu float32 ×2 · 20261123T010000Z-aaaa",
        "gloo cpu float32 ×2 · 20261124T010000Z-bbbb",
        "nccl cuda float32 ×2",
    ]
    # one device and one sweep per name: nothing added
    same_device = curve(first, "cuda", "nccl") + curve(second, "cuda")
    names = [t.name for t in communication_figures.allreduce_busbw_figure(same_device).data]
    assert names == ["gloo float32 ×2", "nccl float32 ×2"]


def test_pareto_front() -> None:
    points = [(10.0, 5.0), (5.0, 8.0), (12.0, 6.0), (3.0, 20.0), (5.0, 9.0)]
    assert cost_figures.pareto_front(points) == [3, 1, 0]
    rows = [
        CostRow(1, 100.0, 1.0, 0.3, 1.0, 1.0, 1.0),
        CostRow(2, 60.0, 1.2, 0.2, 1.67, 0.7, 0.4),
        CostRow(4, 70.0, 2.0, 0.5, 1.43, 1.4, 1.2),
    ]
    figure = cost_figures.cost_time_figure(rows)
    regular = next(t for t in figure.data if t.name == "Pareto front, regular")
    assert list(regular.x) == [60.0, 100.0]  # 4 workers: slower and dearer than 2
    preemptible = next(t for t in figure.data if t.name == "Pareto front, preemptible")
    assert list(preemptible.x) == [60.0]


def test_run_figures_mark_events_and_the_target() -> None:
    series = [
        run_figures.RunSeries("1 worker", "r1", False, [CurvePoint(1.0, 2.0, 3)], []),
        run_figures.RunSeries("2 workers (this run)", "r2", True, [CurvePoint(0.5, 1.5, 3)], []),
    ]
    events = [
        EventRow(0, 0.9, "failed", {"reason": "peer went away"}),
        EventRow(1, 0.9, "failed", {"reason": "peer went away"}),
    ]
    loss = run_figures.loss_figure(series, events)
    assert [t.line.width for t in loss.data] == [1.5, 3]
    assert len(loss.layout.shapes) == 1  # one line for the failure, not one per rank
    assert loss.layout.annotations[0].hovertext == "peer went away"
    metric = run_figures.metric_figure(series, "top1_accuracy", 70.0)
    assert "No evaluation" in metric.layout.annotations[0].text


def test_runs_table_sorts_missing_values_last_and_pages() -> None:
    runs = [run_info(f"r{i}", 1, tta) for i, tta in enumerate([5.0, None, 1.0, 3.0])]
    rows, pages = tables.run_rows(runs, "time_to_accuracy_s", "asc", 0, 2)
    assert [r["run"].split("]")[0] for r in rows] == ["[r2", "[r3"] and pages == 2
    rows, _ = tables.run_rows(runs, "time_to_accuracy_s", "desc", 1, 2)
    assert [r["time_to_accuracy_s"] for r in rows] == ["1 s", "—"]
    # past the end: the last page
    rows, _ = tables.run_rows(runs, "time_to_accuracy_s", "asc", 99, 2)
    assert rows[-1]["time_to_accuracy_s"] == "—"
    assert rows[0]["run"] == "[r0](/run?id=r0)"


def test_the_run_facts_say_how_the_step_was_compiled() -> None:
    from dataclasses import replace

    from dash_app.tables import run_facts

    facts = dict(run_facts(run_info("r", 1, 30.0)))
    assert facts["compilation"] == (
        "compiled (compile auto), 12.5 s before the start, 0 recompilations while timed"
    )
    eager = replace(
        run_info("r", 1, 30.0), compile="off", compiled=False, compile_s=0.0, recompilations=None
    )
    assert dict(run_facts(eager))["compilation"] == "eager"
    fell_back = replace(eager, compile="auto")
    assert dict(run_facts(fell_back))["compilation"] == "eager (compile auto)"


def test_the_run_page_and_the_runs_table_show_the_declared_run_metrics() -> None:
    """The peak memory (scalebench.run_metrics), on the Run page's facts and as a sortable
    column of the runs table; a run stored before it was measured shows a dash."""
    from dataclasses import replace

    from dash_app.pages.runs.figures import COLUMNS
    from dash_app.state import SORTABLE_RUN_COLUMNS
    from dash_app.tables import run_facts

    measured = replace(run_info("big", 1, 30.0), metrics={"peak_memory_bytes": 3 * 2**30})
    older = run_info("old", 1, 20.0)
    assert dict(run_facts(measured))["peak memory (largest rank)"] == "3 GiB"
    assert dict(run_facts(older))["peak memory (largest rank)"] == "—"
    assert {"field": "peak_memory_bytes"}.items() <= COLUMNS[9].items()
    assert "peak_memory_bytes" in SORTABLE_RUN_COLUMNS
    rows, _ = tables.run_rows([older, measured], "peak_memory_bytes", "desc", 0, 10)
    assert [(r["run"][:5], r["peak_memory_bytes"]) for r in rows] == [
        ("[big]", "3 GiB"),
        ("[old]", "—"),
    ]


def test_per_network_figures_keep_profiles_apart_and_draw_the_ideal_once() -> None:
    def rows(tta_two: float) -> list:
        return scaling_rows([FakeRunRow(1, 100.0), FakeRunRow(2, tta_two)])

    host, slow = (
        scaling_figures.speedup_figure(rows(55.0)),
        scaling_figures.speedup_figure(rows(90.0)),
    )
    combined = plots.per_network({"host": host, "100mbit": slow})
    named = {t.name: t for t in combined.data}
    assert [t.name for t in combined.data].count("ideal (linear)") == 1
    fast, slowed = (
        named["speedup = TTA(1) / TTA(k) · host"],
        named["speedup = TTA(1) / TTA(k) · 100mbit"],
    )
    assert list(slowed.y) == pytest.approx([1.0, 100 / 90])
    assert fast.line.color == slowed.line.color and fast.line.dash != slowed.line.dash
    assert slowed.legendgroup == "100mbit" and slowed.hovertemplate.startswith("100mbit: ")
    assert plots.per_network({"host": host}) is host  # one profile: the figure as it is
    empty = plots.empty_figure("nothing")
    assert plots.per_network({"host": empty, "1gbit": slow}).data[1].name.endswith("1gbit")


def test_runs_recorded_before_packing_was_timed_apart_are_labelled() -> None:
    """Their communication includes packing the gradients: the ratio figure says so."""
    rows = [SimpleNamespace(world_size=2, communication_ratio=0.2)]
    new = communication_figures.communication_ratio_figure(rows, [run_info("a", 2, 1.0)])
    assert "packing" not in new.layout.title.text
    for old_version in (None, 2):
        runs = [run_info("a", 2, 1.0), run_info("b", 2, 1.0, records_version=old_version)]
        old = communication_figures.communication_ratio_figure(rows, runs)
        said = old.layout.title.text.replace("</sup><br><sup>", " ")  # wrapped: one sentence
        assert "includes packing and unpacking the gradients" in said


# -- labels inside the plot ----------------------------------------------------------------

COSTS = [
    CostRow(1, 100.0, 1.0, 0.3, 1.0, 1.0, 1.0),
    CostRow(2, 60.0, 1.2, 0.2, 1.67, 0.72, 0.4),
    CostRow(4, 31.0, 2.4, 0.5, 3.2, 0.75, 0.5),
]


def room_above(figure: Any, values: list[float], axis: str = "yaxis") -> float:
    """How far the axis reaches past the highest of ``values``, as a share of the range
    (:func:`dash_app.plots.labelled_range` adds its room as a share of the values' span, so a
    share of the whole range is a little less: hence the tests' ``/ 1.25``)."""
    low, high = figure.layout[axis].range
    return (high - max(values)) / (high - low)


def labelled(figure: Any) -> list[Any]:
    """The traces that write text beside their points or bars."""
    return [t for t in figure.data if t.textposition or "text" in (t.mode or "")]


def test_bar_labels_have_room_above_the_highest_bar() -> None:
    """Efficiency and cost bars are labelled above their tops: the axis reaches past the
    highest bar far enough for its label, and past the 100 % line's label."""
    rows = scaling_rows([FakeRunRow(1, 100.0), FakeRunRow(2, 40.0), FakeRunRow(4, 30.0)])
    efficiency = scaling_figures.efficiency_figure(rows)
    (bars,) = labelled(efficiency)
    assert bars.textposition == "outside"
    assert max(bars.y) == pytest.approx(1.25)  # superlinear at 2 workers: above the line
    assert efficiency.layout.yaxis.range[0] == 0
    assert room_above(efficiency, list(bars.y)) >= plots.LABEL_ROOM_ABOVE / 1.25
    flat = scaling_figures.efficiency_figure(
        scaling_rows([FakeRunRow(1, 100.0), FakeRunRow(2, 90.0)])
    )
    assert room_above(flat, [1.0]) >= plots.LABEL_ROOM_ABOVE / 1.25  # the "linear" label's
    cost = cost_figures.cost_figure(COSTS)
    regular, preemptible = labelled(cost)
    assert [t.textposition for t in (regular, preemptible)] == ["outside", "outside"]
    assert list(regular.text)[-1] == "$2.40"
    assert room_above(cost, [*regular.y, *preemptible.y]) >= plots.LABEL_ROOM_ABOVE / 1.25


def test_cost_against_time_labels_every_point_inside_the_plot() -> None:
    """Each point's label ("2w") sits above it, centred: the y axis reaches past the highest
    point, the x axis past the first and the last, published points included."""
    from scalebench.tasks.published import published_points

    figure = cost_figures.cost_time_figure(COSTS, published_points("task4a-gnmt-wmt16"))
    texts = labelled(figure)
    assert {t.textposition for t in texts} == {"top center"}
    assert sorted(t.name for t in texts)[:2] == ["preemptible prices", "regular prices"]
    xs = [x for t in texts for x in t.x]
    ys = [y for t in texts for y in t.y]
    assert room_above(figure, ys) >= plots.LABEL_ROOM_ABOVE / 1.25
    low, high = figure.layout.xaxis.range
    span = high - low
    assert (min(xs) - low) / span >= plots.LABEL_ROOM_BESIDE / 1.25
    assert (high - max(xs)) / span >= plots.LABEL_ROOM_BESIDE / 1.25
    assert figure.layout.yaxis.range[0] == 0


def test_level_line_labels_have_room_above_their_line() -> None:
    """The price index's 1.0 line and a run's target line are labelled above the line: the
    axis reaches past it whatever the curves do."""
    index = cost_figures.price_index_figure(COSTS)
    assert room_above(index, [1.0]) >= plots.LABEL_ROOM_ABOVE / 1.25
    evals = [EvalPoint(e, 10.0 * (e + 1), 20.0 + 25.0 * e, None) for e in range(3)]  # 20 → 70
    series = [run_figures.RunSeries("1 worker", "r", True, [], evals)]
    metric = run_figures.metric_figure(series, "top1_accuracy", 70.0)
    assert room_above(metric, [70.0]) >= plots.LABEL_ROOM_ABOVE / 1.25
    assert metric.layout.yaxis.range[0] < 20.0  # the lowest evaluation inside too


def test_per_network_figures_keep_every_profiles_points_inside_the_ranges() -> None:
    """One figure of two profiles takes the ranges that hold both profiles' labels."""
    dearer = [replace(r, cost_regular=r.cost_regular * 3) for r in COSTS]
    combined = plots.per_network(
        {
            "host": cost_figures.cost_time_figure(COSTS),
            "slow": cost_figures.cost_time_figure(dearer),
        }
    )
    ys = [y for t in labelled(combined) for y in t.y]
    assert max(ys) == pytest.approx(7.2)
    assert room_above(combined, ys) >= plots.LABEL_ROOM_ABOVE / 1.25
    assert plots.labelled_range([2.0, 4.0], above=0.5, zero=True) == [0.0, 6.0]
    assert plots.labelled_range([2.0, 4.0], beside=0.25) == [1.5, 4.5]
    assert plots.labelled_range([3.0], beside=0.1) == pytest.approx([2.7, 3.3])


def test_long_subtitles_are_wrapped_between_words() -> None:
    """Plotly draws a title on one line however wide: a subtitle longer than a half-width
    figure holds is broken onto more lines, and the top margin grows with them."""
    note = "Some runs were recorded before records version 3: " + "x " * 40
    title = plots.wrap_subtitles(f"Ratio<br><sup>{note}</sup>", width=50)
    lines = title.split("<br>")
    assert lines[0] == "Ratio" and len(lines) > 2
    assert all(line.startswith("<sup>") and len(line) <= 50 + 11 for line in lines[1:])
    assert plots.wrap_subtitles("Ratio<br><sup>short</sup>") == "Ratio<br><sup>short</sup>"
    figure = plots.base_figure(f"Ratio<br><sup>{note}</sup>", [], {}, {})
    assert figure.layout.margin.t > 50


def test_grids_fit_their_text_and_wrap_only_long_text() -> None:
    """Every grid sizes its columns to their text in the browser (autosize when ready, then
    fitted on its rows, columns and width changing), wraps its headers rather than cutting
    them, and shows a cell's full value on hover; a column of long words wraps, an
    identifier never does."""
    from dash_app import components

    rows = [
        {"run": "[r1](/run?id=r1)", "name": "task1a-resnet20-cifar10-20261122T021829Z-37f8",
         "basis": "projected: compute from 4 worker(s) on host; packing from 4 worker(s)",
         "workers": 2},
    ]  # fmt: skip
    grid = components.table("t", rows, links=("run",))
    columns = {c["field"]: c for c in grid.columnDefs}
    assert columns["run"]["cellRenderer"] == "markdown" and "tooltipField" not in columns["run"]
    assert all(columns[f]["tooltipField"] == f for f in ("name", "basis", "workers"))
    assert columns["basis"]["wrapText"] and columns["basis"]["autoHeight"]
    assert columns["basis"]["minWidth"] == components.WRAP_NARROWEST
    assert not any(columns[f].get("wrapText") for f in ("run", "name", "workers"))
    assert grid.columnSize == "autoSize"
    assert set(grid.eventListeners) == {
        "rowDataUpdated",
        "newColumnsLoaded",
        "gridSizeChanged",
        "columnResized",
    }
    assert grid.defaultColDef["wrapHeaderText"] and grid.defaultColDef["autoHeaderHeight"]
    assert grid.dashGridOptions["tooltipShowMode"] == "whenTruncated"
    # the function the listeners name, in the assets Dash serves
    script = Path(components.__file__).with_name("assets") / "dashAgGridFunctions.js"
    assert "dagfuncs.fitColumns = function (params)" in script.read_text(encoding="utf-8")


def test_the_measured_markers_of_a_projection_are_its_measured_points_only() -> None:
    def point(world_size: int, measured: bool) -> SimpleNamespace:
        return SimpleNamespace(world_size=world_size, measured=measured, step_s=0.5 * world_size)

    row = [point(1, True), point(2, True), point(64, False)]
    trace = plots.measured_markers(row, "host", "step_s", "#123456", "measured", "%{y:.4g} s")  # type: ignore[arg-type]
    assert list(trace.x) == [1, 2] and list(trace.y) == [0.5, 1.0]
    assert trace.mode == "markers" and trace.marker.color == "#123456"
    assert trace.name == "host: measured" and trace.legendgroup == "host"
    assert trace.hovertemplate == "host, %{x} worker(s): %{y:.4g} s, measured<extra></extra>"
