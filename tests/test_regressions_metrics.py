"""The nightly detector's steady-state step time: what it measures, and that it finds a slowdown."""

from __future__ import annotations

from pathlib import Path

import pytest
from records_factory import PHASES, FakeRun, write_training_sweep
from sqlalchemy import Engine

from results_db import regressions
from results_db.ingest import ingest_location

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
    assert values(engine, "two-seeds", "steady_step_s") == {1: [STEP_S, STEP_S]}


def test_steady_step_time_is_the_slowest_ranks(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path, "two-ranks", [FakeRun(2, rank_factor=0.5)])
    ingest_location(engine, str(tmp_path))
    [[seconds]] = values(engine, "two-ranks", "steady_step_s").values()
    assert seconds == pytest.approx(STEP_S * 1.5)


def test_a_run_shorter_than_its_warm_up_keeps_its_steps(engine: Engine, tmp_path: Path) -> None:
    short = FakeRun(1, epochs=1, steps_per_epoch=4, slow_first_steps=4, slow_factor=2.0)
    write_training_sweep(tmp_path, "one-epoch", [short])
    ingest_location(engine, str(tmp_path))
    assert values(engine, "one-epoch", "steady_step_s") == {1: [pytest.approx(2 * STEP_S)]}


def night(root: Path, number: int, factors: list[float]) -> str:
    """A scheduled night of one run per factor, its steps ``factor`` times the default."""
    sweep_id = f"night-{number:02d}"
    runs = [
        FakeRun(
            1,
            repeat=repeat,
            phases={name: seconds * factor for name, seconds in PHASES.items()},
            slow_first_steps=1,
            slow_factor=1.3,
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
    [finding] = [f for f in findings if f.metric == "steady_step_s"]
    assert finding.flagged is flagged
    assert finding.baseline_runs == 21 and finding.latest_runs == 3
    if flagged:
        assert finding.change == pytest.approx(0.11, abs=0.01)
