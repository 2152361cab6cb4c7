"""The nightly's gate: which runs hold a night back, and a simulated scheduler that starts
nights in any order, backfilled beside scheduled, and looks at their gates at random."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.night_gate import InTheWay, machines_free, night_of, runs_in_the_way

LAST = ["a.check_regressions", "b.summarize"]


def night(kind: str, day: int) -> str:
    return f"{kind}__2026-10-{day:02d}T02:00:00+00:00"


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("scheduled__2026-10-01T02:00:00+00:00", datetime(2026, 10, 1, 2, tzinfo=UTC)),
        ("backfill__2026-10-01T02:00:00+00:00", datetime(2026, 10, 1, 2, tzinfo=UTC)),
        ("manual__2026-12-03T10:50:01.123456+00:00_Xk3pQ2ab", None),
        ("nightly by hand", None),
        ("manual__not a time", None),
    ],
)
def test_a_runs_night_is_read_from_its_id(run_id: str, expected: datetime | None) -> None:
    got = night_of(run_id)
    if run_id.startswith("manual__2026"):
        assert got == datetime(2026, 12, 3, 10, 50, 1, 123456, tzinfo=UTC)
    else:
        assert got == expected


def test_a_night_past_its_gate_with_a_last_task_not_ended_is_measuring() -> None:
    me = night("scheduled", 20)
    states = {
        me: {"earlier_night_done": "up_for_reschedule"},
        night("backfill", 3): {
            "earlier_night_done": "success",
            "a.check_regressions": "success",
            "b.summarize": None,
        },
        # ended nights, whatever they did
        night("backfill", 1): {"earlier_night_done": "success", **dict.fromkeys(LAST, "success")},
        night("backfill", 2): {
            "earlier_night_done": "success",
            "a.check_regressions": "failed",
            "b.summarize": "upstream_failed",
        },
        night("scheduled", 19): {"earlier_night_done": "failed", **dict.fromkeys(LAST)},
    }
    assert runs_in_the_way(me, states, LAST) == [InTheWay(night("backfill", 3), "measuring")]


def test_a_night_waiting_before_this_one_holds_it_back_and_a_later_one_does_not() -> None:
    me = night("scheduled", 20)
    states = {
        me: {"earlier_night_done": "running"},
        night("backfill", 4): {"earlier_night_done": "up_for_reschedule"},
        night("backfill", 5): {"earlier_night_done": None},  # queued: its gate not yet run
        night("backfill", 25): {"earlier_night_done": "up_for_reschedule"},
        night("backfill", 26): {"earlier_night_done": "running"},  # looking right now
        "manual__2026-12-01T09:00:00+00:00_abcdefgh": {"earlier_night_done": "queued"},
        "picked by hand": {"earlier_night_done": "up_for_reschedule"},  # after every night
    }
    assert [(r.run_id, r.why) for r in runs_in_the_way(me, states, LAST)] == [
        (night("backfill", 4), "waiting before"),
        (night("backfill", 5), "waiting before"),
        (night("backfill", 26), "looking"),
    ]
    # the night that comes first is held back only by looks at the same moment (its own look
    # is the scheduled night's view of it)
    assert runs_in_the_way(night("backfill", 4), states, LAST) == [
        InTheWay(me, "looking"),
        InTheWay(night("backfill", 26), "looking"),
    ]


def test_a_run_with_no_gate_state_is_left_out() -> None:
    assert runs_in_the_way(night("backfill", 2), {night("backfill", 1): {}}, LAST) == []


# A simulated Airflow. Runs arrive in any order, at any moment. Each tick, a random part of
# the waiting gates look, in a random order, and runs arrive between their looks; a look reads
# the states as they are (its own gate running meanwhile) and writes what it decided only at
# the end of the tick, so looks in one tick overlap. A run that went measures for a few ticks
# and ends. The gate must never let two runs measure at once, must let every run go in the end,
# and a run goes only when no earlier night that was there when it looked still waits.
@settings(max_examples=200, deadline=None)
@given(
    days=st.lists(st.integers(1, 28), min_size=1, max_size=8, unique=True),
    kinds=st.lists(st.sampled_from(["scheduled", "backfill", "manual"]), min_size=8, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_simulated_scheduler_never_lets_two_nights_measure_at_once(
    days: list[int], kinds: list[str], seed: int
) -> None:
    rng = random.Random(seed)
    ids = [
        f"manual__2026-10-{d:02d}T02:00:00+00:00_abcdefgh" if k == "manual" else night(k, d)
        for d, k in zip(days, kinds, strict=False)
    ]
    arrive = {run_id: rng.randrange(0, 3 * len(ids)) for run_id in ids}
    states: dict[str, dict[str, str | None]] = {}
    measuring_left: dict[str, int] = {}
    went: list[str] = []
    for tick in range(600):
        for run_id in list(measuring_left):
            measuring_left[run_id] -= 1
            if measuring_left[run_id] == 0:
                del measuring_left[run_id]
                states[run_id].update(dict.fromkeys(LAST, "success"))
        waiting = [r for r, t in states.items() if t["earlier_night_done"] != "success"]
        looks = [("look", r) for r in waiting if rng.random() < 0.25]
        looks += [("arrive", r) for r, at in arrive.items() if at == tick]
        rng.shuffle(looks)
        for run_id in [r for what, r in looks if what == "arrive"]:
            if rng.random() < 0.5:  # a run that arrived looks at once, beside the others
                after = looks.index(("arrive", run_id)) + 1
                looks.insert(rng.randrange(after, len(looks) + 1), ("look", run_id))
        decided: dict[str, bool] = {}
        for what, run_id in looks:
            if what == "arrive":
                states[run_id] = {"earlier_night_done": None, **dict.fromkeys(LAST)}
                continue
            states[run_id]["earlier_night_done"] = "running"
            decided[run_id] = not runs_in_the_way(run_id, states, LAST)
            if decided[run_id]:
                there = [r for r in states if r not in went and r != run_id]
                assert all(night_of(r) > night_of(run_id) for r in there), (run_id, there)
        for run_id, go in decided.items():
            states[run_id]["earlier_night_done"] = "success" if go else "up_for_reschedule"
            if go:
                measuring_left[run_id] = rng.randrange(1, 5)
                went.append(run_id)
        assert len(measuring_left) <= 1, measuring_left
    assert sorted(went) == sorted(ids)


class FakeTI:
    """What the gate asks of a task instance: Airflow's answers, given here."""

    def __init__(self, states: dict, run_states: dict) -> None:
        self.states, self.run_states = states, run_states
        self.asked: list[str] = []

    def get_task_states(self, dag_id: str, task_ids: list[str]) -> dict:
        assert dag_id == "scalebench_nightly" and task_ids == ["earlier_night_done", *LAST]
        return self.states

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        self.asked.append(run_id)
        return self.run_states[run_id]


def gate_context(run_id: str, ti: FakeTI) -> dict:
    leaves = [SimpleNamespace(task_id=t) for t in reversed(LAST)]
    return {
        "dag_run": SimpleNamespace(run_id=run_id),
        "dag": SimpleNamespace(dag_id="scalebench_nightly", leaves=leaves),
        "ti": ti,
    }


def test_the_gate_holds_a_night_back_only_while_the_run_in_its_way_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    me, other = night("scheduled", 20), night("backfill", 3)
    states = {
        me: {"earlier_night_done": "running"},
        other: {"earlier_night_done": "success", **dict.fromkeys(LAST)},
    }
    ti = FakeTI(states, {other: "running"})
    assert machines_free(gate_context(me, ti)) is False
    assert f"waiting, {other} has the machines" in capsys.readouterr().out
    # a run marked failed while it had tasks that never ran: its tasks say in the way, its
    # own state says ended
    ti = FakeTI(states, {other: "DagRunState.FAILED"})
    assert machines_free(gate_context(me, ti)) is True and ti.asked == [other]


def test_a_queued_run_never_holds_a_night_back() -> None:
    """The scheduled night, queued behind a night started by hand (``max_active_runs=1``), is
    an earlier night whose gate has not run: waiting for it would wait for ever."""
    me = "manual__2026-10-20T10:00:00+00:00"
    states = {
        me: {"earlier_night_done": "running"},
        night("scheduled", 20): {"earlier_night_done": None, **dict.fromkeys(LAST)},
    }
    assert [r.run_id for r in runs_in_the_way(me, states, LAST)] == [night("scheduled", 20)]
    ti = FakeTI(states, {night("scheduled", 20): "queued"})
    assert machines_free(gate_context(me, ti)) is True


def test_nights_later_than_a_day_apart_still_order() -> None:
    early = datetime(2026, 10, 1, 2, tzinfo=UTC)
    ids = [f"backfill__{(early + timedelta(days=d)).isoformat()}" for d in (40, 3, 400)]
    states = {r: {"earlier_night_done": "up_for_reschedule"} for r in ids}
    free = [r for r in ids if not runs_in_the_way(r, states, LAST)]
    assert free == [ids[1]]
