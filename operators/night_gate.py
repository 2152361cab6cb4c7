"""The nightly's gate: a night takes the machines only when no other night of the DAG has them.

Airflow holds the scheduler's own nights and those started by hand one at a time
(``max_active_runs=1``), but it counts a backfill's nights apart from them: up to ten at once
by default, beside the scheduled night. So every night starts with the sensor
``earlier_night_done``, which says go only when, of the DAG's other runs that are running,

- none is *measuring*: past its own gate, with a last task not ended, and
- none is looking at the same moment (its gate running: it may be about to go), and
- none waiting at its gate comes first: the earlier night (a run's night read from its id,
  ``scheduled__2026-10-01T02:00:00+00:00``), so that a backfill's nights go in the order of
  their nights.

A queued run never holds a night back: it has not reached its gate, and when it does it waits
there (waiting for it could deadlock, as the scheduler starts it only once this one ended).
The rule (:func:`runs_in_the_way`) is a pure function of the task states Airflow gives the
sensor; :func:`machines_free` asks Airflow for them, and for the state of each run they name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

GATE_TASK_ID = "earlier_night_done"
# A task in one of these states has ended.
ENDED_TASK_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


def night_of(run_id: str) -> datetime | None:
    """The night a run stands for, read from the id Airflow gives it (``<type>__<ISO time>``,
    a run started by hand with a random tail ``_<letters>``); None for an id set by hand."""
    _, sep, tail = run_id.partition("__")
    if not sep:
        return None
    for text in (tail, tail.rsplit("_", 1)[0]):
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            continue
    return None


def _order(run_id: str) -> tuple[bool, float, str]:
    """Earlier nights first; runs whose night cannot be read after every other, by their id."""
    night = night_of(run_id)
    return (night is None, night.timestamp() if night else 0.0, run_id)


@dataclass(frozen=True)
class InTheWay:
    """A run that holds a night back, and why (``measuring``, ``looking`` or
    ``waiting before``)."""

    run_id: str
    why: str

    def describe(self) -> str:
        return {
            "measuring": f"{self.run_id} has the machines",
            "looking": f"{self.run_id} is looking at the same moment",
        }.get(self.why, f"{self.run_id} waits for them and comes first")


def runs_in_the_way(
    me: str,
    states: Mapping[str, Mapping[str, str | None]],
    last_task_ids: list[str],
) -> list[InTheWay]:
    """The other runs that keep run ``me`` from taking the machines, given ``states`` (run id
    → task id → state, as Airflow's task-states call answers, for the gate and the DAG's last
    tasks): a run past its gate (gate ``success``) with a last task not ended is measuring;
    a run whose gate runs is looking (it may have just said go, its success not yet written);
    a run whose gate has not ended and whose night comes before ``me``'s waits before it. A
    gate that failed (timed out) took nothing. Runs in the answer with no gate state at all
    are left out. Measuring runs first, then by night."""
    in_the_way = []
    for run_id, tasks in states.items():
        if run_id == me or GATE_TASK_ID not in tasks:
            continue
        gate = tasks[GATE_TASK_ID]
        if gate == "success":
            if any(tasks.get(t) not in ENDED_TASK_STATES for t in last_task_ids):
                in_the_way.append(InTheWay(run_id, "measuring"))
        elif gate == "running":
            in_the_way.append(InTheWay(run_id, "looking"))
        elif gate not in ENDED_TASK_STATES and _order(run_id) < _order(me):
            in_the_way.append(InTheWay(run_id, "waiting before"))
    return sorted(in_the_way, key=lambda r: (r.why != "measuring", _order(r.run_id)))


def machines_free(context: Mapping[str, Any]) -> bool:
    """The gate's look (its sensor's body): whether this night may take the machines now;
    when it may not, says which run holds it back."""
    dag_run = context["dag_run"]
    ti = context["ti"]
    dag = context["dag"]
    last = sorted(t.task_id for t in dag.leaves)
    states = ti.get_task_states(dag_id=dag.dag_id, task_ids=[GATE_TASK_ID, *last])
    for run in runs_in_the_way(dag_run.run_id, states, last):
        # Only a running run is in the way: a queued one has not reached its gate, and one
        # marked failed may keep tasks that never ran.
        run_state = str(ti.get_dagrun_state(dag_id=dag.dag_id, run_id=run.run_id))
        if run_state.rsplit(".", 1)[-1].lower() == "running":
            print(
                f"night {dag_run.run_id}: waiting, {run.describe()}: "
                "nights never share the machines"
            )
            return False
    return True
