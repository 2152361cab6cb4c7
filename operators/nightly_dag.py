"""The nightly regression DAG: the suite's sweeps with fixed settings, then the detector.

    <task>.validate → … → <task>.ingest → <task>.summarize
                                        → <task>.check_regressions
    (one task of the suite after the other: sweeps never share the machines)

Every task of this DAG calls :func:`operators.notify.notify_failure` when
it fails, so a flagged regression, a sweep without any result, or a broken
launcher all reach the configured webhook or callback. Sweeps are recorded
with trigger ``scheduled`` (also when started by hand), so they form the
baseline of the nights that follow.
"""

from __future__ import annotations

from airflow.sdk import DAG, CronTriggerTimetable, TaskGroup, task

from operators.benchmark_dag import dag_id, judge_step, sweep_steps
from operators.notify import notify_failure
from results_db import regressions
from scalebench.nightly import NightlySettings
from scalebench.tasks import get_task

NIGHTLY_DAG_ID = "scalebench_nightly"


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
        "compared with its baseline: time to accuracy and the median step time after "
        "warm-up, each relative to the machine's reference workload timed in the same "
        "run, and the largest all-reduce's time are flagged when "
        f"{regressions.RULE.describe()}. A flagged regression "
        "fails `check_regressions`, is stored for the dashboard, and is sent to "
        "`SCALEBENCH_NOTIFY_WEBHOOK` / `SCALEBENCH_NOTIFY_CALLBACK`."
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

        previous = None
        for task_id in settings.tasks:
            spec = get_task(task_id)
            with TaskGroup(dag_id(spec), tooltip=spec.title):
                first, loaded = sweep_steps(spec, fixed=settings.request(), trigger="scheduled")
                judge_step(first, loaded, fail_when_cancelled=True)
                check_regressions(loaded)
            if previous is not None:
                previous >> first  # one sweep at a time: they share the machines
            previous = loaded
    return nightly
