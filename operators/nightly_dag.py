"""The nightly regression DAG: the suite's sweeps with fixed settings, then the detector.

    earlier_night_done → <task>.validate → … → <task>.ingest → <task>.summarize
                                                             → <task>.check_regressions
    (one task of the suite after the other: sweeps never share the machines)

Nights never run at once, and run in the order of their nights: every night first waits
(``earlier_night_done``, a sensor that gives its worker slot back between looks) until no
other night has the machines or comes before it (:mod:`operators.night_gate`).
``max_active_runs=1`` holds the scheduler's nights and those started by hand alone;
``airflow backfill create`` runs up to ten nights at once by default, beside them.

Every task of this DAG calls :func:`operators.notify.notify_failure` when
it fails, so a flagged regression, a sweep without any result, or a broken
launcher all reach the configured webhook or callback. Sweeps are recorded
with trigger ``scheduled`` (also when started by hand), so they form the
baseline of the nights that follow.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, CronTriggerTimetable, TaskGroup, TriggerRule, task

from operators.benchmark_dag import dag_id, judge_step, sweep_steps
from operators.night_gate import machines_free
from operators.notify import notify_failure
from results_db import regressions
from scalebench.nightly import NightlySettings
from scalebench.tasks import get_task

NIGHTLY_DAG_ID = "scalebench_nightly"
# How long a night waits for the machines, and how often it looks (seconds).
EARLIER_NIGHT_TIMEOUT_S = 24 * 3600
EARLIER_NIGHT_POKE_S = 15


def doc(settings: NightlySettings) -> str:
    variant = "light" if settings.value("light") else "full"
    profiles = [profile.name for profile in settings.value("network")]
    links = f" on network profiles {', '.join(profiles)}" if profiles != ["host"] else ""
    return (
        "## Nightly regression run\n\n"
        f"At `{settings.schedule}` (UTC) runs the {variant} variants of "
        f"{', '.join(f'`{t}`' for t in settings.tasks)} at "
        f"{', '.join(map(str, settings.value('workers')))} worker(s), "
        f"{settings.value('repeats')} repeat(s) each, "
        f"with the {settings.value('launcher')} launcher and {settings.value('backend')}"
        f"{links}. Each sweep is then "
        "compared with its baseline: time to accuracy and the steady step time after "
        "warm-up (its quietest stretch), each relative to the machine's reference "
        "workload timed in the same run, and the largest all-reduce's time are flagged when "
        f"{regressions.RULE.describe()}. A flagged regression "
        "fails `check_regressions`, is stored for the dashboard, and is sent to "
        "`SCALEBENCH_NOTIFY_WEBHOOK` / `SCALEBENCH_NOTIFY_CALLBACK`.\n\n"
        "**Paired nights.** With a reference stack pinned (`scalebench nightly pin`, or "
        "`SCALEBENCH_NIGHTLY_REFERENCE_STACK`), every sweep runs tonight's stack beside the "
        f"reference in rounds, as many as {settings.budget_s:.0f} s of runs hold "
        "(`SCALEBENCH_NIGHTLY_BUDGET_S`), and each series' ratio tonight / reference and the "
        "reference's own seconds are judged over their whole history: one finding per "
        "change, attributed to the stack or the platform, triaged on the dashboard's "
        "Nightly page or with `scalebench regressions`."
    )


def description(settings: NightlySettings) -> str:
    """The DAG's one-line description (the DAG list shows it)."""
    return (
        f"Nightly regression run of {', '.join(settings.tasks)} against the recent "
        "baseline; fails when something got slower"
    )


def build_nightly_dag(settings: NightlySettings) -> DAG:
    with DAG(
        dag_id=NIGHTLY_DAG_ID,
        schedule=CronTriggerTimetable(settings.schedule, timezone="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["scalebench", "nightly"],
        description=description(settings),
        doc_md=doc(settings),
        default_args={"on_failure_callback": notify_failure},
    ) as nightly:

        @task
        def check_regressions(sweep_id: str) -> list[str]:
            from operators.notify import check

            return check(sweep_id)

        @task.sensor(
            poke_interval=EARLIER_NIGHT_POKE_S,
            timeout=EARLIER_NIGHT_TIMEOUT_S,
            mode="reschedule",
        )
        def earlier_night_done(**context: Any) -> bool:
            """Wait until no other night has the machines or comes before this one."""
            return machines_free(context)

        previous = wait = earlier_night_done()
        for task_id in settings.tasks:
            spec = get_task(task_id)
            with TaskGroup(dag_id(spec), tooltip=spec.title):
                first, loaded = sweep_steps(spec, fixed=settings.request(), trigger="scheduled")
                judge_step(first, loaded, fail_when_cancelled=True)
                check_regressions(loaded)
            if previous is wait:
                # The night's first sweep starts only once the night before has ended: a
                # wait that failed (timed out) fails the night rather than share the machines.
                first.operator.trigger_rule = TriggerRule.ALL_SUCCESS
            previous >> first  # one sweep at a time: they share the machines
            previous = loaded
    return nightly
