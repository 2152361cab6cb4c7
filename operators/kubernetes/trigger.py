"""Watching a running group from Airflow's triggerer: :class:`GroupTrigger`.

The training task creates the group's Service and Job
(:meth:`~operators.kubernetes.group.KubernetesGroup.start`) and defers to this
trigger, so no Airflow worker slot is held while the group trains (hours for
the larger tasks). Every ``poll_interval_s`` seconds the trigger reads the Job
and its pods through the provider's :class:`AsyncKubernetesHook` (two API
calls, and a third for rank 0's log once it runs), copies rank 0's new lines
into the task's log, applies the rules of :class:`~operators.kubernetes.watch.GroupWatch`
and, once they give a verdict, fires one event that resumes the task
(:meth:`~operators.training_group.TrainingGroupOperator.resume`), which deletes
the Job and the Service and records the verdict. Every
``live_ingest_s`` seconds it also loads what the ranks wrote so far into the
results database, as the blocking wait does.

A user who stops the deferred task (marks it failed, clears it) makes Airflow
call :meth:`GroupTrigger.on_kill`: the Job and the Service are deleted and the
group is recorded as ``cancelled``. A triggerer that restarts calls neither:
the trigger is built again from :meth:`GroupTrigger.serialize` and goes on
watching the same Job, which kept running meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from operators.kubernetes.constants import (
    CONTAINER,
    JOB_NAME_LABEL,
    LOG_TAIL_LINES,
    MAX_API_ERRORS,
    SETTLE_S,
)
from operators.kubernetes.pod_status import get_field, log_prefix, pod_rank
from operators.kubernetes.watch import SETTLE, GroupWatch, Rank0Log, Verdict, rank0_pod

CANCELLED_REASON = "the Airflow task was stopped"


def now_s() -> float:
    """Wall-clock seconds: the clock ``started_s`` was read from (replaceable in tests)."""
    return time.time()


class GroupTrigger(BaseTrigger):
    """Watch the Job ``job`` (``world_size`` pods) and its Service ``service`` in ``namespace``.

    ``started_s`` is the wall-clock time (seconds) the Job was created;
    ``timeout_s`` and ``schedule_timeout_s`` (seconds) count from it.
    ``group`` is the planned group as XCom carries it (its run id and sweep
    directory: where :meth:`on_kill` records ``cancelled`` and what the live
    loads load); ``owner`` the Airflow try that started it, which signs that verdict
    (:func:`scalebench.manifest.start_attempt`), so that a superseded try's trigger
    cannot cancel its successor's group. Airflow stores these arguments once, when the
    task defers: a trigger built again after a triggerer restart copies rank 0's log
    from its start again.
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
        live_ingest_s: float = 0.0,
        group: dict[str, Any] | None = None,
        queue_name: str = "",
        admission_timeout_s: float = 3600.0,
        attempt: int = 1,
        owner: str | None = None,
        ranks_per_node: int = 1,
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
        self.live_ingest_s = live_ingest_s
        self.group = group
        self.queue_name = queue_name
        self.admission_timeout_s = admission_timeout_s
        self.attempt = attempt
        self.owner = owner
        self.rank0 = Rank0Log()  # what of rank 0's log this trigger copied so far
        self._rank0_seen: list[str] = []

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
                "live_ingest_s": self.live_ingest_s,
                "group": self.group,
                "queue_name": self.queue_name,
                "admission_timeout_s": self.admission_timeout_s,
                "attempt": self.attempt,
                "owner": self.owner,
                "ranks_per_node": self.ranks_per_node,
            },
        )

    def _hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        return AsyncKubernetesHook(conn_id=self.conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
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
        )
        try:
            async with self._hook().get_conn() as api:
                batch, core = BatchV1Api(api), CoreV1Api(api)
                verdict, pods = await self._watch(watch, batch, core)
                tail: list[str] = []
                if verdict.first_failed_rank is not None:
                    tail = await self._failed_tail(core, pods, verdict.first_failed_rank)
            event = self._event(verdict, watch, pods, tail)
        except Exception as exc:  # the resumed task deletes the group and says why
            event = self._event(Verdict("error", str(exc)), watch, [])
        yield TriggerEvent(event)

    async def _watch(self, watch: GroupWatch, batch: Any, core: Any) -> tuple[Verdict, list[Any]]:
        """Look every ``poll_interval_s`` seconds until the rules give a verdict."""
        from aiohttp import ClientError
        from kubernetes_asyncio.client.exceptions import ApiException

        api_errors, last_load = 0, time.monotonic()
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
                        "failed", f"Job {self.namespace}/{self.job} was deleted by someone else"
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
            await self._follow_rank0(core, pods)
            look = watch.look(job, pods, now_s())
            for note in watch.take_notes():
                self.log.info("[kubernetes] Job %s/%s: %s", self.namespace, self.job, note)
            if isinstance(look, Verdict):
                return look, pods
            if self.live_ingest_s > 0 and time.monotonic() - last_load >= self.live_ingest_s:
                last_load = time.monotonic()
                await self._load_so_far()
            await asyncio.sleep(
                min(SETTLE_S, self.poll_interval_s) if look == SETTLE else self.poll_interval_s
            )

    def _event(
        self, verdict: Verdict, watch: GroupWatch, pods: list[Any], tail: list[str] | None = None
    ) -> dict[str, Any]:
        return {
            "status": verdict.status,
            "reason": verdict.reason,
            "first_failed_rank": verdict.first_failed_rank,
            "exit_codes": watch.exit_codes(pods),
            "seconds": now_s() - self.started_s,
            "log_tail": tail or self._rank0_seen[-LOG_TAIL_LINES:],
            "job": self.job,
            "service": self.service,
            "started_s": self.started_s,
            "qos_class": watch.qos,
            "attempt": self.attempt,
        }

    async def _read_log(self, core: Any, pod_name: str, **options: Any) -> str | None:
        try:
            text = await core.read_namespaced_pod_log(
                pod_name, self.namespace, container=CONTAINER, **options
            )
            return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
        except Exception as exc:  # logs are for people; never let them end the watch
            self.log.warning("could not read the log of pod %s: %s", pod_name, exc)
            return None

    async def _follow_rank0(self, core: Any, pods: list[Any]) -> None:
        """Copy rank 0's new complete lines into the task's log."""
        pod = rank0_pod(pods)
        if pod is None:
            return
        text = await self._read_log(
            core, get_field(pod, "metadata", "name"), **self.rank0.options(pod, now_s())
        )
        prefix = log_prefix(0, self.ranks_per_node)
        for line in self.rank0.new_lines(pod, text) if text is not None else []:
            self.log.info("%s%s", prefix, line)
            self._rank0_seen.append(f"{prefix}{line}")
        del self._rank0_seen[: -LOG_TAIL_LINES * 2]

    async def _failed_tail(self, core: Any, pods: list[Any], rank: int) -> list[str]:
        index = rank // self.ranks_per_node  # the pod that ran it
        pod = next((p for p in pods if pod_rank(p) == index), None)
        if pod is None:
            return []
        text = await self._read_log(
            core, get_field(pod, "metadata", "name"), tail_lines=LOG_TAIL_LINES
        )
        prefix = log_prefix(rank, self.ranks_per_node)
        return [f"{prefix}{line}" for line in (text or "").splitlines()]

    async def _load_so_far(self) -> None:
        """Load what the ranks wrote so far into the results database (a thread: it blocks)."""
        if self.group is None:
            return
        from results_db.service import load_quietly
        from scalebench import config
        from scalebench.sweep import GroupPlan

        group = GroupPlan.from_xcom(self.group)
        try:
            await asyncio.to_thread(
                load_quietly, config.database_url(), group.sweep_dir, group.run_id
            )
        except Exception as exc:  # the measurement is safe on disk either way
            self.log.warning("not loaded into the results database yet (%s)", exc)

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
            if self.group is not None:
                from scalebench import manifest
                from scalebench.sweep import GroupPlan

                group = GroupPlan.from_xcom(self.group)
                await asyncio.to_thread(
                    manifest.record_verdict,
                    Path(group.sweep_dir),
                    group.run_id,
                    "cancelled",
                    CANCELLED_REASON,
                    attempt=self.owner,
                )


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
