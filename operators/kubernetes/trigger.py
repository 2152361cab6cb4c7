"""Waiting for a running group from Airflow's triggerer: :class:`GroupTrigger`.

The training task creates the group's Service and Job
(:meth:`~operators.kubernetes.objects.GroupObjects.start`) and defers to this
trigger, so no Airflow worker slot is held while the group trains (hours for
the larger tasks). The trigger only waits, as the Kubernetes provider's own
triggers do: every ``poll_interval_s`` seconds it reads the Job and its pods
through the provider's
:class:`~airflow.providers.cncf.kubernetes.hooks.kubernetes.AsyncKubernetesHook` (one API
call while a queued Job waits for admission, two after) and applies the rules of
:class:`~operators.kubernetes.watch.GroupWatch`. It fires one event, of two kinds:

- ``status`` ``running``, every ``live_ingest_s`` seconds while the group's pods
  exist (``SCALEBENCH_LIVE_INGEST_S``; 0: never), as the provider's
  ``KubernetesPodOperator`` does with its ``logging_interval``: with what the looks
  learnt (``watch``, :meth:`~operators.kubernetes.watch.GroupWatch.state`) and rank
  0's pod. The resumed task
  (:meth:`~operators.training_group.TrainingGroupOperator.resume`) loads what the
  ranks wrote so far into the results database, passes rank 0's new lines into
  its log (:meth:`~operators.kubernetes.group.KubernetesGroup.carry_on`, from the
  place ``rank0_log`` the event carries) and defers again, to a trigger that goes on
  with that state: its timeouts count from the same times, so verdicts are those
  of one uninterrupted wait;
- how the group ended, once the rules give a verdict (its
  :class:`~operators.kubernetes.watch.Ending`: the verdict ``status``
  (``succeeded``, ``failed``, ``diverged``, ``timed_out``, ``preempted``,
  ``not_admitted``, ...) and its ``reason`` in words, the first failed rank and the
  pods whose logs go with the verdict, each rank's exit code, the pods' QoS class and
  resolved image, the seconds since the Job was created), or ``status`` ``error`` with the reason
  when the cluster could not be read. The resumed task acts on it through
  :meth:`~operators.kubernetes.group.KubernetesGroup.conclude`, as the blocking
  wait does: it passes on rank 0's last new lines, reads the log tail, deletes the
  Job, the Service and the NetworkPolicy, and records the verdict.

Both are a :class:`GroupEvent`, fired as its JSON payload and read back typed by the
resumed task. The trigger reads no log and loads no results; its events carry rank 0's log
place (``rank0_log``) unchanged for the task that reads the log.

A user who stops the deferred task (marks it failed, clears it) makes Airflow
call :meth:`GroupTrigger.on_kill`, the one thing run where no task is: the Job,
the Service and the NetworkPolicy are deleted and the group is recorded as
``cancelled``. A triggerer that restarts calls neither: the trigger is built
again from :meth:`GroupTrigger.serialize` and goes on waiting for the same Job,
which kept running meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from operators.kubernetes.constants import JOB_NAME_LABEL, MAX_API_ERRORS, SETTLE_S
from operators.kubernetes.pod_status import get_field
from operators.kubernetes.watch import SETTLE, GroupEvent, GroupWatch, Verdict, rank0_pod
from scalebench.statuses import CANCELLED, FAILED, RUNNING

CANCELLED_REASON = "the Airflow task was stopped"


def now_s() -> float:
    """Wall-clock seconds: the clock ``started_s`` was read from (replaceable in tests)."""
    return time.time()


class GroupTrigger(BaseTrigger):
    """Wait for the Job ``job`` (``world_size`` ranks on pods of ``ranks_per_node``) and
    its Service ``service`` in ``namespace`` to end.

    ``started_s`` is the wall-clock time (seconds) the Job was created;
    ``timeout_s`` and ``schedule_timeout_s`` (seconds) count from it.
    ``group`` is the planned group as XCom carries it (its run id and sweep
    directory: where :meth:`on_kill` records ``cancelled``); ``owner`` the Airflow
    try that started it, which signs that verdict
    (:func:`scalebench.manifest.start_attempt`), so that a superseded try's trigger
    cannot cancel its successor's group.

    ``live_ingest_s`` (seconds; 0: never) is how long the trigger waits, while the
    group's pods exist, before it fires a ``running`` event instead of waiting on.
    ``watch_state`` is what the looks of the trigger before this one learnt
    (:meth:`~operators.kubernetes.watch.GroupWatch.state`: when the Job was admitted,
    ...), ``rank0_log`` where rank 0's log was passed on up to
    (:meth:`~operators.kubernetes.watch.Rank0Log.position`; ``None``: it is not
    followed); both come back in the event.
    """

    def __init__(
        self,
        *,
        conn_id: str,
        namespace: str,
        job: str,
        service: str,
        world_size: int,
        started_s: float,
        timeout_s: float,
        schedule_timeout_s: float,
        poll_interval_s: float = 5.0,
        group: dict[str, Any] | None = None,
        queue_name: str = "",
        admission_timeout_s: float = 3600.0,
        attempt: int = 1,
        owner: str | None = None,
        ranks_per_node: int = 1,
        live_ingest_s: float = 0.0,
        watch_state: dict[str, Any] | None = None,
        rank0_log: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.ranks_per_node = ranks_per_node  # ranks in each pod (one pod per node)
        self.conn_id = conn_id
        self.namespace = namespace
        self.job = job
        self.service = service
        self.world_size = world_size
        self.started_s = started_s
        self.timeout_s = timeout_s
        self.schedule_timeout_s = schedule_timeout_s
        self.poll_interval_s = poll_interval_s
        self.group = group
        self.queue_name = queue_name
        self.admission_timeout_s = admission_timeout_s
        self.attempt = attempt
        self.owner = owner
        self.live_ingest_s = live_ingest_s
        self.watch_state = watch_state
        self.rank0_log = rank0_log

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "namespace": self.namespace,
                "job": self.job,
                "service": self.service,
                "world_size": self.world_size,
                "started_s": self.started_s,
                "timeout_s": self.timeout_s,
                "schedule_timeout_s": self.schedule_timeout_s,
                "poll_interval_s": self.poll_interval_s,
                "group": self.group,
                "queue_name": self.queue_name,
                "admission_timeout_s": self.admission_timeout_s,
                "attempt": self.attempt,
                "owner": self.owner,
                "ranks_per_node": self.ranks_per_node,
                "live_ingest_s": self.live_ingest_s,
                "watch_state": self.watch_state,
                "rank0_log": self.rank0_log,
            },
        )

    def _hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        return AsyncKubernetesHook(conn_id=self.conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait for the verdict, or for ``live_ingest_s`` seconds while the pods exist, and
        fire the one event that describes it."""
        from kubernetes_asyncio.client import BatchV1Api, CoreV1Api

        watch = GroupWatch(
            world_size=self.world_size,
            namespace=self.namespace,
            job=self.job,
            started_s=self.started_s,
            timeout_s=self.timeout_s,
            schedule_timeout_s=self.schedule_timeout_s,
            queue_name=self.queue_name,
            admission_timeout_s=self.admission_timeout_s,
            ranks_per_node=self.ranks_per_node,
            **(self.watch_state or {}),
        )
        try:
            async with self._hook().get_conn() as api:
                verdict, pods = await self._watch(watch, BatchV1Api(api), CoreV1Api(api))
        except Exception as exc:  # the resumed task deletes the group and says why
            verdict, pods = Verdict("error", str(exc)), []
        if verdict is None:
            yield TriggerEvent(self._event(**running_event(watch, pods)).to_payload())
        else:
            ending = watch.ending(verdict, pods, now_s())
            yield TriggerEvent(self._event(**ending.to_event()).to_payload())

    async def _watch(
        self, watch: GroupWatch, batch: Any, core: Any
    ) -> tuple[Verdict | None, list[Any]]:
        """Look every ``poll_interval_s`` seconds until the rules give a verdict, or, once
        ``live_ingest_s`` seconds passed, until a look without one sees pods (the verdict
        is then ``None``): it, and the pods of the look that gave it."""
        from aiohttp import ClientError
        from kubernetes_asyncio.client.exceptions import ApiException

        api_errors, began = 0, time.monotonic()
        while True:
            try:
                job = await batch.read_namespaced_job(self.job, self.namespace)
                pods = []
                if watch.needs_pods(job):
                    pod_list = await core.list_namespaced_pod(
                        self.namespace, label_selector=f"{JOB_NAME_LABEL}={self.job}"
                    )
                    pods = list(get_field(pod_list, "items") or [])
            except (TimeoutError, ApiException, ClientError, OSError) as exc:
                code = getattr(exc, "status", None)
                if code == 404:
                    return Verdict(
                        FAILED, f"Job {self.namespace}/{self.job} was deleted by someone else"
                    ), []
                api_errors += 1
                if code in (401, 403) or api_errors > MAX_API_ERRORS:
                    where = f"{self.namespace}/{self.job}"
                    raise RuntimeError(
                        f"reading Job {where} failed {api_errors} time(s) in a row: {exc}"
                    ) from exc
                self.log.warning("reading the group failed (%s); trying again", exc)
                await asyncio.sleep(self.poll_interval_s)
                continue
            api_errors = 0
            look = watch.look(job, pods, now_s())
            for note in watch.take_notes():
                self.log.info("[kubernetes] Job %s/%s: %s", self.namespace, self.job, note)
            if isinstance(look, Verdict):
                return look, pods
            interval = self.live_ingest_s
            if look is None and pods and interval > 0 and time.monotonic() - began >= interval:
                return None, pods
            await asyncio.sleep(
                min(SETTLE_S, self.poll_interval_s) if look == SETTLE else self.poll_interval_s
            )

    def _event(self, **ending: Any) -> GroupEvent:
        """The event: ``ending`` (how the group ended, or that it runs), which Job of which
        attempt it is about, and rank 0's log place as this trigger got it."""
        return GroupEvent.from_payload(
            {
                **ending,
                "job": self.job,
                "service": self.service,
                "started_s": self.started_s,
                "attempt": self.attempt,
                "rank0_log": self.rank0_log,
            }
        )

    async def on_kill(self) -> None:
        """The user stopped the deferred task: delete the Job, the Service and the
        NetworkPolicy, record ``cancelled``. Not called when the triggerer merely restarts."""
        from kubernetes_asyncio.client import BatchV1Api, CoreV1Api, NetworkingV1Api

        try:
            async with self._hook().get_conn() as api:
                await delete_group(
                    BatchV1Api(api),
                    CoreV1Api(api),
                    NetworkingV1Api(api),
                    self.namespace,
                    self.job,
                    self.service,
                    warn=self.log.warning,
                )
        finally:  # recorded even when the cluster did not answer
            await record_cancelled(self.group, self.owner)


async def record_cancelled(group: dict[str, Any] | None, owner: str | None) -> None:
    """Record the planned ``group`` (as XCom carries it; ``None``: nothing to record)
    ``cancelled`` in its sweep's manifest, signed by the try ``owner`` that ran it."""
    if group is None:
        return
    from scalebench import manifest
    from scalebench.sweep import GroupPlan

    plan = GroupPlan.from_xcom(group)
    await asyncio.to_thread(
        manifest.record_verdict,
        Path(plan.sweep_dir),
        plan.run_id,
        CANCELLED,
        CANCELLED_REASON,
        attempt=owner,
    )


def running_event(watch: GroupWatch, pods: list[Any]) -> dict[str, Any]:
    """The ``running`` event's own fields: what ``watch``'s looks learnt, and rank 0's
    pod among ``pods`` (its name and phase, ``None`` while its log cannot be read)."""
    pod = rank0_pod(pods)
    return {
        "status": RUNNING,
        "reason": "",
        "watch": watch.state(),
        "rank0_pod": None if pod is None else get_field(pod, "metadata", "name"),
        "rank0_phase": None if pod is None else get_field(pod, "status", "phase"),
    }


async def delete_group(
    batch: Any, core: Any, networking: Any, namespace: str, job: str, service: str, *, warn: Any
) -> None:
    """Delete the Job (its pods in the background), the Service and the group's
    NetworkPolicy (named as the Job); 404 counts as deleted."""
    calls = (
        (
            "job",
            job,
            lambda: batch.delete_namespaced_job(job, namespace, propagation_policy="Background"),
        ),
        ("service", service, lambda: core.delete_namespaced_service(service, namespace)),
        (
            "networkpolicy",
            job,
            lambda: networking.delete_namespaced_network_policy(job, namespace),
        ),
    )
    for kind, name, call in calls:
        try:
            await call()
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                warn(
                    f"could not delete {kind} {namespace}/{name} ({exc}); delete it with: "
                    f"kubectl -n {namespace} delete {kind} {name}"
                )
