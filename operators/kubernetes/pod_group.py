"""A group that fits on one node runs as one pod, through the Kubernetes provider's own
``KubernetesPodOperator``.

A group of ``k`` ranks on nodes of ``p`` ranks needs no Job when ``k <= p``: one pod holds
every rank (the node starter, ``python -m workers.node``, or ``workers.run`` for one rank),
they meet on the pod's loopback (``MASTER_ADDR`` ``127.0.0.1``), and no Service is needed.
:class:`PodGroup` renders that pod from the same template as a Job's pods
(:func:`~operators.kubernetes.manifests.job_manifest`: image, resources and ``k`` GPUs,
volumes, security context, the site's tolerations, priority and runtime class, pull
secrets, QoS) and hands it to :class:`GroupPodOperator`, the provider's operator with two
additions: it reads the pod's last state before removing it (``on_finish_action``), which
:func:`~operators.kubernetes.pod_status.pod_verdict` turns into the group's verdict, and
it defers to :class:`GroupPodTrigger`.

What the Job's launcher guarantees holds here too:

- the verdict names the failed rank with its status (``diverged`` for status 3), the
  scheduler's words for a pod that cannot be scheduled, the kubelet's for an image that
  cannot be pulled, ``timed_out`` at the pod's deadline (``activeDeadlineSeconds``, the
  group's timeout), ``preempted`` for a disrupted pod (run again up to
  ``SCALEBENCH_K8S_PREEMPTION_RETRIES`` times, as a new pod), ``not_admitted`` for a pod
  Kueue never admitted (the pod carries the queue's label; Kueue gates it);
- the pod operator streams the ranks' output into the Airflow task log;
- the group's NetworkPolicy (the pod reaches only the cluster's DNS and accepts nothing
  from other pods) is created before the pod and deleted after it;
- deferred (``SCALEBENCH_K8S_DEFERRABLE``), the task waits in Airflow's triggerer;
  every ``SCALEBENCH_LIVE_INGEST_S`` seconds while the pod runs the trigger fires a
  ``running`` event, on which the task loads the live results and defers again;
- stopping the task (``on_kill``, or the trigger's ``on_kill`` while deferred) deletes the
  pod and the policy and records ``cancelled``.

The command line (no Airflow task) runs a one-node group as an Indexed Job of one pod:
the pod operator needs a task instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import TriggerEvent

from operators.group import GroupResult
from operators.kubernetes.constants import CONTAINER, GROUP_LABEL, LOG_TAIL_LINES, QUEUE_LABEL
from operators.kubernetes.group import KubernetesGroup, log_text
from operators.kubernetes.pod_status import (
    exit_code,
    get_field,
    image_digest,
    log_prefix,
    pod_verdict,
    qos_class,
)
from operators.kubernetes.trigger import record_cancelled
from scalebench.statuses import FAILED, RUNNING, SUCCEEDED

if TYPE_CHECKING:
    from operators.kubernetes.names import GroupNames
    from operators.kubernetes.settings import KubernetesSettings
    from operators.kubernetes.watch import PodEvent
    from scalebench.sweep import GroupPlan


class GroupPodOperator(KubernetesPodOperator):
    """The provider's pod operator, which also keeps the pod's last state (``final_pod``:
    read just before the pod is removed) and defers to :class:`GroupPodTrigger`
    (``trigger_extra``: what that trigger adds to the provider's)."""

    final_pod: Any = None
    last_lines: list[str]
    trigger_extra: dict[str, Any]

    def cleanup(
        self,
        pod: Any,
        remote_pod: Any,
        xcom_result: dict | None = None,
        context: Any = None,
    ) -> None:
        self.last_lines = []
        if pod is not None:
            try:
                self.final_pod = self.pod_manager.read_pod(pod)
            except Exception:  # gone already: the last state read is the last known
                self.final_pod = remote_pod
            if get_field(self.final_pod, "status", "phase") == "Failed":
                self.last_lines = self._last_lines(pod)
        super().cleanup(pod, self.final_pod or remote_pod, xcom_result, context)

    def _last_lines(self, pod: Any) -> list[str]:
        """The failed pod's last :data:`LOG_TAIL_LINES` lines, read before it is removed
        (none when they cannot be read: logs are for people, never the verdict's cause)."""
        try:
            response = self.client.read_namespaced_pod_log(
                get_field(pod, "metadata", "name"),
                get_field(pod, "metadata", "namespace"),
                container=CONTAINER,
                tail_lines=LOG_TAIL_LINES,
                _preload_content=False,
            )
        except Exception as exc:
            self.log.warning("could not read the failed pod's last lines: %s", exc)
            return []
        return log_text(response).splitlines()

    def defer(self, *, trigger: Any, method_name: str, kwargs: Any = None, timeout: Any = None):
        _, arguments = trigger.serialize()
        super().defer(
            trigger=GroupPodTrigger(**arguments, **self.trigger_extra),
            method_name=method_name,
            kwargs=kwargs,
            timeout=timeout,
        )


class GroupPodTrigger(KubernetesPodTrigger):
    """The provider's pod trigger, which also fires a ``running`` event every
    ``live_ingest_s`` seconds (0: never) once the pod runs, and whose ``on_kill`` (the user
    stopped the deferred task) deletes the group's NetworkPolicy ``policy`` and records the
    planned ``group`` (as XCom carries it) ``cancelled``, signed by ``owner`` (the try)."""

    def __init__(
        self,
        *,
        group: dict[str, Any] | None = None,
        owner: str | None = None,
        policy: str = "",
        live_ingest_s: float = 0.0,
        **arguments: Any,
    ) -> None:
        super().__init__(**arguments)
        self.group = group
        self.owner = owner
        self.policy = policy
        self.live_ingest_s = live_ingest_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, arguments = super().serialize()
        extra = {
            "group": self.group,
            "owner": self.owner,
            "policy": self.policy,
            "live_ingest_s": self.live_ingest_s,
        }
        return f"{type(self).__module__}.{type(self).__qualname__}", {**arguments, **extra}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        events = super().run()
        ending = asyncio.ensure_future(anext(events))
        while True:
            done, _ = await asyncio.wait({ending}, timeout=self.live_ingest_s or None)
            if done:
                yield ending.result()
                return
            if get_field(await self._get_pod(), "status", "phase") == "Running":
                ending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ending
                await events.aclose()
                self._fired_event = True
                yield TriggerEvent(
                    {
                        "status": RUNNING,
                        "namespace": self.pod_namespace,
                        "name": self.pod_name,
                        "last_log_time": self.last_log_time,
                        **self.trigger_kwargs,
                    }
                )
                return

    async def on_kill(self) -> None:
        try:
            await super().on_kill()
            if self.policy:
                from kubernetes_asyncio.client import NetworkingV1Api

                async with self.hook.get_conn() as api:
                    try:
                        await NetworkingV1Api(api).delete_namespaced_network_policy(
                            self.policy, self.pod_namespace
                        )
                    except Exception as exc:
                        if getattr(exc, "status", None) != 404:
                            self.log.warning(
                                "could not delete NetworkPolicy %s: %s", self.policy, exc
                            )
        finally:  # recorded even when the cluster did not answer
            await record_cancelled(self.group, self.owner)


class PodGroup(KubernetesGroup):
    """The planned one-node ``group`` as one pod, run by :class:`GroupPodOperator` for the
    Airflow task whose ``context`` is given (``task_id``: the task's). The arguments are
    :class:`~operators.kubernetes.group.KubernetesGroup`'s; ``owner`` is the Airflow try
    that runs the group and ``live_ingest_s`` (seconds; 0: never) how often a deferred wait
    wakes the task to load the live results.

    It takes from :class:`~operators.kubernetes.group.KubernetesGroup` the reading of the
    plan, the names, the manifests and the bookkeeping of attempts (``may_retry``,
    ``next_attempt``); the pod operator replaces the Job's following (``trigger``,
    ``carry_on``, ``conclude`` are the Job's and are not called on a pod)."""

    def __init__(
        self,
        group: GroupPlan,
        *,
        names: GroupNames,
        settings: KubernetesSettings,
        context: Any,
        task_id: str = "train",
        owner: str | None = None,
        live_ingest_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        **options: Any,
    ) -> None:
        if group.shape.nodes != 1:
            raise ValueError(f"a group on {group.shape.nodes} nodes is no single pod")
        super().__init__(group, names=names, settings=settings, clock=clock, **options)
        self.context = context
        self.task_id = task_id
        self.owner = owner
        self.live_ingest_s = live_ingest_s
        self._operator: GroupPodOperator | None = None

    # -- the pod

    def pod_manifest(self) -> dict[str, Any]:
        """The group's pod: a Job pod's template (:meth:`job_manifest`) named after the
        group, with the pod's own deadline, its ranks meeting on its loopback, labelled for
        its NetworkPolicy (and for Kueue's queue, when one is set)."""
        job = self.job_manifest()
        template = job["spec"]["template"]
        spec = dict(template["spec"])
        spec.pop("subdomain", None)  # no Service: no rank looks another pod up
        spec.pop("affinity", None)  # the anti-affinity keeps a Job's pods apart; one pod
        if "activeDeadlineSeconds" in job["spec"]:
            spec["activeDeadlineSeconds"] = job["spec"]["activeDeadlineSeconds"]
        container = dict(spec["containers"][0])
        container["env"] = [
            {"name": "MASTER_ADDR", "value": "127.0.0.1"} if e["name"] == "MASTER_ADDR" else e
            for e in container["env"]
        ]
        spec["containers"] = [container]
        labels = {**template["metadata"]["labels"], GROUP_LABEL: self.names.job}
        if self.settings.queue_name:
            labels[QUEUE_LABEL] = self.settings.queue_name
        metadata: dict[str, Any] = {
            "name": self.names.job,
            "namespace": self.settings.namespace,
            "labels": labels,
        }
        if template["metadata"].get("annotations"):
            metadata["annotations"] = dict(template["metadata"]["annotations"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def network_policy_manifest(self) -> dict:
        from operators.kubernetes.manifests import network_policy_manifest

        return network_policy_manifest(
            self.names, self.settings, run_id=self.run_id, selector=(GROUP_LABEL, self.names.job)
        )

    def operator(self) -> GroupPodOperator:
        """The pod operator that runs this attempt's pod (built once per attempt)."""
        if self._operator is None:
            wait_s = max(1, math.ceil(self.settings.schedule_timeout_s))
            if self.settings.queue_name:  # Kueue's gate holds the pod until it admits it
                wait_s += max(1, math.ceil(self.settings.admission_timeout_s))
            operator = GroupPodOperator(
                task_id=self.task_id,
                name=self.names.job,
                random_name_suffix=False,  # the group's name is unique per try and attempt
                namespace=self.settings.namespace,
                kubernetes_conn_id=self.settings.conn_id,
                pod_template_dict=self.pod_manifest(),
                base_container_name=CONTAINER,
                deferrable=self.settings.deferrable,
                durable=False,  # a retry starts a pod of its own, never adopts an earlier one
                on_finish_action="delete_pod",
                get_logs=True,
                startup_timeout_seconds=wait_s,
                schedule_timeout_seconds=wait_s,
                poll_interval=self.poll_interval_s,
                startup_check_interval_seconds=self.poll_interval_s,
                base_container_status_polling_interval=self.poll_interval_s,
                log_events_on_failure=True,
                # Carried into every event: which attempt, started when (wall-clock s).
                trigger_kwargs={
                    "job": self.names.job,
                    "attempt": self.attempt,
                    "started_s": self._started,
                },
            )
            operator.trigger_extra = {
                "group": self.plan.to_xcom(),
                "owner": self.owner,
                "policy": self.names.job,
                "live_ingest_s": self.live_ingest_s,
            }
            self._operator = operator
        return self._operator

    # -- life cycle

    def start(self) -> None:
        """Create the group's NetworkPolicy; the pod operator creates the pod."""
        with self._lock:
            if self._stopping.is_set():
                raise RuntimeError(f"group {self.names.job} was stopped before it started")
            self.connect()
            self._started = self._clock()
            self._networking.create_namespaced_network_policy(
                self.settings.namespace, self.network_policy_manifest()
            )
            self._created.append("policy")
        self.sink(
            f"[kubernetes] starting pod {self.settings.namespace}/{self.names.job} of "
            f"{self.world_size} rank(s) through the KubernetesPodOperator"
            + (f" (attempt {self.attempt})" if self.attempt > 1 else "")
        )

    def defer(self) -> None:
        """Create the pod and defer the task to :class:`GroupPodTrigger` (raises
        ``TaskDeferred``; Airflow resumes the task's ``trigger_reentry``)."""
        self.operator().execute(self.context)

    def wait(self, timeout_s: float) -> GroupResult:
        """Run the pod to its end in this process (the pod operator's blocking mode); a
        preempted pod is run again while retries are left. The policy is deleted however
        it ends. ``timeout_s`` is the pod's own deadline already (the group's timeout)."""
        while True:
            try:
                result = self._run_once()
            finally:
                self.delete()
            if self._stopping.is_set() or not self.may_retry(result.status):
                return result
            self.next_attempt(result)

    def _run_once(self) -> GroupResult:
        return self._ended(lambda: self.operator().execute(self.context))

    def _ended(self, act: Callable[[], Any]) -> GroupResult:
        """Let the pod operator ``act`` (run the pod, or act on a trigger's event). Unless it
        defers (``TaskDeferred`` passes through), the pod has ended and is removed: the
        result is its last state's verdict (what the operator said when that tells nothing)."""
        message = ""
        try:
            act()
        except AirflowException as exc:
            message = str(exc)
        except Exception as exc:  # the pod never started (launch timeout), the API failed
            message = f"{type(exc).__name__}: {exc}"
        return self.result(message)

    def resumed(self, started_s: float, attempt: int = 1) -> PodGroup:
        """This group as :meth:`start` left it (its policy created at ``started_s``,
        wall-clock seconds, as attempt ``attempt``), for the task resumed by its trigger."""
        self.connect()
        self._started = started_s
        self.attempt = attempt
        self._created = ["policy"]
        return self

    def reentered(self, event: PodEvent) -> GroupResult:
        """Act on the trigger's event as the pod operator does. An ending one: the pod's last
        lines into the task log, the pod removed, then the verdict. A ``running`` one: defer
        again to a trigger of the same pod, its log followed on from where the last stopped
        (raises ``TaskDeferred``), unless the pod ended meanwhile: then as an ending one.
        The policy is deleted once the pod has ended, however it ended."""
        operator = self.operator()
        if event.running:

            def act() -> None:
                operator.pod = operator.hook.get_pod(event.name, event.namespace)
                operator.invoke_defer_method(
                    last_log_time=event.last_log_time, context=self.context
                )

        else:

            def act() -> None:  # the provider reads its own event
                operator.trigger_reentry(self.context, dict(event.payload))

        result = self._ended(act)  # a deferral passes through, the policy kept
        self.delete()
        return result

    def result(self, message: str = "") -> GroupResult:
        """The group's result from the pod's last state (``message``: what the pod operator
        said when it failed; the reason when the pod itself says nothing)."""
        operator = self.operator()
        pod = operator.final_pod or operator.pod
        verdict = None
        if pod is not None:
            verdict = pod_verdict(
                pod, self.ranks_per_node, schedule_timeout_s=self.settings.schedule_timeout_s
            )
        if verdict is None:
            status = FAILED if message else SUCCEEDED
            verdict = (status, message.splitlines()[0] if message else "", None)
        status, reason, first_failed = verdict
        code = None if pod is None else exit_code(pod)
        prefix = log_prefix(0, self.ranks_per_node)  # a node's starter names each line's rank
        tail = [prefix + line for line in getattr(operator, "last_lines", [])]
        started = self._started if self._started is not None else self._clock()
        return GroupResult(
            world_size=self.world_size,
            status=status,
            reason=reason,
            exit_codes=[code] * self.world_size,
            seconds=max(0.0, self._clock() - started),
            first_failed_rank=first_failed,
            log_tail=tail,
            qos_class="" if pod is None else qos_class([pod]),
            image_digest="" if pod is None else image_digest([pod]),
            attempt=self.attempt,
        )

    def stop(self) -> None:
        """Delete the pod (the pod operator's ``on_kill``) and the policy; nothing more
        starts. Idempotent."""
        self._stopping.set()
        if self._operator is not None:
            self._operator.on_kill()
        self.delete()

    def next_attempt(self, result: GroupResult) -> None:
        """After a preempted attempt: record it, and start the next as a new pod."""
        self._operator = None
        super().next_attempt(result)
