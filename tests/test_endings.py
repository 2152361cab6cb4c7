"""How a sweep's groups begin and end in the record and the results database: every group a
row from the plan on, ``running`` from its start, a stopped group's verdict written before its
ranks are stopped, and a group that waits for another of its sweep still being stopped."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from operators.training_group import TrainingGroupOperator
from results_db.models import Run, Sweep
from results_db.service import group_started, ingest, load_plan
from scalebench import manifest
from scalebench.manifest.processes import _start_ticks
from scalebench.sweep import SweepPlan, start_sweep, validate_request


def planned_sweep(root: Path, workers: list[int], repeats: int) -> SweepPlan:
    request = validate_request(
        task="task2a-logreg-epsilon", workers=workers, light=True, repeats=repeats
    )
    return start_sweep(request, root, trigger="manual")


def stored(engine: Engine, sweep_id: str) -> tuple[dict[str, str], tuple]:
    with engine.connect() as conn:
        runs = dict(conn.execute(select(Run.id, Run.status).where(Run.sweep_id == sweep_id)).all())
        sweep = conn.execute(
            select(Sweep.outcome, Sweep.finished_at).where(Sweep.id == sweep_id)
        ).one()
    return runs, tuple(sweep)


def test_a_plan_is_stored_whole_and_a_group_reads_running_from_its_start(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    plan = planned_sweep(tmp_path / "results", [1, 2], repeats=2)
    began = time.monotonic()
    load_plan(database_url, plan.sweep_dir)
    assert time.monotonic() - began < 5  # a second here; nothing trained
    runs, sweep = stored(engine, plan.sweep_id)
    assert runs == {group.run_id: "planned" for group in plan.groups}
    assert sweep == ("running", None)

    first = plan.groups[0]
    group_started(database_url, plan.sweep_dir, first.run_id)
    runs, sweep = stored(engine, plan.sweep_id)
    assert runs.pop(first.run_id) == "running"
    assert set(runs.values()) == {"planned"} and sweep == ("running", None)


def test_a_group_that_starts_before_its_plan_was_stored_stores_it(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """The database was down when the sweep was planned: the first group's start stores
    the plan, and marks itself running."""
    plan = planned_sweep(tmp_path / "results", [1], repeats=2)
    group_started(database_url, plan.sweep_dir, plan.groups[0].run_id)
    runs, _ = stored(engine, plan.sweep_id)
    assert runs == {plan.groups[0].run_id: "running", plan.groups[1].run_id: "planned"}


def test_every_group_decided_is_not_finished_until_the_sweep_is_closed(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    """The last group's own load (the operator's) comes before ingest closes the sweep: the
    sweep reads ``running`` until then, never ended without its finishing time."""
    plan = planned_sweep(tmp_path / "results", [1], repeats=1)
    (group,) = plan.groups
    manifest.record_verdict(plan.sweep_dir, group.run_id, "skipped", "stopped first")
    ingest(database_url, str(plan.sweep_dir), only=[group.run_id], say=None)
    assert stored(engine, plan.sweep_id)[1] == ("running", None)
    manifest.finish(plan.sweep_dir)
    ingest(database_url, str(plan.sweep_dir), say=None)
    outcome, finished_at = stored(engine, plan.sweep_id)[1]
    assert outcome == "cancelled" and finished_at is not None


class RecordingLauncher:
    """A launcher whose ``stop`` notes what the sweep's record said when it was called."""

    def __init__(self, sweep_dir: Path, run_id: str) -> None:
        self.sweep_dir, self.run_id = sweep_dir, run_id
        self.status_at_stop: str | None = None

    def stop(self) -> None:
        self.status_at_stop = manifest.load(self.sweep_dir).entry(self.run_id).status
        time.sleep(0.2)  # stopping ranks takes seconds


def operator_for(plan: SweepPlan, index: int) -> TrainingGroupOperator:
    return TrainingGroupOperator(task_id=f"train_{index}", group=plan.groups[index].to_xcom())


def test_a_stopped_group_is_recorded_cancelled_before_its_ranks_are_stopped(
    tmp_path: Path,
) -> None:
    plan = planned_sweep(tmp_path, [1], repeats=3)
    first = plan.groups[0]
    manifest.start_attempt(plan.sweep_dir, first.run_id, "try 1")
    operator = operator_for(plan, 0)
    launcher = RecordingLauncher(plan.sweep_dir, first.run_id)
    operator._started, operator._running, operator._attempt = True, launcher, "try 1"
    operator.on_kill()
    assert launcher.status_at_stop == "cancelled"
    assert manifest.load(plan.sweep_dir).cancelled


@pytest.fixture
def other_process() -> subprocess.Popen:
    """A process standing for the Airflow task of another group, still alive."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def test_the_next_group_waits_for_the_stopped_one_and_is_skipped(
    tmp_path: Path, other_process: subprocess.Popen
) -> None:
    """Airflow starts the next repeat as soon as the running one is marked failed, seconds
    before that one's ``on_kill``: the next waits for the stopped group's verdict, finds the
    sweep stopped, and never starts."""
    plan = planned_sweep(tmp_path, [1], repeats=3)
    first = plan.groups[0]
    owner = {
        "host": manifest.this_process()["host"],
        "pid": other_process.pid,
        "started": _start_ticks(other_process.pid),
        "attempt": "try 1",
    }
    manifest.append_verdicts(
        plan.sweep_dir, [{"run_id": first.run_id, "status": "planned", "owner": owner}]
    )
    assert [g.run_id for g in manifest.still_running(manifest.load(plan.sweep_dir), "x")] == [
        first.run_id
    ]
    stopped_after_s = 1.5
    threading.Timer(
        stopped_after_s,
        manifest.record_verdict,
        (plan.sweep_dir, first.run_id, "cancelled", "the Airflow task was stopped"),
    ).start()
    from airflow.sdk.exceptions import AirflowSkipException

    began = time.monotonic()
    with pytest.raises(AirflowSkipException):
        operator_for(plan, 1).execute({})
    assert time.monotonic() - began >= stopped_after_s
    statuses = [g.status for g in manifest.load(plan.sweep_dir).groups]
    assert statuses == ["cancelled", "skipped", "planned"]


def test_a_group_does_not_wait_for_one_whose_process_is_gone(tmp_path: Path) -> None:
    """A group whose task process died without a verdict (a killed worker) is not waited for."""
    plan = planned_sweep(tmp_path, [1], repeats=2)
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = {"host": manifest.this_process()["host"], "pid": gone.pid, "started": 1}
    owner["attempt"] = "try 1"
    manifest.append_verdicts(
        plan.sweep_dir,
        [{"run_id": plan.groups[0].run_id, "status": "planned", "owner": owner}],
    )
    assert manifest.still_running(manifest.load(plan.sweep_dir), plan.groups[1].run_id) == []


def test_a_task_stopped_while_it_waits_records_its_group_skipped(
    tmp_path: Path, other_process: subprocess.Popen
) -> None:
    plan = planned_sweep(tmp_path, [1], repeats=2)
    owner = {
        "host": manifest.this_process()["host"],
        "pid": other_process.pid,
        "started": _start_ticks(other_process.pid),
        "attempt": "try 1",
    }
    manifest.append_verdicts(
        plan.sweep_dir, [{"run_id": plan.groups[0].run_id, "status": "planned", "owner": owner}]
    )
    operator = operator_for(plan, 1)
    threading.Timer(0.5, operator.on_kill).start()
    from airflow.sdk.exceptions import AirflowException

    with pytest.raises(AirflowException, match="stopped before this group started"):
        operator.execute({})
    assert manifest.load(plan.sweep_dir).groups[1].status == "skipped"
