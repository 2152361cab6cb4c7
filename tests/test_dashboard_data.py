"""The dashboard's queries and figures on a seeded database, SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from dashboard_seed import (
    ALLREDUCE,
    BAD,
    BASELINE_NIGHT,
    KNOWN,
    KNOWN_MEAN,
    KNOWN_SPEEDUP,
    KNOWN_TTA,
    LATEST_NIGHT,
    LIGHT,
    LIGHT_SPEEDUP,
    LIGHT_TTA,
    seeded_database,
)
from sqlalchemy import insert, text
from sqlalchemy.exc import DBAPIError

from dash_app import tables
from dash_app.data import DataUnavailable, Source
from dash_app.pages.communication import figures as communication_figures
from dash_app.pages.cost import figures as cost_figures
from dash_app.pages.scaling import figures as scaling_figures
from dash_app.pages.trend import figures as trend_figures
from results_db.database import make_engine
from results_db.ingest import ingest_location
from results_db.models import Price
from results_db.queries import communication as communication_queries
from results_db.queries import costs as costs_queries
from results_db.queries import runs as runs_queries
from workers.records import PHASES


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def seeded_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    admin = request.getfixturevalue("postgres_admin") if request.param == "postgresql" else None
    with seeded_database(request.param, tmp_path_factory.mktemp("dash-data"), admin) as url:
        yield url


@pytest.fixture(scope="module")
def source(seeded_url: str):
    source = Source(seeded_url)
    yield source
    source.dispose()


def test_scaling_of_the_known_sweep(source: Source) -> None:
    rows = {r.world_size: r for r in source.scaling(KNOWN)}
    for size, mean in KNOWN_MEAN.items():
        assert rows[size].time_to_accuracy_s == pytest.approx(mean)
        assert rows[size].speedup == pytest.approx(KNOWN_SPEEDUP[size])
        assert rows[size].runs == 3 and rows[size].reached == 3
    assert rows[4].efficiency == pytest.approx(100 / 31 / 4)


def test_figures_show_the_speedups_of_the_recorded_and_the_known_sweep(source: Source) -> None:
    light = scaling_figures.speedup_figure(source.scaling(LIGHT))
    measured = next(t for t in light.data if t.name.startswith("speedup"))
    assert list(measured.x) == [1, 2]
    assert list(measured.y) == pytest.approx([1.0, LIGHT_SPEEDUP])
    ideal = next(t for t in light.data if t.name == "ideal (linear)")
    assert list(ideal.y) == [1, 2]
    tta = scaling_figures.tta_figure(source.scaling(LIGHT), source.sweep_runs(LIGHT))
    assert list(tta.data[0].y) == pytest.approx([LIGHT_TTA[1], LIGHT_TTA[2]])

    known = scaling_figures.tta_figure(source.scaling(KNOWN), source.sweep_runs(KNOWN))
    main = known.data[0]
    assert list(main.y) == pytest.approx([100.0, 55.0, 31.0])
    # MLPerf's rule keeps only the middle repeat of three: no spread left
    assert list(main.error_y.array) == pytest.approx([0.0, 0.0, 0.0])
    single = next(t for t in known.data if t.name == "single runs")
    assert sorted(single.y) == sorted(v for values in KNOWN_TTA.values() for v in values)
    assert known.layout.yaxis.title.text == "time to accuracy (s)"


def test_phase_means_match_the_step_rows(source: Source, seeded_url: str) -> None:
    from sqlalchemy import func, select

    from results_db.models import Run, StepTiming

    engine = make_engine(seeded_url)
    with engine.connect() as conn:
        for sweep in (LIGHT, KNOWN, BAD):
            theirs = conn.execute(
                select(
                    Run.world_size,
                    func.avg(StepTiming.forward_s),
                    func.avg(StepTiming.communication_s),
                    func.avg(StepTiming.optimizer_s),
                )
                .join(Run, Run.id == StepTiming.run_id)
                .where(Run.sweep_id == sweep)
                .group_by(Run.world_size)
                .order_by(Run.world_size)
            ).all()
            ours = communication_queries.phase_means(conn, sweep)
            assert [r.world_size for r in ours] == [r[0] for r in theirs]
            for a, (_, forward, communication, optimizer) in zip(ours, theirs, strict=True):
                assert a.forward_s == pytest.approx(forward)
                assert a.communication_s == pytest.approx(communication)
                assert a.optimizer_s == pytest.approx(optimizer)
        assert communication_queries.phase_means(conn, "no-such-sweep") == []
    engine.dispose()
    known = communication_figures.phase_figure(source.phases(KNOWN))
    communication = next(t for t in known.data if t.name == "communication")
    assert list(communication.y) == pytest.approx([0.05, 0.05, 0.05])  # records_factory.PHASES
    assert known.layout.barmode == "stack"


def test_phase_totals_to_the_goal_match_the_step_rows(source: Source, seeded_url: str) -> None:
    from sqlalchemy import func, select

    from results_db.models import Run, StepTiming

    engine = make_engine(seeded_url)
    with engine.connect() as conn:
        per_run = conn.execute(
            select(
                Run.world_size,
                Run.id,
                func.sum(StepTiming.communication_s),
                func.sum(StepTiming.forward_s),
            )
            .join(Run, Run.id == StepTiming.run_id)
            .where(Run.sweep_id == KNOWN, Run.goal_reached.is_(True))
            .group_by(Run.world_size, Run.id)
        ).all()
        ours = {r.world_size: r for r in communication_queries.phase_totals(conn, KNOWN)}
        assert communication_queries.phase_totals(conn, BAD) == []  # no run of it reached the goal
    engine.dispose()
    for size in (1, 2, 4):
        runs = [r for r in per_run if r[0] == size]
        assert ours[size].communication_s == pytest.approx(
            sum(r[2] / size for r in runs) / len(runs)
        )
        assert ours[size].forward_s == pytest.approx(sum(r[3] / size for r in runs) / len(runs))
    to_goal = communication_figures.phase_figure(source.phase_totals(KNOWN), to_goal=True)
    assert to_goal.layout.title.text == "Time in each phase to reach the goal"
    assert len(to_goal.data) == len(PHASES) and to_goal.layout.barmode == "stack"
    ratio = communication_figures.communication_ratio_figure(
        source.scaling(KNOWN), (), source.phases(KNOWN)
    )
    versus = next(t for t in ratio.data if t.name == "communication / computation")
    means = {r.world_size: r for r in source.phases(KNOWN)}
    assert list(versus.y) == pytest.approx(
        [
            m.communication_s / (m.forward_s + m.loss_s + m.backward_s + m.optimizer_s)
            for m in means.values()
        ]
    )


def test_allreduce_curves_match_the_python_summary(source: Source, seeded_url: str) -> None:
    engine = make_engine(seeded_url)
    with engine.connect() as conn:
        ours = communication_queries.allreduce_curves(conn, ALLREDUCE)
        theirs = communication_queries.allreduce_summary(conn, ALLREDUCE)
    engine.dispose()
    assert len(ours) == len(theirs) == 26  # 13 light sizes × float32/float16
    for a, b in zip(ours, theirs, strict=True):
        assert (a.backend, a.dtype, a.world_size, a.bytes) == (
            b.backend,
            b.dtype,
            b.world_size,
            b.bytes,
        )
        assert a.p50_s == pytest.approx(b.p50_s) and a.p95_s == pytest.approx(b.p95_s)
        assert a.busbw == pytest.approx(b.busbw) and a.samples == b.samples == 10
    figure = communication_figures.allreduce_busbw_figure(ours, "float32")
    (trace,) = figure.data
    largest = max((r for r in ours if r.dtype == "float32"), key=lambda r: r.bytes)
    assert trace.x[-1] == largest.bytes == 4_000_000
    assert trace.y[-1] == pytest.approx(largest.busbw / 1e9)
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
    assert "MiB" in " ".join(figure.layout.xaxis.ticktext)


def test_costs_price_index_and_pareto_of_the_known_sweep(source: Source) -> None:
    rows = source.costs(KNOWN, "n1-standard-4", "nvidia-tesla-t4")
    hourly = 0.2092 + 0.35
    assert [r.cost_regular for r in rows] == pytest.approx(
        [hourly * 100 / 3600, 2 * hourly * 55 / 3600, 4 * hourly * 31 / 3600]
    )
    index = cost_figures.price_index_figure(rows)
    assert list(index.data[0].y) == pytest.approx([1.0, 0.605, 0.3844])
    # prices per worker: the preemptible index is the same line, drawn once and explained
    assert len(index.data) == 1 and index.data[0].name == "regular and preemptible prices"
    assert "both scale with k" in index.layout.title.text
    pareto = cost_figures.cost_time_figure(rows)
    front = next(t for t in pareto.data if t.name == "Pareto front, regular")
    # faster is dearer here: every configuration is on the front
    assert list(front.x) == pytest.approx([31.0, 55.0, 100.0])
    with pytest.raises(costs_queries.PriceMissing):
        source.costs(KNOWN, "no-such-machine", None)


def test_a_run_curve_is_bucketed_in_sql(seeded_url: str) -> None:
    engine = make_engine(seeded_url)
    run_id = f"{LIGHT}-w1-r0"
    with engine.connect() as conn:
        every = runs_queries.loss_curve(conn, run_id, points=500)
        few = runs_queries.loss_curve(conn, run_id, points=5)
        evals = runs_queries.eval_curve(conn, run_id)
    engine.dispose()
    assert len(every) == 24 and all(p.steps == 1 for p in every)  # 24 steps: one bucket each
    assert len(few) <= 5 and sum(p.steps for p in few) == 24
    assert few[-1].t_s == every[-1].t_s
    assert [p.epoch for p in evals] == [0, 1]
    assert evals[-1].metric_value == pytest.approx(76.111, rel=1e-4)


def test_sweeps_runs_and_baselines(source: Source) -> None:
    latest = {s.task: s for s in source.latest_per_task()}
    assert latest["task1a-resnet20-cifar10"].id == KNOWN
    assert latest["task0-allreduce"].id == ALLREDUCE
    assert [s.id for s in source.latest_per_task("scheduled")] == [LATEST_NIGHT]
    assert source.baseline_of(LATEST_NIGHT) == BASELINE_NIGHT
    assert source.baseline_of("nightly-01") is None
    assert source.sweep(KNOWN).world_sizes == (1, 2, 4)
    failed = source.runs(status="failed")
    assert [r.id for r in failed] == [f"{BAD}-w1-r1"] and "peer went away" in failed[0].reason
    assert {r.id for r in source.runs(search="PEER WENT")} == {f"{BAD}-w1-r1"}
    assert {r.id for r in source.runs(search="nan at epoch")} == {f"{BAD}-w2-r1"}
    assert source.runs(search="100%_") == []  # LIKE wildcards are escaped
    assert len(source.runs()) == 2 + 1 + 9 + 4 + 2 + 24


def test_nightly_trend_and_flags(source: Source) -> None:
    points = source.trend("task1a-resnet20-cifar10", nights=3)
    assert [p.sweep_id for p in points] == ["nightly-06", "nightly-07", LATEST_NIGHT]
    assert points[-1].time_to_accuracy_s == pytest.approx(110.5)  # middle of 109, 110.5, 111
    flags = source.regressions(task="task1a-resnet20-cifar10")
    assert {(f.sweep_id, f.world_size, f.metric) for f in flags} == {
        (LATEST_NIGHT, 2, "time_to_accuracy_s")
    }
    figure = trend_figures.trend_figure(points, flags, "time_to_accuracy_s")
    marked = next(t for t in figure.data if t.name == "flagged regression")
    assert list(marked.y) == pytest.approx([110.5])
    assert "+10.0 %" in marked.text[0]
    # a night judged relative to the machine's reference marks its time to accuracy too
    relative = [replace(f, metric="time_to_accuracy_per_reference") for f in flags]
    figure = trend_figures.trend_figure(points, relative, "time_to_accuracy_s")
    marked = next(t for t in figure.data if t.name == "flagged regression")
    assert list(marked.y) == pytest.approx([110.5])
    assert not any(
        t.name == "flagged regression"
        for t in trend_figures.trend_figure(points, relative, "samples_per_s").data
    )


def test_compare_applies_the_detector_rule(source: Source) -> None:
    deltas = tables.compare_rows(
        source.scaling(LATEST_NIGHT),
        source.scaling(BASELINE_NIGHT),
        source.sweep_runs(LATEST_NIGHT),
        source.sweep_runs(BASELINE_NIGHT),
    )
    (delta,) = deltas
    assert delta.tta_change == pytest.approx(110.5 / 99.9 - 1)
    # 3 against 3 runs: the smallest one-sided p is 0.05, so never significant at 0.01
    assert delta.p_value == pytest.approx(0.05)
    assert delta.verdict.startswith("slower, not significant")


def test_the_source_cannot_write(source: Source) -> None:
    with pytest.raises(DBAPIError), source.engine.begin() as conn:
        conn.execute(
            insert(Price).values(
                kind="gpu",
                name="x",
                regular_per_hour=1,
                preemptible_per_hour=1,
                source="t",
                valid_from=source.sweep(KNOWN).created_at,
            )
        )


def test_cache_follows_reingest(seeded_url: str, tmp_path: Path) -> None:
    source = Source(seeded_url)
    first = source.scaling(LIGHT)
    assert source.scaling(LIGHT) is first  # cached
    engine = make_engine(seeded_url)
    shutil.copytree(Path(__file__).with_name("data") / "sweep-light", tmp_path / "light")
    ingest_location(engine, str(tmp_path / "light"))  # replaces the runs, new ingest time
    engine.dispose()
    again = source.scaling(LIGHT)
    assert again is not first and again == first
    source.dispose()


def test_missing_and_empty_databases_say_what_to_run(tmp_path: Path) -> None:
    missing = Source(f"sqlite:///{tmp_path / 'nothing.db'}")
    with pytest.raises(DataUnavailable, match=r"quickstart\.sh"):
        missing.sweeps()
    assert not (tmp_path / "nothing.db").exists()  # read-only: nothing was created
    empty_path = tmp_path / "empty.db"
    engine = make_engine(f"sqlite:///{empty_path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE unrelated (x INTEGER)"))
    engine.dispose()
    with pytest.raises(DataUnavailable, match="scalebench db upgrade"):
        Source(f"sqlite:///{empty_path}").sweeps()
