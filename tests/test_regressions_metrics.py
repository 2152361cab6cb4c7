"""The nightly detector's steady-state step time: what it measures, and that it finds a slowdown."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_factory import PHASES, FakeRun, write_training_sweep
from sqlalchemy import Engine, select

from results_db import regressions
from results_db.ingest import ingest_location
from results_db.models import Run
from results_db.regressions.values import QUIET_WINDOW_STEPS, quiet_median, steady_seconds

STEP_S = sum(PHASES.values())  # one step of a FakeRun with the default phases, in seconds


def values(engine: Engine, sweep_id: str, metric: str) -> dict[int, list[float]]:
    with engine.connect() as conn:
        return dict(
            regressions.metric_values(conn, [sweep_id], metric, regressions.Comparable("host"))
        )


def test_steady_step_time_leaves_the_warm_up_out(engine: Engine, tmp_path: Path) -> None:
    # Two seeds of the same code: one needs 2 epochs of 8 steps, the other 3, and the warm-up
    # steps take twice as long. Whole-run throughput differs; the steady step does not.
    slow = {"steps_per_epoch": 8, "slow_first_steps": regressions.WARMUP_STEPS, "slow_factor": 2.0}
    runs = [
        FakeRun(1, repeat=0, epochs=2, time_to_accuracy_s=60.0, **slow),
        FakeRun(1, repeat=1, epochs=3, time_to_accuracy_s=90.0, **slow),
    ]
    write_training_sweep(tmp_path, "two-seeds", runs)
    ingest_location(engine, str(tmp_path))
    throughput = values(engine, "two-seeds", "samples_per_s")[1]
    assert throughput[1] > throughput[0] * 1.05
    assert values(engine, "two-seeds", "steady_step_s") == {1: [pytest.approx(STEP_S)] * 2}


def test_steady_step_time_is_the_slowest_ranks(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path, "two-ranks", [FakeRun(2, rank_factor=0.5)])
    ingest_location(engine, str(tmp_path))
    [[seconds]] = values(engine, "two-ranks", "steady_step_s").values()
    assert seconds == pytest.approx(STEP_S * 1.5)


def test_a_steps_communication_is_the_least_any_rank_spent_in_the_collective(
    engine: Engine, tmp_path: Path
) -> None:
    """The rank that reached the all-reduce last waited for nobody: its seconds there are the
    collective's own. A rank that came earlier also waited; that wait stays in the step, and
    the step's other phases are its slowest rank's."""
    write_training_sweep(tmp_path, "two-ranks", [FakeRun(2, rank_factor=0.5)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        [run_id] = conn.execute(select(Run.id)).scalars()
        seconds = steady_seconds(conn, run_id)
    compute_s = sum(PHASES[p] for p in ("forward", "loss", "backward", "optimizer"))
    assert seconds["communication_s"] == pytest.approx(PHASES["communication"])  # rank 0's
    assert seconds["compute_s"] == pytest.approx(compute_s * 1.5)  # rank 1's
    assert seconds["data_s"] == pytest.approx(PHASES["data"] * 1.5)
    assert seconds["steady_step_s"] == pytest.approx(STEP_S * 1.5)


def test_a_run_shorter_than_its_warm_up_keeps_its_steps(engine: Engine, tmp_path: Path) -> None:
    short = FakeRun(1, epochs=1, steps_per_epoch=4, slow_first_steps=4, slow_factor=2.0)
    write_training_sweep(tmp_path, "one-epoch", [short])
    ingest_location(engine, str(tmp_path))
    assert values(engine, "one-epoch", "steady_step_s") == {1: [pytest.approx(2 * STEP_S)]}


def test_a_stretch_that_other_work_slowed_leaves_the_steady_step_as_it_was() -> None:
    # 40 windows of steps of 1 ms; for 60 % of the run the machine was 1.7x slower, as a
    # virtual machine's neighbours make it for seconds at a time: the median moves with
    # them, the quietest stretch does not.
    quiet, busy = [0.001] * (QUIET_WINDOW_STEPS * 16), [0.0017] * (QUIET_WINDOW_STEPS * 24)
    steps = quiet[: len(quiet) // 2] + busy + quiet[len(quiet) // 2 :]
    assert statistics.median(steps) == pytest.approx(0.0017)
    assert quiet_median(steps) == pytest.approx(0.001)
    # slower code slows every stretch: seen whole
    assert quiet_median([s * 1.03 for s in steps]) == pytest.approx(0.00103)


def test_a_run_of_fewer_than_two_stretches_gives_its_median() -> None:
    steps = [0.002, 0.001, 0.003] * (QUIET_WINDOW_STEPS // 2)
    assert quiet_median(steps) == statistics.median(steps)
    # the last, shorter stretch joins the one before it: no window of a few steps decides
    assert quiet_median([0.001] * QUIET_WINDOW_STEPS + [0.002] * (QUIET_WINDOW_STEPS + 3)) == 0.001
    with pytest.raises(ValueError, match="no values"):
        quiet_median([])


@given(
    st.lists(st.floats(min_value=1e-5, max_value=1.0), min_size=1, max_size=400),
    st.floats(min_value=0.1, max_value=10.0),
)
def test_the_quietest_stretch_is_never_above_the_median_and_scales_with_the_steps(
    steps: list[float], factor: float
) -> None:
    assert quiet_median(steps) <= statistics.median(steps) * (1 + 1e-12)
    assert quiet_median([s * factor for s in steps]) == pytest.approx(factor * quiet_median(steps))


def night(
    root: Path, number: int, factors: list[float], machine_reference_s: float | None = None
) -> str:
    """A scheduled night of one run per factor, its steps ``factor`` times the default; its
    runs timed the machine's reference at ``machine_reference_s`` (None: not timed)."""
    sweep_id = f"night-{number:02d}"
    runs = [
        FakeRun(
            1,
            repeat=repeat,
            phases={name: seconds * factor for name, seconds in PHASES.items()},
            slow_first_steps=1,
            slow_factor=1.3,
            machine_reference_s=machine_reference_s,
        )
        for repeat, factor in enumerate(factors)
    ]
    created_at = f"2026-11-{number:02d}T02:00:00+00:00"
    write_training_sweep(root, sweep_id, runs, trigger="scheduled", created_at=created_at)
    return sweep_id


BASELINE = [
    [1.00, 1.02, 0.98],
    [0.99, 1.01, 1.03],
    [1.02, 0.97, 1.00],
    [1.01, 0.99, 1.02],
    [0.98, 1.00, 1.01],
    [1.03, 0.99, 0.98],
    [1.00, 1.01, 0.99],
]


@pytest.mark.parametrize(("factors", "flagged"), [([1.10, 1.12, 1.11], True), ([1.0] * 3, False)])
def test_slower_steps_are_flagged_by_the_nightly(
    engine: Engine, tmp_path: Path, factors: list[float], flagged: bool
) -> None:
    for number, baseline in enumerate(BASELINE, start=1):
        night(tmp_path, number, baseline)
    latest = night(tmp_path, 8, factors)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        findings = regressions.detect(conn, latest)
    # runs stored before the machine's reference was timed: judged in seconds
    [finding] = [f for f in findings if f.metric == "steady_step_s"]
    assert finding.flagged is flagged
    assert finding.baseline_runs == 21 and finding.latest_runs == 3
    if flagged:
        assert finding.change == pytest.approx(0.11, abs=0.01)


REFERENCE_S = 0.00115  # the reference workload's seconds per sample on the baseline's machine


@pytest.mark.parametrize(
    ("step_factor", "reference_factor", "flagged"),
    [
        (1.30, 1.30, False),  # the host got 30 % slower: steps and reference alike
        (1.11, 1.00, True),  # the code got 11 % slower on an unchanged host
        (1.11 * 0.75, 0.75, True),  # the same code on a host a quarter faster
    ],
)
def test_step_time_is_judged_relative_to_the_machine(
    engine: Engine, tmp_path: Path, step_factor: float, reference_factor: float, flagged: bool
) -> None:
    for number, baseline in enumerate(BASELINE, start=1):
        night(tmp_path, number, baseline, REFERENCE_S)
    factors = [step_factor * f for f in (1.0, 1.01, 0.99)]
    latest = night(tmp_path, 8, factors, REFERENCE_S * reference_factor)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        findings = regressions.detect(conn, latest)
        in_seconds = regressions.metric_values(
            conn, [latest], "steady_step_s", regressions.Comparable("host")
        )
    [finding] = [f for f in findings if f.metric == "steady_step_per_reference"]
    assert finding.flagged is flagged
    assert finding.baseline_runs == 21 and finding.latest_runs == 3
    assert finding.baseline_mean == pytest.approx(STEP_S / REFERENCE_S, rel=0.02)
    # in seconds the first case is 30 % worse and the third 17 % better: judged by the
    # machine, they would be a false alarm and a missed regression
    assert statistics.fmean(in_seconds[1]) == pytest.approx(STEP_S * step_factor, rel=0.02)
    assert not [f for f in findings if f.metric == "steady_step_s"]


def test_a_night_without_the_reference_is_judged_in_seconds(engine: Engine, tmp_path: Path) -> None:
    # A latest night whose workers did not time the reference (an older worker image) is
    # judged in seconds, not reported as a night with no successful run.
    for number, baseline in enumerate(BASELINE, start=1):
        night(tmp_path, number, baseline, REFERENCE_S)
    latest = night(tmp_path, 8, [1.0, 1.01, 0.99])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        findings = regressions.detect(conn, latest)
    steps = [f for f in findings if f.metric.startswith("steady_step")]
    assert [(f.metric, f.flagged, f.latest_runs) for f in steps] == [("steady_step_s", False, 3)]


def test_a_runs_reference_is_the_median_of_its_ranks(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path, "two-ranks", [FakeRun(2, machine_reference_s=REFERENCE_S)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        [stored] = conn.execute(select(Run.machine_reference_s)).scalars()
    assert stored == pytest.approx(REFERENCE_S * 1.05)  # ranks: 1.0 and 1.1 times it
