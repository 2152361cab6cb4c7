"""The paired nightly: tonight's stack beside a pinned reference, judged over the whole history.

The statistics are pure functions, checked on series drawn with known steps; the store and
the triage on both databases; the pin on the command line; a whole paired night under
``dag.test()`` with real runs of both arms.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from records_factory import PHASES, FakeRun, write_training_sweep
from sqlalchemy import select

from results_db.regressions.paired_findings import (
    PLATFORM,
    STACK,
    changes,
    comparable_nights,
    identity_diff,
    judge_series,
    paired_series,
)
from results_db.regressions.shifts import (
    PAIRED_RULE,
    PULL_IN_ROUNDS,
    judge_arm,
    level_shift,
    pull_in,
)
from results_db.regressions.triage import FIXED, set_state, store_changes
from scalebench import pairing
from scalebench.nightly import NightlySettings


def nights_of(levels: list[float], rng: random.Random, sd: float, rounds: int = 10) -> list:
    """Nights of ``rounds`` log values each around the given levels."""
    return [[level + rng.gauss(0, sd) for _ in range(rounds)] for level in levels]


# -- the test of a level -------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.floats(-3, 3), min_size=2, max_size=8), min_size=2, max_size=6),
    st.lists(st.lists(st.floats(-3, 3), min_size=1, max_size=8), min_size=1, max_size=3),
    st.floats(-2, 2),
)
def test_a_shift_moves_with_the_recent_nights_and_its_interval_holds_its_size(
    base: list[list[float]], recent: list[list[float]], offset: float
) -> None:
    shift = level_shift(base, recent)
    assert shift.low <= shift.size <= shift.high
    assert 0 <= shift.p_value <= 1
    moved = level_shift(base, [[x + offset for x in night] for night in recent])
    assert math.isclose(moved.size, shift.size * math.exp(offset), rel_tol=1e-6, abs_tol=1e-12)
    if offset > 0:  # higher recent nights are never less significant
        assert moved.p_value <= shift.p_value + 1e-9


def test_a_flat_series_is_rarely_flagged_and_a_step_is_found_on_its_first_night() -> None:
    flagged_flat = 0
    found_step = 0
    for seed in range(100):
        rng = random.Random(seed)
        flat = nights_of([0.0] * 12, rng, sd=0.05)
        flagged_flat += judge_arm(flat, "ratio").flagged
        step = nights_of([0.0] * 10 + [math.log(1.06)] * 2, rng, sd=0.05)
        verdict = judge_arm(step, "ratio")
        found_step += verdict.flagged and verdict.first_night == 10
    assert flagged_flat <= 5  # the rule's 1 %, with room for 100 draws
    assert found_step >= 80


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(-3, 3), min_size=0, max_size=14), min_size=1, max_size=6),
    st.floats(0, 5),
    st.integers(0, 5),
    st.floats(-2, 2),
)
# rounds that agree but for a tiny float: a spread that rounding leaves is none
@example([[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.3688697322024066e-244]], 1.0, 0, 1.0)
def test_pulling_in_moves_only_the_rounds_far_from_their_night(
    nights: list[list[float]], outlier_sd: float, moved: int, offset: float
) -> None:
    pulled = pull_in(nights, outlier_sd)
    assert [len(night) for night in pulled] == [len(night) for night in nights]
    for night, tamed in zip(nights, pulled, strict=True):
        if len(night) >= PULL_IN_ROUNDS:  # its median stays, each round on its side of it
            centre = statistics.median(night)
            assert math.isclose(statistics.median(tamed), centre, abs_tol=1e-9)
            for x, y in zip(night, tamed, strict=True):
                assert (x - centre) * (y - centre) >= 0 and abs(y - centre) <= abs(x - centre)
        else:
            assert tamed == night
    # a whole night that moved is moved alike, pulled in or not
    k = moved % len(nights)
    shifted = [[x + offset for x in n] if i == k else n for i, n in enumerate(nights)]
    again = pull_in(shifted, outlier_sd)
    for x, y in zip(pulled[k], again[k], strict=True):
        assert math.isclose(y, x + offset, abs_tol=1e-9)
    assert pull_in(nights, 0.0) == nights


def test_a_round_gone_wrong_hides_no_step() -> None:
    """Half the nights hold one round 35 % off (a neighbour's burst of load on one arm):
    pulled in, a 3 % step is still found on its first night, and a flat series is not
    flagged; left as they are, the wild rounds hide most steps."""

    def wild_nights(levels: list[float], rng: random.Random) -> list[list[float]]:
        found = nights_of(levels, rng, sd=0.02, rounds=20)
        for night in found:
            if rng.random() < 0.5:
                night[rng.randrange(len(night))] += rng.choice([0.3, -0.3])
        return found

    left = replace(PAIRED_RULE, outlier_sd=0.0)
    found = found_left = flagged_flat = 0
    for seed in range(100):
        rng = random.Random(seed)
        step = wild_nights([0.0] * 10 + [math.log(1.03)], rng)
        found += (v := judge_arm(step, "ratio")).flagged and v.first_night == 10
        found_left += (v := judge_arm(step, "ratio", left)).flagged and v.first_night == 10
        flagged_flat += judge_arm(wild_nights([0.0] * 12, rng), "ratio").flagged
    assert found >= 85
    assert found_left <= found - 30
    assert flagged_flat <= 3


def test_the_nights_drift_makes_the_night_the_unit() -> None:
    """Nights whose means spread far more than their rounds say: a night off by that much
    is not a change (a test on rounds alone would flag most of them)."""
    flagged = 0
    for seed in range(100):
        rng = random.Random(seed)
        levels = [rng.gauss(0, 0.05) for _ in range(12)]
        flagged += judge_arm(nights_of(levels, rng, sd=0.005), "reference").flagged
    assert flagged <= 8


def test_too_short_a_series_is_not_judged() -> None:
    verdict = judge_arm(
        nights_of([0.0] * PAIRED_RULE.min_baseline_nights, random.Random(1), 0.05), "ratio"
    )
    assert verdict.shift is None and not verdict.flagged
    assert PAIRED_RULE.nights_needed() == PAIRED_RULE.min_baseline_nights + 1


def test_a_change_weeks_ago_is_not_tonights() -> None:
    rng = random.Random(3)
    series = nights_of([0.0] * 8 + [math.log(1.2)] * 10, rng, sd=0.03)
    verdict = judge_arm(series, "ratio")
    assert not verdict.flagged
    assert 8 in verdict.segment_starts  # the history shows where it moved


# -- from nights to findings ---------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    stack: str
    world_size: int
    network: str
    repeat: int
    seconds: dict[str, float]


@dataclass(frozen=True)
class Night:
    sweep_id: str
    arms: list[Arm]
    reference: dict = field(default_factory=lambda: {"python": "/ref/bin/python"})


def paired_history(
    nights: int, tonight_slower: dict[int, dict[str, float]], platform_slower: dict[int, float]
) -> list[Night]:
    """Nights of 8 rounds at one worker: phases of 10 ms compute and 2 ms data; from night
    ``n`` on, tonight's arm's phases slowed by ``tonight_slower[n]``, both arms' steps by
    ``platform_slower[n]``."""
    rng = random.Random(7)
    history = []
    tonight_factor: dict[str, float] = {}
    platform = 1.0
    for n in range(nights):
        tonight_factor.update(tonight_slower.get(n, {}))
        platform = platform_slower.get(n, platform)
        drift = math.exp(rng.gauss(0, 0.03))  # the machine tonight, both arms alike
        arms = []
        for r in range(8):
            for stack in ("tonight", "reference"):
                own = tonight_factor if stack == "tonight" else {}
                compute = 0.010 * own.get("compute_s", 1.0) * math.exp(rng.gauss(0, 0.01))
                data = 0.002 * own.get("data_s", 1.0) * math.exp(rng.gauss(0, 0.01))
                scale = drift * platform
                arms.append(
                    Arm(
                        stack,
                        1,
                        "host",
                        r,
                        {
                            "compute_s": compute * scale,
                            "data_s": data * scale,
                            "steady_step_s": (compute + data) * scale,
                        },
                    )
                )
        history.append(Night(f"night-{n:02d}", arms))
    return history


def test_a_stack_change_is_one_finding_with_its_phase_and_the_stack_to_blame() -> None:
    history = paired_history(12, {10: {"compute_s": 1.05}}, {})
    series = paired_series("task2a", comparable_nights(history), "tonight", "reference")
    found = changes(judge_series(series))
    assert len(found) == 1
    (change,) = found
    assert change.first_sweep_id == "night-10"
    assert change.attribution == STACK
    assert change.phases[0] == "compute"
    assert change.headline.key.metric == "steady_step_s"
    assert 1.02 < change.headline.size < 1.07
    assert {m.key.metric for m in change.moved} >= {"steady_step_s", "compute_s"}


def test_a_change_whose_phases_pass_no_test_names_those_that_rose_with_it() -> None:
    """The steady step at one worker flagged on night 9 and no phase: the finding names the
    phases whose series rose from that night on, in the same arm and at the same worker
    count, the surest first; not one that got faster, rose from an earlier night or moved at
    another worker count. A phase flagged in the other arm comes before any of those."""
    from results_db.regressions.paired_findings import SeriesJudgement, SeriesKey
    from results_db.regressions.shifts import RATIO, REFERENCE, ArmVerdict, PairedNight, Shift

    nights = [PairedNight(f"night-{i}", (0.0,), (0.0,)) for i in range(10)]

    def verdict(arm: str, flagged: bool, size: float, p: float, recent: int = 1) -> ArmVerdict:
        shift = Shift(size, size * 0.99, size * 1.01, p, recent, 7, 8 * recent, 56)
        return ArmVerdict(arm, shift, flagged, 10 - recent if flagged else None, (0,))

    quiet = verdict(REFERENCE, False, 1.0, 0.5)

    def series(workers: int, metric: str, ratio: ArmVerdict, reference: ArmVerdict = quiet):
        return SeriesJudgement(SeriesKey("t", "host", workers, metric), nights, ratio, reference)

    judged = [
        series(1, "steady_step_s", verdict(RATIO, True, 1.03, 1e-4)),
        series(1, "compute_s", verdict(RATIO, False, 1.04, 0.004)),
        series(1, "data_s", verdict(RATIO, False, 1.01, 0.3)),
        series(1, "eval_s", verdict(RATIO, False, 0.98, 0.01)),
        series(1, "communication_s", verdict(RATIO, False, 1.05, 0.001, recent=2)),
        series(2, "compute_s", verdict(RATIO, False, 1.2, 1e-3)),
    ]
    (change,) = changes(judged)
    assert (change.first_sweep_id, change.attribution) == ("night-9", STACK)
    assert change.phases == ["compute", "data"]

    # the reference arm's time to accuracy flagged too (the platform), no phase of its own:
    # the ratio's flagged data phase is named, not the reference arm's leaning ones
    judged[0] = series(1, "steady_step_s", verdict(RATIO, True, 1.03, 1e-4))
    judged.append(
        series(1, "time_to_accuracy_s", quiet, verdict(REFERENCE, True, 1.08, 1e-3)),
    )
    judged[2] = series(1, "data_s", verdict(RATIO, True, 1.06, 1e-5))
    (change,) = changes(judged)
    assert change.attribution == PLATFORM
    assert change.phases == ["data"]


def test_a_change_no_phase_explains_names_the_step_phases_that_added_most_seconds() -> None:
    """Light Task 1a's time to accuracy flagged alone at one worker, no phase flagged and none
    whose window starts on that night (their best windows begin a night earlier): the finding
    names the step's phases that rose there, the most seconds added to a step first (a 0.45 s
    compute 3 % up before a 3.5 ms data phase 10 % up, though the data's p is smaller); not
    the evaluation, a phase that fell, or one at another worker count."""
    from results_db.regressions.paired_findings import SeriesJudgement, SeriesKey
    from results_db.regressions.shifts import RATIO, REFERENCE, ArmVerdict, PairedNight, Shift

    def nights(seconds: float) -> list[PairedNight]:
        return [PairedNight(f"night-{i}", (0.0,), (math.log(seconds),)) for i in range(10)]

    def verdict(arm: str, flagged: bool, size: float, p: float, recent: int) -> ArmVerdict:
        shift = Shift(size, size * 0.99, size * 1.01, p, recent, 7, 6 * recent, 42)
        return ArmVerdict(arm, shift, flagged, 10 - recent if flagged else None, (0,))

    quiet = verdict(REFERENCE, False, 1.0, 0.5, 1)

    def series(workers: int, metric: str, seconds: float, ratio: ArmVerdict) -> SeriesJudgement:
        key = SeriesKey("t", "host", workers, metric)
        return SeriesJudgement(key, nights(seconds), ratio, quiet)

    judged = [
        series(1, "time_to_accuracy_s", 49.0, verdict(RATIO, True, 1.05, 1e-4, 1)),
        series(1, "steady_step_s", 0.45, verdict(RATIO, False, 1.03, 0.01, 2)),
        series(1, "compute_s", 0.45, verdict(RATIO, False, 1.03, 0.01, 2)),
        series(1, "data_s", 0.0035, verdict(RATIO, False, 1.10, 0.005, 2)),
        series(1, "communication_s", 0.0035, verdict(RATIO, False, 0.97, 0.8, 2)),
        series(1, "eval_s", 0.56, verdict(RATIO, False, 1.20, 0.02, 2)),
        series(2, "communication_s", 0.5, verdict(RATIO, False, 1.20, 0.01, 2)),
    ]
    (change,) = changes(judged)
    assert (change.first_sweep_id, change.attribution) == ("night-9", STACK)
    assert change.headline.key.metric == "time_to_accuracy_s"
    assert change.phases == ["compute", "data"]


def test_a_platform_change_is_blamed_on_the_platform() -> None:
    history = paired_history(12, {}, {10: 1.25})
    found = changes(judge_series(paired_series("task2a", history, "tonight", "reference")))
    assert [c.attribution for c in found] == [PLATFORM]
    assert all(m.arm == "reference" for m in found[0].moved)


def test_the_nightly_page_draws_the_rounds_the_judgement_tested() -> None:
    """A night with one round of tonight's arm 60 % slow: the page's point for that night is
    the ratio of its rounds pulled in, as the judgement tested them, not of the raw rounds,
    and says one ratio was pulled in; the nights without such a round are drawn as measured."""
    from dash_app.pages.nightly.figures import nightly_figure
    from results_db.regressions.paired import ratio_interval
    from results_db.service.nightly import series_history

    history = paired_history(12, {}, {})
    arms = history[6].arms
    (slow,) = [i for i, a in enumerate(arms) if a.stack == "tonight" and a.repeat == 3]
    arms[slow] = replace(arms[slow], seconds={k: v * 1.6 for k, v in arms[slow].seconds.items()})
    series = paired_series("task2a", history, "tonight", "reference")
    (judged,) = [j for j in judge_series(series) if j.key.metric == "steady_step_s"]
    when = {n.sweep_id: datetime(2026, 11, 1 + i, tzinfo=UTC) for i, n in enumerate(history)}
    drawn = series_history(judged, when)
    assert [p.sweep_id for p in drawn.points] == [n.sweep_id for n in history]
    raw = ratio_interval(judged.nights[6].log_ratios)
    point = drawn.points[6]
    assert point.pulled_in == 1
    assert raw.ratio > 1.05 and 0.98 < point.ratio < 1.02  # one round of 8 at 1.6: ×1.05 raw
    assert point.high - point.low < raw.high - raw.low
    pairs = enumerate(zip(drawn.points, judged.nights, strict=True))
    # where no round is far off, at most a hair of a pull
    for other, night in (pair for i, pair in pairs if i != 6):
        assert other.ratio == pytest.approx(ratio_interval(night.log_ratios).ratio, rel=1e-3)
    assert point.ratio == pytest.approx(
        ratio_interval(pull_in([n.log_ratios for n in judged.nights], 3.0)[6]).ratio
    )
    hover = [t for t in nightly_figure([drawn], "steady_step_s").data if t.customdata is not None]
    texts = [row[3] for t in hover for row in t.customdata if isinstance(row, tuple | list)]
    assert "8 rounds (1 far-off ratio pulled in to the night's bound)" in texts
    assert "8 rounds" in texts


def test_a_new_reference_starts_the_series_anew() -> None:
    history = paired_history(6, {}, {})
    repinned = [*history[:3], *(Night(n.sweep_id, n.arms, {"python": "/b"}) for n in history[3:])]
    assert [n.sweep_id for n in comparable_nights(repinned)] == [n.sweep_id for n in history[3:]]


def test_an_identity_diff_names_what_changed() -> None:
    before = {"torch": "2.12.0", "numpy": "2.1", "env": {}}
    after = {"torch": "2.13.0", "numpy": "2.1", "kernel": "6.8"}
    assert identity_diff(before, after) == {
        "env": [{}, None],
        "kernel": [None, "6.8"],
        "torch": ["2.12.0", "2.13.0"],
    }


# -- stored, and triaged -------------------------------------------------------------------


def test_a_change_found_again_the_next_night_is_the_same_finding(engine) -> None:
    from results_db.models import NightlyFinding, Sweep

    history = paired_history(13, {10: {"compute_s": 1.08}}, {})
    with engine.begin() as conn:
        for i, night in enumerate(history):
            conn.execute(
                Sweep.__table__.insert().values(
                    id=night.sweep_id,
                    task="task2a",
                    trigger="scheduled",
                    config={},
                    config_hash="h",
                    code_version="1",
                    created_at=datetime(2026, 11, i + 1, 2, tzinfo=UTC),
                )
            )
    order = [n.sweep_id for n in history]
    ids = []
    for last in (11, 12, 13):
        found = changes(
            judge_series(paired_series("task2a", history[:last], "tonight", "reference"))
        )
        with engine.begin() as conn:
            ids.append(store_changes(conn, found, {}, order))
    assert len(ids[0][0]) == 1  # new on the first night it is seen
    assert ids[1][0] == [] and ids[1][1] == ids[0][0]  # the same finding, updated
    with engine.begin() as conn:
        set_state(conn, ids[0][0][0], FIXED, "reverted the optimizer change")
        with pytest.raises(ValueError, match="state: must be one of"):
            set_state(conn, ids[0][0][0], "gone")
        rows = conn.execute(select(NightlyFinding.state, NightlyFinding.note)).all()
    assert rows == [(FIXED, "reverted the optimizer change")]


# -- settings and the command line ---------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("REFERENCE_STACK", '{"python": "/a", "image": "b"}', "exactly one of python"),
        ("REFERENCE_STACK", "{not json", "JSON"),
        ("TONIGHT_STACK", '{"python": "/a", "env": {"RANK": "1"}}', "set by the launcher"),
        ("BUDGET_S", "10", "60 to 86400"),
        ("BUDGET_S", "nan", "60 to 86400"),
    ],
)
def test_a_bad_pairing_setting_names_its_variable(variable: str, value: str, words: str) -> None:
    with pytest.raises(ValueError, match=f"SCALEBENCH_NIGHTLY_{variable}: .*{words}"):
        NightlySettings.from_env({f"SCALEBENCH_NIGHTLY_{variable}": value})


def test_pin_show_and_unpin_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.main import main

    monkeypatch.delenv("SCALEBENCH_NIGHTLY_REFERENCE_STACK", raising=False)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    assert main(["db", "upgrade", "--database", url]) == 0
    assert main(["nightly", "pin", str(tmp_path / "gone" / "python"), "--database", url]) == 2
    assert "reference stack: no interpreter" in capsys.readouterr().err
    assert (
        main(["nightly", "pin", sys.executable, "--env", "PYTHONPATH=/src", "--database", url]) == 0
    )
    assert main(["nightly", "show", "--database", url]) == 0
    assert f"(pinned): {sys.executable} PYTHONPATH=/src" in capsys.readouterr().out
    assert main(["nightly", "unpin", "--database", url]) == 0
    assert main(["nightly", "show", "--database", url]) == 0
    assert "no reference stack pinned" in capsys.readouterr().out
    assert main(["regressions", "--finding", "9", "--state", "fixed", "--database", url]) == 2
    assert "no finding 9" in capsys.readouterr().err
    assert main(["regressions", "--state", "fixed", "--database", url]) == 2


def write_paired_night(
    folder: Path,
    sweep_id: str,
    night: int,
    tonight_factor: float,
    stacks: dict,
    fields: dict | None = None,
) -> None:
    """A scheduled paired night of light Task 2a at 1 worker, 2 rounds, written as workers
    write it: tonight's arm's phases ``tonight_factor`` times the reference's (``fields``:
    more of the night's request)."""
    runs = [
        FakeRun(
            1,
            repeat=r,
            stack=stack,
            phases={
                k: v * (tonight_factor if stack == "tonight" else 1.0) for k, v in PHASES.items()
            },
        )
        for r in range(2)
        for stack in ("tonight", "reference")
    ]
    write_training_sweep(
        folder,
        sweep_id,
        runs,
        trigger="scheduled",
        created_at=f"2026-11-{night + 20}T02:00:00+00:00",
        task="task2a-logreg-epsilon",
        stacks=stacks,
        fields=fields,
    )


# -- a whole paired night ------------------------------------------------------------------


def test_a_paired_night_runs_both_arms_finds_the_change_and_sends_one_message(
    airflow_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four earlier paired nights (written as workers write them) in which tonight's arm was
    twice as fast as the reference; tonight both arms are this interpreter, run for real:
    tonight's stack moved, one finding is stored and one message sent, with its link."""
    from test_nightly import Webhook

    from operators.nightly_dag import build_nightly_dag
    from results_db.database import make_engine
    from results_db.models import NightlyFinding, Run
    from results_db.service import ingest, upgrade
    from results_db.service.reference import pin_reference

    hook = Webhook()
    url = f"sqlite:///{tmp_path / 'results.db'}"
    for name, value in {
        "SCALEBENCH_DATABASE_URL": url,
        "SCALEBENCH_RESULTS_URI": str(tmp_path / "results"),
        "SCALEBENCH_NOTIFY_WEBHOOK": hook.url,
        "SCALEBENCH_DASHBOARD_URL": "http://dash.example:8050",
        "SCALEBENCH_NIGHTLY_BUDGET_S": "60",  # the fewest rounds: two
        # tonight's stack is not the reference's (on an A/A night a moved ratio is noise)
        "SCALEBENCH_NIGHTLY_TONIGHT_STACK": json.dumps(
            {"python": sys.executable, "env": {"SCALEBENCH_TONIGHT": "1"}}
        ),
        "OMP_NUM_THREADS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SCALEBENCH_NIGHTLY_REFERENCE_STACK", raising=False)
    upgrade(url)
    pin_reference(url, sys.executable, [], False, "this interpreter")
    stacks = {
        "tonight": {"python": sys.executable, "env": {"SCALEBENCH_TONIGHT": "1"}},
        "reference": {"python": sys.executable},
    }
    # one thread a rank: on two cores or more, each round's arms run as a duet, both at once
    # in one training task, each on its own core; the earlier nights were the same
    threads = {"threads_per_worker": 1}
    for night in range(4):
        write_paired_night(tmp_path / "earlier", f"nightly-{night}", night, 0.5, stacks, threads)
    ingest(url, str(tmp_path / "earlier"))

    settings = NightlySettings(
        tasks=("task2a-logreg-epsilon",),
        fields={"light": True, "workers": (1,), "threads_per_worker": 1},
    )
    try:
        run = build_nightly_dag(settings).test()
    finally:
        hook.close()

    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["task2a_logreg_epsilon.check_regressions"] == "failed"
    duet = len(pairing.host_cores()) >= 2
    trains = [t for t in run.get_task_instances() if t.task_id.endswith("workers_01.train")]
    # a duet's round takes one arm's time of the budget: three rounds fit where two did
    rounds = 3 if duet else 2
    assert len(trains) == (rounds if duet else 2 * rounds)  # a task a round, or a task an arm
    engine = make_engine(url)
    with engine.connect() as conn:
        tonight = conn.execute(
            select(Run.stack, Run.repeat).where(Run.sweep_id.not_like("nightly-%"))
        ).all()
        ways = conn.execute(
            select(Run.pairing).where(Run.sweep_id.not_like("nightly-%")).distinct()
        ).scalars()
        assert set(ways) == {"duet" if duet else "interleaved"}
        findings = conn.execute(
            select(NightlyFinding.id, NightlyFinding.attribution, NightlyFinding.series)
        ).all()
    engine.dispose()
    assert sorted(tonight) == [(arm, r) for arm in ("reference", "tonight") for r in range(rounds)]
    assert len(findings) == 1
    finding_id, attribution, series = findings[0]
    assert attribution == "stack"
    assert any(s["metric"] == "steady_step_s" and s["arm"] == "ratio" for s in series)
    texts = [m["text"] for m in hook.received]
    assert len(texts) == 1, texts
    assert f"http://dash.example:8050/nightly?finding={finding_id}" in texts[0]


def test_on_an_aa_night_a_moved_ratio_is_stored_as_a_false_alarm_and_sent_to_no_one(
    tmp_path: Path,
) -> None:
    """Both arms the same stack: a ratio that moves is noise by construction. The finding is
    kept (it counts in the false-alarm rate) but stored as a false alarm, and not new."""
    from results_db.models import NightlyFinding
    from results_db.service import ingest, upgrade
    from results_db.service.nightly import AA_NOTE, check_paired

    url = f"sqlite:///{tmp_path / 'results.db'}"
    upgrade(url)
    same = {"python": sys.executable}
    for night in range(5):
        slower = 1.5 if night == 4 else 1.0
        write_paired_night(
            tmp_path / "nights",
            f"nightly-{night}",
            night,
            slower,
            {"tonight": same, "reference": same},
        )
    ingest(url, str(tmp_path / "nights"))

    checked = check_paired(url, "nightly-4")

    assert any(j.flagged for j in checked.judgements)
    assert checked.new == []
    from results_db.database import make_engine

    engine = make_engine(url)
    with engine.connect() as conn:
        stored = conn.execute(
            select(NightlyFinding.attribution, NightlyFinding.state, NightlyFinding.note)
        ).all()
    engine.dispose()
    assert stored == [("stack", "false-alarm", AA_NOTE)]
