"""Paired rounds as duets: the arms of a round at once, each pinned to cores of its own, or
interleaved; how the choice is made and refused, planned, started, recorded and compared."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from scalebench import pairing
from scalebench.network import parse_profiles
from scalebench.request_fields import InvalidParameter
from scalebench.sweep import (
    GroupPlan,
    launch_from_xcom,
    launch_to_xcom,
    launches,
    plan_groups,
    validate_request,
)

TASK = "task2a-logreg-epsilon"
HERE = sys.executable
SLOWDOWN = Path(__file__).resolve().parents[1] / "benchmarks" / "slowdown"


def values(**changed: object) -> dict:
    """A request's values as validation holds them before the pairing is resolved."""
    base = {
        "pairing": "auto",
        "stacks": ("a", "b"),
        "workers": (1, 2),
        "threads_per_worker": 1,
        "network": parse_profiles("host"),
    }
    return {**base, **changed}


# -- choosing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world_size", "threads", "arms", "cores", "fits"),
    [
        (1, 1, 2, 2, True),
        (2, 1, 2, 2, False),  # four ranks on two cores
        (2, 1, 2, 4, True),
        (1, 2, 2, 4, True),
        (1, 3, 2, 4, False),
        (1, 0, 2, 2, True),  # threads 0: an equal share of the cores, one each
        (2, 0, 2, 2, False),
        (1, 1, 3, 2, False),
    ],
)
def test_arms_fit_when_every_rank_has_cores_no_other_rank_uses(
    world_size: int, threads: int, arms: int, cores: int, fits: bool
) -> None:
    assert pairing.duet_fits(world_size, threads, arms, cores) is fits
    split = pairing.duet_cores(world_size, threads, list(range(cores)), arms)
    if not fits:
        assert split == []
        return
    assert len(split) == arms
    taken = [core for arm in split for core in arm]
    assert len(taken) == len(set(taken))  # no core in two arms
    assert all(len(arm) >= world_size * max(1, threads) for arm in split)


def test_auto_is_a_duet_only_where_threads_are_given_and_some_worker_count_fits() -> None:
    assert pairing.resolve(values(), True, False, 2) == "duet"
    assert pairing.resolve(values(threads_per_worker=0), True, False, 2) == "interleaved"
    assert pairing.resolve(values(workers=(2, 4)), True, False, 2) == "interleaved"
    assert pairing.resolve(values(), False, False, 2) == "interleaved"  # a cluster
    assert pairing.resolve(values(), True, True, 2) == "interleaved"  # GPUs
    shaped = values(network=parse_profiles("100mbit"))
    assert pairing.resolve(shaped, True, False, 2) == "interleaved"
    assert pairing.resolve(values(pairing="interleaved"), True, False, 2) == "interleaved"


def test_the_log_line_says_which_worker_counts_run_as_duets() -> None:
    line = pairing.described("duet", [1, 2, 4], 1, 2, 4)
    assert "as duets at 1, 2 worker(s)" in line and "one arm after the other at 4" in line
    assert "duets" not in pairing.described("interleaved", [1, 2], 1, 2, 8)


@pytest.mark.parametrize(
    ("changed", "on_host", "gpus", "words"),
    [
        ({"stacks": ("a",)}, True, False, "needs two or more stacks"),
        ({}, False, False, "only the local launcher"),
        ({}, True, True, "these ranks use GPUs"),
        ({"network": parse_profiles("1gbit")}, True, False, "emulated link"),
        (
            {"workers": (2, 4)},
            True,
            False,
            "2 arms of 2 worker(s) at 1 thread(s) each need 4 cores",
        ),
    ],
)
def test_an_asked_duet_nothing_can_run_says_why(
    changed: dict, on_host: bool, gpus: bool, words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        pairing.resolve(values(pairing="duet", **changed), on_host, gpus, 2)


def test_a_request_refuses_a_duet_naming_pairing_and_holds_what_it_resolved() -> None:
    stacks = {"a": {"python": HERE}, "b": {"python": HERE}}
    with pytest.raises(InvalidParameter, match="two or more stacks") as refused:
        validate_request(task=TASK, light=True, pairing="duet")
    assert refused.value.field == "pairing"
    cores = len(pairing.host_cores())
    with pytest.raises(InvalidParameter, match=f"need {2 * cores} cores at once") as refused:
        validate_request(
            task=TASK,
            light=True,
            stacks=stacks,
            pairs=2,
            pairing="duet",
            workers="1",
            threads_per_worker=cores,  # two arms of all the cores each
            device="cpu",
        )
    assert refused.value.field == "pairing"
    with pytest.raises(InvalidParameter, match="must be one of"):
        validate_request(task=TASK, light=True, pairing="together")
    # unpaired, and paired without threads: interleaved, which leaves the configuration as it was
    plain = validate_request(task=TASK, light=True)
    assert plain.pairing == "interleaved"
    paired = validate_request(task=TASK, light=True, stacks=stacks, pairs=2, device="cpu")
    assert paired.pairing == "interleaved"


def test_a_duets_arms_start_together_and_cross_xcom_as_one_launch(tmp_path: Path) -> None:
    stacks = {"a": {"python": HERE}, "b": {"python": HERE}}
    request = validate_request(
        task=TASK,
        light=True,
        workers="1,2",
        stacks=stacks,
        pairs=2,
        pairing="interleaved",
        threads_per_worker=1,
        device="cpu",
    )
    request = request.__class__(**{**request.__dict__, "pairing": "duet"})  # as on 2 cores
    groups = plan_groups(request, "sw", tmp_path, cores=[0, 1])
    started = launches(groups)
    shapes = [[(g.world_size, g.stack_name, g.cpus) for g in launch] for launch in started]
    first_round = [stack.name for stack in (groups[0].stack, groups[1].stack)]
    assert shapes[0] == [(1, first_round[0], (0,)), (1, first_round[1], (1,))]
    assert [len(launch) for launch in started] == [2, 1, 1, 2, 1, 1]  # 2 workers: interleaved
    assert all(not g.duet for launch in started[1:3] for g in launch)
    lead = json.loads(json.dumps(launch_to_xcom(started[0])))  # through Airflow's XCom
    assert launch_from_xcom(lead) == started[0]
    assert GroupPlan.from_xcom(lead) == started[0][0]
    alone = json.loads(json.dumps(launch_to_xcom(started[1])))
    assert launch_from_xcom(alone) == started[1] and "partners" not in alone


# -- running ----------------------------------------------------------------------------------


def test_an_interrupted_duet_stops_both_arms(tmp_path: Path) -> None:
    """Ctrl-C while a duet's arms run: both launchers are stopped, then the interruption goes
    on (an arm left running would keep the command alive until it ended)."""
    import _thread
    import threading
    import time

    from operators.group import GroupResult, run_together

    class Arm:
        """Runs until stopped, or gives up after 10 s (a launcher nobody stopped)."""

        def __init__(self) -> None:
            self.stopped = threading.Event()

        def start(self) -> None:
            pass

        def wait(self, timeout_s: float) -> GroupResult:
            self.stopped.wait(10.0)
            return GroupResult(1, "failed", "stopped", [None], 0.0)

        def stop(self) -> None:
            self.stopped.set()

    request = validate_request(
        task=TASK, light=True, stacks={"a": {"python": HERE}, "b": {"python": HERE}}, pairs=1
    )
    arms = plan_groups(request, "sw", tmp_path)[:2]
    made: list[Arm] = []

    def make(group: GroupPlan) -> Arm:
        made.append(launcher := Arm())
        return launcher

    threading.Timer(0.5, _thread.interrupt_main).start()  # Ctrl-C, half a second in
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_together(arms, make)
    assert time.monotonic() - began < 5.0  # not after the arms gave up by themselves
    assert len(made) == 2 and all(launcher.stopped.is_set() for launcher in made)


def test_paired_runs_stored_before_duets_read_interleaved_after_the_migration(
    database_url: str, tmp_path: Path
) -> None:
    """Every paired run stored before ``run.pairing`` existed ran interleaved: the migration
    says so, and leaves unpaired runs without a pairing."""
    from alembic import command
    from records_factory import FakeRun, write_training_sweep

    from results_db.database import alembic_config, make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade

    stacks = {"a": {"python": HERE}, "b": {"python": HERE}}
    write_training_sweep(
        tmp_path, "paired", [FakeRun(1, stack="a"), FakeRun(1, stack="b")], stacks=stacks
    )
    write_training_sweep(tmp_path, "plain", [FakeRun(1)])
    upgrade(database_url)
    with contextlib.redirect_stdout(io.StringIO()):
        ingest(database_url, str(tmp_path))
    command.downgrade(alembic_config(database_url), "0018")
    command.upgrade(alembic_config(database_url), "head")
    engine = make_engine(database_url)
    with engine.connect() as conn:
        stored = dict(conn.execute(select(Run.sweep_id, Run.pairing).distinct()).all())
    engine.dispose()
    assert stored == {"paired": "interleaved", "plain": ""}
