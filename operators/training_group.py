"""The Airflow operator that runs one training group (one worker count, one repeat).

It starts the group with the launcher the sweep chose, waits for it, records
the verdict in the sweep's manifest, loads the group into the results database
(every ``SCALEBENCH_LIVE_INGEST_S`` seconds while it runs, as ``running``, and
once it ended, so the dashboard follows each group) and returns the verdict. A
failed, diverged or timed-out group does not fail the task: the verdict is data,
and the ingest that follows keeps what the group measured.

Cancelling (marking the task or its DAG run failed in the UI, or any other
SIGTERM to the task) makes Airflow call :meth:`TrainingGroupOperator.on_kill`:
every rank is stopped, the group is recorded as ``cancelled`` and the task
fails. Groups of the same sweep that have not started yet are then skipped: the verdict is
recorded before the ranks are stopped, and a group about to start first waits for any
other group of its sweep still running (:meth:`TrainingGroupOperator.wait_for_the_others`).
A group run again (a retry, or its task cleared) starts afresh, whatever the
sweep's state: it was asked for.

The group runs on the launcher it planned (:mod:`operators.launcher`): local
processes on the Airflow worker running the task, or a Kubernetes Indexed
Job named after the task instance. A Kubernetes group is by default watched
from Airflow's triggerer: the task starts it, defers to its
:class:`~operators.kubernetes.trigger.GroupTrigger` (no worker slot held while
it trains; the pool slots stay taken, the pool counting deferred tasks) and
:meth:`TrainingGroupOperator.resume` acts on the trigger's event. Every
``SCALEBENCH_LIVE_INGEST_S`` seconds while the group runs the event is ``running``:
the task loads the live results, passes rank 0's new lines into its log and
defers again (as the provider's ``KubernetesPodOperator`` does with its
``logging_interval``); the last event says how the group ended, and the task acts
on it as the blocking wait ends (log tail, clean-up) and records the verdict.
Stopping the task while it is deferred is the trigger's ``on_kill``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from operators.group import (
    GroupResult,
    Launcher,
    LauncherFailed,
    launcher_failed,
    record_verdict,
    run_group,
    run_together,
    set_aside_earlier_attempt,
)
from operators.launcher import TaskRun, fits_one_pod, launcher_in_task
from scalebench import config, manifest
from scalebench.statuses import CANCELLED, FAILED, PLANNED, RUNNING, SKIPPED, SUCCEEDED
from scalebench.sweep import GroupPlan, launch_from_xcom

if TYPE_CHECKING:
    from operators.kubernetes.watch import GroupEvent

CANCELLED_REASON = "the Airflow task was stopped"
STOPPED_BEFORE_START = "the Airflow task was stopped before this group started"
# How long a group waits for another group of its sweep that is being stopped, in seconds.
STOPPING_WAIT_S = 300.0


class TrainingGroupOperator(BaseOperator):
    """Run the planned group ``group`` (a :class:`~scalebench.sweep.GroupPlan` as XCom gives it)."""

    template_fields = ("group",)
    ui_color = "#d7ecd9"

    def __init__(self, *, group: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group = group
        self._running: Launcher | None = None
        self._arms: list[Launcher] = []  # a duet's launchers, while its arms run
        self._cancelled = threading.Event()
        self._attempt: str | None = None  # the try that owns the group (manifest.start_attempt)
        self._started = False  # execute took the group: on_kill records its verdict

    @property
    def plan(self) -> GroupPlan:
        """The group this task runs (a duet's first arm)."""
        return GroupPlan.from_xcom(self.group)

    @property
    def launch(self) -> tuple[GroupPlan, ...]:
        """Every group this task starts: the plan alone, or the arms of a duet round."""
        return launch_from_xcom(self.group)

    def execute(self, context: Any) -> dict[str, Any]:
        launch = self.launch
        if len(launch) > 1:
            return self.execute_duet(context, launch)
        group = self.plan
        self.take_the_machines(context, launch)
        self.log.info(
            "%s: %d worker(s), repeat %d, %s launcher",
            group.run_id,
            group.world_size,
            group.repeat + 1,
            group.request.launcher,
        )

        def hold(launcher: Launcher) -> Launcher:
            self._running = launcher  # what on_kill stops
            return launcher

        def defer_when_deferrable(launcher: Launcher) -> None:
            if getattr(launcher, "deferrable", False):
                self.defer_to_triggerer(group)

        try:
            result = run_group(
                group,
                lambda: hold(self.launcher_for(group, context)),
                started=defer_when_deferrable,
                alongside=lambda: LiveResults(
                    lambda: self.publish(group, final=False), config.live_ingest_s()
                ),
                cancelled=self._cancelled.is_set,
                attempt=self._attempt,
            )
        finally:
            self._running = None
        return self.finish(group, result)

    def execute_duet(self, context: Any, launch: tuple[GroupPlan, ...]) -> dict[str, Any]:
        """Run the arms of a duet round at once, each on its own cores (local ranks only:
        :mod:`scalebench.pairing`), as :meth:`execute` runs one group: each arm marked
        started, loaded while it runs and once it ended, its verdict recorded; stopped, every
        arm is recorded ``cancelled``."""
        lead = launch[0]
        self.take_the_machines(context, launch)
        self.log.info(
            "%d worker(s), repeat %d: a duet of %s, at once",
            lead.world_size,
            lead.repeat + 1,
            ", ".join(f"{g.run_id} on cores {','.join(map(str, g.cpus))}" for g in launch),
        )

        def hold(group: GroupPlan) -> Launcher:
            launcher = self.launcher_for(group, context)
            self._arms.append(launcher)  # what on_kill stops
            return launcher

        def publish_all() -> None:
            for group in launch:
                self.publish(group, final=False)

        try:
            ended = run_together(
                launch,
                hold,
                alongside=lambda: LiveResults(publish_all, config.live_ingest_s()),
                cancelled=self._cancelled.is_set,
                attempt=self._attempt,
            )
        finally:
            self._arms = []
        verdicts = []
        for group, result in zip(launch, ended, strict=True):
            if isinstance(result, LauncherFailed):  # recorded failed by run_together
                self.log.error("%s: %s", group.run_id, result)
                self.publish(group)
                verdicts.append({"run_id": group.run_id, "status": FAILED, "reason": str(result)})
                continue
            status, reason = self.conclude(group, result)
            verdicts.append({"run_id": group.run_id, "status": status, "reason": reason})
        if self._cancelled.is_set():
            raise AirflowException(f"{lead.run_id}: cancelled; what the duet measured is kept")
        return {**self.group, "verdicts": verdicts}

    def take_the_machines(self, context: Any, launch: tuple[GroupPlan, ...]) -> None:
        """Before a launch's groups start (one group, or the arms of a duet round): wait for
        the sweep's group before them; where this task was stopped or the sweep cancelled
        meanwhile, record every group skipped and end the task; else own them."""
        lead = launch[0]
        sweep_dir = Path(lead.sweep_dir)
        sweep = self.wait_for_the_others(lead)
        if self._cancelled.is_set():
            for group in launch:
                manifest.record_verdict(sweep_dir, group.run_id, SKIPPED, STOPPED_BEFORE_START)
            raise AirflowException(f"{lead.run_id}: {STOPPED_BEFORE_START}")
        if sweep.cancelled and sweep.entry(lead.run_id).status == PLANNED:
            reason = "the sweep was cancelled before this group started"
            for group in launch:
                manifest.record_verdict(sweep_dir, group.run_id, SKIPPED, reason)
            what = "group" if len(launch) == 1 else "duet"
            raise AirflowSkipException(f"the sweep was cancelled; this {what} does not start")
        # This try owns the groups from now on: an earlier try still stopping (a scheduler
        # that restarted reset it) can no longer decide their verdicts, then its files are
        # set aside.
        self._attempt = attempt_name(context)
        if self._attempt is not None:
            for group in launch:
                manifest.start_attempt(sweep_dir, group.run_id, self._attempt)
        self._started = True
        for group in launch:
            set_aside_earlier_attempt(group.run_dir)
            self.mark_started(group)

    def wait_for_the_others(self, group: GroupPlan) -> manifest.Manifest:
        """The sweep's manifest once no other group of it runs: two groups of a sweep never
        share the machines. One still running is being stopped (its task was marked failed,
        and Airflow starts the next group at once, before the stopped one's ``on_kill``):
        its verdict, ``cancelled``, then says whether this group starts at all. Waits at
        most :data:`STOPPING_WAIT_S` seconds, saying so every 10 s; stopped meanwhile, it
        returns at once."""
        sweep_dir = Path(group.sweep_dir)
        began = time.monotonic()
        said = 0.0
        while True:
            sweep = manifest.load(sweep_dir)
            others = manifest.still_running(sweep, group.run_id)
            waited = time.monotonic() - began
            if not others or self._cancelled.is_set():
                if waited >= 1:
                    self.log.info("%s: waited %.0f s for the group before it", group.run_id, waited)
                return sweep
            names = ", ".join(g.run_id for g in others)
            if waited >= STOPPING_WAIT_S:
                self.log.warning(
                    "%s: %s still runs after %.0f s; starting beside it (its times are shared)",
                    group.run_id,
                    names,
                    waited,
                )
                return sweep
            if waited >= said:
                self.log.info(
                    "%s: waiting for %s of this sweep to end before starting (%.0f s so far)",
                    group.run_id,
                    names,
                    waited,
                )
                said += 10.0
            time.sleep(0.5)

    def defer_to_triggerer(self, group: GroupPlan) -> None:
        """Hand the started Kubernetes group to a trigger; :meth:`resume` follows its event
        (:meth:`trigger_reentry` for a group that is one pod)."""
        running = self._running
        assert running is not None
        if fits_one_pod(group):
            self.log.info(
                "%s: one pod, waited for from the triggerer until it ends; this task holds "
                "no worker slot meanwhile",
                group.run_id,
            )
            running.defer()  # the pod operator creates the pod and defers
        trigger = running.trigger(
            group.timeout_s, self.group, owner=self._attempt, live_ingest_s=config.live_ingest_s()
        )
        self.log.info(
            "%s: waited for from the triggerer until it ends; this task holds no "
            "worker slot meanwhile",
            group.run_id,
        )
        self.defer(trigger=trigger, method_name="resume")

    def carry_on(self, context: Any, event: GroupEvent | dict[str, Any]) -> None:
        """Act on the trigger's ``running`` event (every ``SCALEBENCH_LIVE_INGEST_S``
        seconds while the group runs): load what the ranks wrote so far into the results
        database, pass rank 0's new lines into the task's log, and defer again to a
        trigger that goes on where this one stopped (same timeouts, same log place).

        When that fails (the launcher cannot be built: a setting changed meanwhile), the
        group is stopped where it can be and recorded as failed, and the task fails."""
        from operators.kubernetes.watch import GroupEvent

        group = self.plan
        typed = GroupEvent.of(event)
        launcher = None
        try:
            launcher = self.launcher_for(group, context, names=typed.names)
            launcher.resumed(typed.started_s, typed.attempt)
            self.publish(group, final=False)
            trigger = launcher.carry_on(
                typed, group.timeout_s, self.group, self._attempt, config.live_ingest_s()
            )
        except Exception as exc:
            self.fail_resumed(group, launcher, exc)
        self.defer(trigger=trigger, method_name="resume")

    def resume(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Act on the trigger's event: a ``running`` one through :meth:`carry_on`, which
        defers again; else how the group ended
        (:meth:`~operators.kubernetes.watch.Ending.to_event`), as the blocking wait does
        (:meth:`~operators.kubernetes.group.KubernetesGroup.conclude`): read the log tail,
        delete the Job, the Service and the NetworkPolicy, then record the verdict (even
        when reading or deleting fails: the Job's deadline and TTL are the safety net).
        A preempted group with retries left is started again and the task defers again."""
        from operators.kubernetes.watch import GroupEvent

        group = self.plan
        self._attempt = attempt_name(context)
        typed = GroupEvent.of(event)
        if typed.status == RUNNING:
            self.carry_on(context, typed)
        names, attempt = typed.names, typed.attempt
        launcher = None
        result = None
        try:
            launcher = self.launcher_for(group, context, names=names)
            launcher.resumed(typed.started_s, attempt)
            if typed.status == "error":
                launcher.delete()
            else:
                result = launcher.conclude(typed)
        except Exception as exc:  # the verdict is recorded all the same
            self.log.warning(
                "%s: could not delete Job %s and Service %s (%s); the Job's deadline and TTL will",
                group.run_id,
                names.job,
                names.service,
                exc,
            )
        if typed.status == "error":
            reason = launcher_failed(group, typed.reason)
            manifest.record_verdict(
                Path(group.sweep_dir), group.run_id, FAILED, reason, attempt=self._attempt
            )
            raise AirflowException(f"{group.run_id}: {reason}")
        if result is None:  # no launcher to conclude with: the event alone, without log tail
            result = GroupResult(
                world_size=group.world_size,
                status=typed.status,
                reason=typed.reason,
                exit_codes=list(typed.exit_codes),
                seconds=typed.seconds,
                first_failed_rank=typed.first_failed_rank,
                qos_class=typed.qos_class,
                image_digest=typed.image_digest,
                attempt=attempt,
            )
        if launcher is not None and launcher.may_retry(result.status):
            # Preempted with retries left: a new Job, and the task defers again.
            try:
                launcher.next_attempt(result)
            except Exception as exc:
                self.fail_resumed(group, launcher, exc)
            self._running = launcher
            self.defer_to_triggerer(group)
        return self.finish(group, result)

    def trigger_reentry(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Act on the pod trigger's event, for a group that is one pod (the pod operator's
        own resume method, whose name its deferral gives): on ``running`` load the live
        results and defer again; else let the pod operator end the pod (its last lines
        into the task log, the pod removed), and record the verdict the pod's last state
        gives. A preempted pod with retries left is started again as a new pod."""
        from operators.kubernetes import GroupNames
        from operators.kubernetes.watch import PodEvent

        group = self.plan
        self._attempt = attempt_name(context)
        typed = PodEvent.of(event)
        names = GroupNames(job=typed.job, service=typed.job)
        launcher = None
        try:
            launcher = self.launcher_for(group, context, names)
            launcher.resumed(typed.started_s, typed.attempt)
            if typed.running:
                self.publish(group, final=False)
            result = launcher.reentered(typed)  # a running event: deferred again, mostly
            if launcher.may_retry(result.status):
                launcher.next_attempt(result)
                self._running = launcher
                launcher.defer()
        except Exception as exc:
            self.fail_resumed(group, launcher, exc)
        return self.finish(group, result)

    def fail_resumed(self, group: GroupPlan, launcher: Any, error: Exception) -> NoReturn:
        """A resumed task could not act on its trigger's event (the launcher cannot be
        built, the cluster refused): stop what the group left running where it can, record
        the group failed naming the error, and fail the task."""
        if launcher is not None:
            launcher.stop()
        reason = launcher_failed(group, error)
        manifest.record_verdict(
            Path(group.sweep_dir), group.run_id, FAILED, reason, attempt=self._attempt
        )
        raise AirflowException(f"{group.run_id}: {reason}") from error

    def conclude(self, group: GroupPlan, result: GroupResult) -> tuple[str, str]:
        """Record the group's verdict in the manifest and the results database; the status
        and reason recorded."""
        status, reason = record_verdict(
            group, result, CANCELLED_REASON if self._cancelled.is_set() else "", self._attempt
        )
        log = self.log.info if status == SUCCEEDED else self.log.error
        log("%s: %s %s", group.run_id, status, reason)
        self.publish(group)
        return status, reason

    def finish(self, group: GroupPlan, result: GroupResult) -> dict[str, Any]:
        """Record the group's verdict in the manifest and the results database."""
        status, reason = self.conclude(group, result)
        if self._cancelled.is_set():
            raise AirflowException(f"{group.run_id}: cancelled; what it measured is kept")
        return {**self.group, "status": status, "reason": reason, "seconds": result.seconds}

    def mark_started(self, group: GroupPlan) -> None:
        """The group's row reads ``running`` from now on (a failure only delays it: the
        live loads and the final one store the run)."""
        from results_db.service import group_started

        try:
            group_started(config.database_url(), group.sweep_dir, group.run_id)
        except Exception as exc:
            self.log.warning(
                "%s: not marked running in the results database yet (%s)", group.run_id, exc
            )

    def publish(self, group: GroupPlan, final: bool = True) -> None:
        """Load the group into the results database, so the dashboard shows it while the
        sweep goes on: what its ranks wrote so far while it runs (``final`` false: the
        run reads as ``running``), everything once it ended. A failure here only delays
        it: the sweep's ingest loads every group again at the end."""
        from results_db.service import ingest, load_quietly

        try:
            if final:
                # The files were written just now by this very group: they are the run
                # (an earlier attempt's stored rows give way even when this one did less).
                ingest(config.database_url(), group.sweep_dir, only=[group.run_id], replace=True)
            else:
                load_quietly(config.database_url(), group.sweep_dir, group.run_id)
        except Exception as exc:  # the measurement is safe on disk either way
            self.log.warning(
                "%s: not loaded into the results database yet (%s); the sweep's ingest will",
                group.run_id,
                exc,
            )

    def launcher_for(self, group: GroupPlan, context: Any, names: Any = None) -> Any:
        """The group's launcher inside this task, as the launcher registry makes it
        (:func:`~operators.launcher.launcher_in_task`); a Kubernetes group's objects are
        named after the task instance (``names``: as an event gave them)."""
        task = TaskRun(context, self.task_id, self._attempt, config.live_ingest_s(), self.log.info)
        return launcher_in_task(group, task, names)

    def on_kill(self) -> None:
        """Called by Airflow (on SIGTERM) while :meth:`execute` waits: record the group
        ``cancelled``, then stop every rank. The verdict comes first, at once: Airflow may
        already be starting the sweep's next group, which must find the sweep stopped
        (stopping the ranks takes seconds)."""
        self._cancelled.set()
        running = [self._running] if self._running is not None else list(self._arms)
        if not self._started and not running:
            return  # execute has not taken the group: it records it skipped
        for group in self.launch:  # every arm of a duet
            manifest.record_verdict(
                Path(group.sweep_dir),
                group.run_id,
                CANCELLED,
                CANCELLED_REASON,
                attempt=self._attempt,
            )
        for launcher in running:
            launcher.stop()


def attempt_name(context: Any) -> str | None:
    """The Airflow try running the task (``try 2``), which owns its group while it runs;
    ``None`` without a task instance."""
    try_number = getattr(context.get("ti"), "try_number", None)
    return f"try {try_number}" if isinstance(try_number, int) else None


class LiveResults:
    """While a group runs, call ``publish`` every ``interval_s`` seconds on a thread of
    its own (0: never); leaving the ``with`` block stops it and waits for the call in
    progress, so the final load comes after the last partial one."""

    def __init__(self, publish: Callable[[], None], interval_s: float) -> None:
        self.publish = publish
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="live-results", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.publish()

    def __enter__(self) -> LiveResults:
        if self.interval_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
