"""The dashboard's messages for what it cannot show name the cause, from what the queries
return: no runs at all, runs that failed, diverged or were cancelled, runs that never reached
the goal, contended runs left out, a sweep still running, a task without that measure.
Every choice is a pure function (``dash_app.reasons``), read here without a browser, and the
figures and tables that say them are checked on hand-made rows."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from dash_app import components, reasons, tables
from dash_app.pages.communication import figures as communication_figures
from dash_app.pages.compare import figures as compare_figures
from dash_app.pages.cost import figures as cost_figures
from dash_app.pages.run import figures as run_figures
from dash_app.pages.scaling import figures as scaling_figures
from dash_app.pages.trend import figures as trend_figures
from results_db.analytics import scaling_rows
from results_db.queries.communication import AllReduceRow
from results_db.queries.runs import RunInfo
from scalebench.statuses import RUN_STATUSES

CONTENDED = "were contended (other processes took their cores) and are left out"


def run(
    size: int,
    tta: float | None = 50.0,
    status: str = "succeeded",
    contended: bool = False,
    repeat: int = 0,
    steps: int = 40,
    reason: str = "",
    network: str = "host",
) -> RunInfo:
    """A run at ``size`` workers; ``tta`` None: it did not reach the goal."""
    return RunInfo(
        id=f"s-w{size}-r{repeat}",
        sweep_id="s",
        task="task1a-resnet20-cifar10",
        world_size=size,
        repeat=repeat,
        backend="gloo",
        device="cpu",
        precision="fp32",
        compile="off",
        compiled=False,
        compile_s=0.0,
        recompilations=None,
        variant="sync",
        light=True,
        status=status,
        reason=reason,
        started_at=None,
        ended_at=None,
        goal_reached=tta is not None,
        goal_metric="top1_accuracy",
        goal_target=70.0,
        time_to_accuracy_s=tta,
        time_to_accuracy_without_eval_s=None if tta is None else tta * 0.9,
        eval_s=1.0,
        compute_s=10.0,
        communication_s=1.0,
        step_s=12.0,
        communication_ratio=None if not steps else 0.1,
        epochs=3,
        steps=steps,
        samples_per_s=None if tta is None else 1000.0 / tta,
        quarantined_lines=0,
        network=network,
        contended=contended,
    )


def annotation(figure: object) -> str:
    """The message of an empty figure."""
    assert not figure.data  # type: ignore[attr-defined]
    return figure.layout.annotations[0].text  # type: ignore[attr-defined]


# -- what became of runs -------------------------------------------------------------------


def test_every_run_status_has_its_words() -> None:
    """A status added to scalebench.statuses must be given its words here."""
    missing = [s for s in RUN_STATUSES if s != "succeeded" and s not in reasons.FATES]
    assert missing == []


def test_runs_are_said_as_one_fate_or_counted_by_fate() -> None:
    assert reasons.runs_phrase([], " at 4 workers") == "no runs at 4 workers"
    assert reasons.runs_phrase([run(2, None, "failed")]) == "its run failed"
    assert reasons.runs_phrase([run(2, None, "cancelled")] * 2) == "its 2 runs were cancelled"
    mixed = [run(2, None, "diverged"), run(2, None), run(2, None, "failed"), run(2, 5.0)]
    assert reasons.runs_phrase(mixed, " at 2 workers") == (
        "of its 4 runs at 2 workers, 1 failed, 1 diverged, 1 ended without reaching the goal "
        "and 1 reached the goal"
    )
    # without the goal (step timings): a succeeded run is one that succeeded
    assert reasons.runs_phrase([run(1, None)], goal=False) == "its run succeeded"


def test_a_time_to_accuracy_missing_by_mlperfs_rule_says_how_many_it_needs() -> None:
    three = [run(1, 50.0), run(1, None), run(1, None, "failed")]
    assert reasons.no_time_to_accuracy(three, " at 1 worker") == (
        "of its 3 runs at 1 worker, 1 failed, 1 ended without reaching the goal and 1 "
        "reached the goal: MLPerf's rule needs 2 of 3"
    )
    assert reasons.needed_repeats(2) == 2 and reasons.needed_repeats(5) == 4


# -- Compare -------------------------------------------------------------------------------


def test_compare_says_contended_runs_are_left_out_and_how_many() -> None:
    runs = [run(2, 60.0, contended=True, repeat=i) for i in range(3)]
    assert reasons.compare_gap("A", runs, 2) == f"A: its 3 runs at 2 workers {CONTENDED}"
    assert reasons.compare_gap("A", runs[:1], 2) == (
        "A: its run at 2 workers was contended (other processes took its cores) and is left out"
    )


AT_TWO = "its 3 runs at 2 workers"


@pytest.mark.parametrize(
    ("a_runs", "verdict"),
    [
        ([run(2, 60.0, contended=True, repeat=i) for i in range(3)], f"{AT_TWO} {CONTENDED}"),
        (
            [run(2, None, "failed"), run(2, None, "diverged", repeat=1)],
            "of its 2 runs at 2 workers, 1 failed and 1 diverged",
        ),
        (
            [run(2, None, "cancelled", repeat=i) for i in range(2)],
            "its 2 runs at 2 workers were cancelled",
        ),
        ([run(2, None, repeat=i) for i in range(3)], f"{AT_TWO} ended without reaching the goal"),
        ([run(2, None, "running", repeat=i) for i in range(3)], f"{AT_TWO} are still running"),
    ],
    ids=["contended", "failed-diverged", "cancelled", "never-reached", "running"],
)
def test_the_compare_table_says_why_a_side_has_no_time_to_test(
    a_runs: list[RunInfo], verdict: str
) -> None:
    b_runs = [run(k, 50.0, repeat=i) for k in (1, 2) for i in range(3)]
    a_all = [run(1, 50.0, repeat=i) for i in range(3)] + a_runs
    deltas = tables.compare_rows(scaling_rows(a_all), scaling_rows(b_runs), a_all, b_runs)
    at_two = next(d for d in deltas if d.world_size == 2)
    assert at_two.verdict == f"A: {verdict}"
    assert at_two.p_value is None


def test_the_compare_table_names_a_worker_count_a_side_did_not_run() -> None:
    a_runs = [run(1, 50.0, repeat=i) for i in range(3)]
    b_runs = [run(k, 50.0, repeat=i) for k in (1, 4) for i in range(3)]
    deltas = tables.compare_rows(scaling_rows(a_runs), scaling_rows(b_runs), a_runs, b_runs)
    assert [d.verdict for d in deltas] == ["within 5%", "A: no runs at 4 workers"]
    # both sides without a time: both said, A first
    a_bad = [run(1, None, "failed")]
    b_bad = [run(1, None, "running")]
    (delta,) = tables.compare_rows(scaling_rows(a_bad), scaling_rows(b_bad), a_bad, b_bad)
    assert delta.verdict == "A: its run at 1 worker failed; B: its run at 1 worker is still running"


def test_the_compare_figure_says_why_neither_sweep_has_a_time() -> None:
    a_runs, b_runs = [run(1, None, "failed")], [run(1, None, "diverged"), run(2, None)]
    figure = compare_figures.compare_figure(
        scaling_rows(a_runs), scaling_rows(b_runs), "a", "b", a_runs, b_runs
    )
    assert annotation(figure) == (
        "No time to accuracy in either sweep. A: its run failed; B: of its 2 runs, 1 diverged "
        "and 1 ended without reaching the goal."
    )
    assert compare_figures.neither_has_time([], []) == (
        "No time to accuracy in either sweep. A: no runs; B: no runs."
    )


# -- Scaling and Cost ----------------------------------------------------------------------


def test_the_scaling_figures_say_why_they_have_no_time() -> None:
    bad = [run(1, None, "failed", reason="peer went away"), run(2, None, "diverged")]
    rows = scaling_rows(bad)
    assert annotation(scaling_figures.tta_figure(rows, bad)) == (
        "No time to accuracy in this sweep: of its 2 runs, 1 failed and 1 diverged."
    )
    running = [run(1, None, "running"), run(2, None, "planned")]
    assert annotation(scaling_figures.tta_figure(scaling_rows(running), running)) == (
        "No time to accuracy in this sweep yet: of its 2 runs, 1 is still running and 1 has "
        "not started yet."
    )
    assert annotation(scaling_figures.tta_figure([])) == (
        "No time to accuracy: this sweep has no runs."
    )
    never = [run(1, None), run(2, None)]
    assert annotation(scaling_figures.tta_figure(scaling_rows(never))) == (
        "No time to accuracy in this sweep: none of its 2 runs reached the goal."
    )
    speedup = annotation(scaling_figures.speedup_figure(rows, runs=bad))
    assert (
        speedup
        == "No speedup without the time to accuracy of 1 worker: its run at 1 worker failed."
    )
    efficiency = annotation(scaling_figures.efficiency_figure(rows, runs=bad))
    assert efficiency.startswith("No efficiency without the time to accuracy of 1 worker: its")


@pytest.mark.parametrize(
    ("runs", "why"),
    [
        ([], "this sweep has no runs."),
        ([run(2), run(4)], "this sweep ran no 1-worker group (it ran 2, 4 workers)."),
        ([run(1, None, "failed"), run(2)], "its run at 1 worker failed."),
        (
            [run(1, 50.0, contended=True), run(1, None, repeat=1), run(1, None, "timed_out", 2)],
            "of its 3 runs at 1 worker, 1 timed out, 1 ended without reaching the goal and 1 "
            "reached the goal: MLPerf's rule needs 2 of 3.",
        ),
        ([run(1, None, "running")], "its run at 1 worker is still running."),
    ],
    ids=["none", "no-one-worker", "failed", "too-few", "running"],
)
def test_costs_speedup_and_efficiency_say_why_one_worker_gives_no_time(
    runs: list[RunInfo], why: str
) -> None:
    message = reasons.no_baseline("costs", scaling_rows(runs), runs)
    assert message == f"No costs without the time to accuracy of 1 worker: {why}"
    for figure in (
        cost_figures.cost_figure([], why=message),
        cost_figures.price_index_figure([], why=message),
        cost_figures.cost_time_figure([], why=message),
    ):
        assert annotation(figure) == message


def test_without_runs_the_one_worker_row_says_how_many_reached_the_goal() -> None:
    rows = scaling_rows([SimpleNamespace(**vars(run(1, None)))] * 2)
    assert reasons.no_baseline("speedup", rows) == (
        "No speedup without the time to accuracy of 1 worker: 0 of its 2 runs at 1 worker "
        "reached the goal."
    )


# -- Communication -------------------------------------------------------------------------


def test_the_communication_figures_say_why_they_have_no_steps_or_samples() -> None:
    failed = [run(1, None, "failed", steps=0), run(2, None, "diverged", steps=0)]
    assert annotation(communication_figures.communication_ratio_figure([], failed)) == (
        "No step timings in this sweep: of its 2 runs, 1 failed and 1 diverged before "
        "recording a step."
    )
    running = [run(1, None, "running", steps=0)]
    assert annotation(communication_figures.phase_figure([], runs=running)) == (
        "No step timings in this sweep: its run is still running before recording a step."
    )
    assert reasons.no_step_timings([]) == "No step timings: this sweep has no runs."
    never = [run(1, None), run(2, None)]
    assert annotation(communication_figures.phase_figure([], True, never)) == (
        "No run of this sweep reached its goal: its 2 runs ended without reaching the goal."
    )
    assert reasons.no_phase_totals([]) == "No time to the goal: this sweep has no runs."
    float32 = AllReduceRow("gloo", "float32", 2, 1024, 1e-4, 1e-4, 2e-4, 1e7, 1e7, 5)
    assert annotation(communication_figures.allreduce_latency_figure([float32], "float16")) == (
        "No float16 samples: the chosen sweeps measured float32 only; choose another dtype."
    )
    assert annotation(communication_figures.allreduce_busbw_figure([], "all")) == (
        "No all-reduce samples: the chosen sweeps have no runs."
    )
    cancelled = [run(2, None, "cancelled", steps=0)]
    assert annotation(communication_figures.allreduce_busbw_figure([], "all", cancelled)) == (
        "No all-reduce samples: its run was cancelled."
    )


def test_a_missing_sweep_is_named_as_missing_not_as_unchosen() -> None:
    assert reasons.no_sweep("all-reduce", [], [], 0) == "No all-reduce sweep in the database yet."
    assert reasons.no_sweep("all-reduce", [], [], 3) == "No all-reduce sweep chosen."
    assert reasons.no_sweep("training", ["gone"], [], 3) == (
        "There is no training sweep 'gone' in the database."
    )
    assert components.no_allreduce_sweep(0).startswith("No all-reduce sweep in the database yet.")


# -- a run, the nightly trend ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "why"),
    [
        ("planned", "", "No training step: the run has not started yet."),
        (
            "skipped",
            "",
            "No training step: the run was never started (the sweep was stopped first).",
        ),
        (
            "running",
            "",
            "No training step recorded yet: the run is still running (the page refreshes).",
        ),
        (
            "failed",
            "peer went away",
            "No training step recorded: the run failed before recording one (peer went away).",
        ),
        ("succeeded", "", "No training step recorded by this run."),
    ],
)
def test_a_run_says_why_it_has_no_steps(status: str, reason: str, why: str) -> None:
    one = run(1, None, status, steps=0, reason=reason)
    assert annotation(run_figures.loss_figure([], run=one)) == why


def test_a_run_of_a_task_without_a_metric_says_so() -> None:
    one = replace(run(1, None, "running", steps=0), goal_metric=None)
    assert annotation(run_figures.metric_figure([], None, None, run=one)) == (
        "No evaluation: this run's task has no validation metric."
    )
    assert reasons.run_without(run(1, None, "diverged"), "event") == (
        "No event recorded: the run diverged before recording one."
    )


def point(runs: int, succeeded: int, night: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        sweep_id=f"nightly-{night}",
        runs=runs,
        succeeded=succeeded,
        time_to_accuracy_s=None,
        samples_per_s=None,
    )


def test_the_trend_says_why_it_has_no_value() -> None:
    metric = "time_to_accuracy_s"
    assert annotation(trend_figures.trend_figure([], [], metric)) == (
        "No nightly (scheduled) sweep of this task in the nights shown."
    )
    failed = [point(3, 0, 1), point(3, 0, 2)]
    assert reasons.no_trend(failed, metric) == (
        "No time to accuracy: none of the nightly runs succeeded (2 night(s), 6 run(s))."
    )
    assert reasons.no_trend([point(3, 3)], metric) == (
        "No time to accuracy: too few of the nightly runs reached the goal (3 of 3 succeeded "
        "over 1 night(s))."
    )
    assert reasons.no_trend([point(3, 3)], "samples_per_s") == (
        "No throughput: this task's runs record no throughput in samples/s (1 night(s), 3 run(s))."
    )


def test_a_projection_of_a_sweep_without_a_successful_run_says_what_became_of_them() -> None:
    missing = ["sweep bad-runs has no successful run to project from"]
    bad = [run(1, None, "failed"), run(2, None, "diverged")]
    assert reasons.projection_gap(missing, bad, projected=False) == (
        "sweep bad-runs has no successful run to project from: of its 2 runs, 1 failed and 1 "
        "diverged."
    )
    assert reasons.projection_gap([], [], projected=False) == (
        "Nothing to project: this sweep has no runs."
    )
    priced = ["no price in force for n1-standard-4: costs left out"]
    assert reasons.projection_gap(priced, [run(1)], projected=True) == priced[0]
