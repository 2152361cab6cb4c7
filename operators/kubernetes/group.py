"""One training group on the cluster, through the interface of the local launcher:
:class:`KubernetesGroup` creates the Service, the group's NetworkPolicy, then the Job
(:class:`~operators.kubernetes.objects.GroupObjects`), follows the pods (after Kueue
admits the Job, when it was queued) until the group ends, fails, cannot start, is
preempted or times out, copies rank 0's output to its ``sink`` line by line (each poll
reads the last minute or so of rank 0's log and passes on the lines not seen yet, see
:class:`~operators.kubernetes.watch.Rank0Log`; lines rotated away by the kubelet
before a poll are lost; a deferred wait does it at each of its trigger's ``running``
events, :meth:`~KubernetesGroup.carry_on`), fetches the end of a failed rank's log
into ``log_tail``, and deletes the Job, the Service and the NetworkPolicy however the
wait ends, and on :meth:`~KubernetesGroup.stop`. A ``preempted`` group is run again,
as a new Job, up to ``SCALEBENCH_K8S_PREEMPTION_RETRIES`` times
(:meth:`~KubernetesGroup.next_attempt`); the sweep's manifest keeps each attempt's
verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from operators.group import GroupResult, set_aside_earlier_attempt
from operators.kubernetes.arguments import pod_argv
from operators.kubernetes.constants import (
    CONTAINER,
    JOB_NAME_LABEL,
    LOG_TAIL_LINES,
    MAX_API_ERRORS,
    SETTLE_S,
)
from operators.kubernetes.names import GroupNames, attempt_names
from operators.kubernetes.objects import GroupObjects
from operators.kubernetes.pod_status import get_field
from operators.kubernetes.settings import KubernetesSettings
from operators.kubernetes.watch import (
    SETTLE,
    Ending,
    GroupEvent,
    GroupWatch,
    Rank0Follower,
    Rank0Log,
    Verdict,
    log_tail,
)
from scalebench.stacks import STACK_VARIABLE
from scalebench.statuses import FAILED, PREEMPTED, SUCCEEDED
from scalebench.transports import (
    MAX_LOG_BYTES,
    NCCL_LOG_PATTERN,
    group_transports,
    rdma_refusal,
)

if TYPE_CHECKING:
    from operators.kubernetes.trigger import GroupTrigger
    from scalebench.sweep import GroupPlan


def log_text(response: Any) -> str:
    """Text of a log read with ``_preload_content=False`` (or a plain string)."""
    if isinstance(response, str):
        return response
    data = response if isinstance(response, bytes) else getattr(response, "data", b"")
    release = getattr(response, "release_conn", None)
    if release is not None:
        release()
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)


class KubernetesGroup(GroupObjects):
    """The planned ``group``'s ``world_size`` ranks as one Indexed Job of one pod per node: a
    pod runs ``python -m workers.run``, or with several ranks per node the node starter
    ``python -m workers.node``, which starts its node's ranks (:func:`job_manifest`).

    The pods' arguments are the group's worker request with the paths of the
    pods' volumes (:func:`pod_argv`; ``results_root`` and ``data_root``
    default to ``SCALEBENCH_RESULTS_URI`` and ``SCALEBENCH_DATA_DIR``). The
    group's ``timeout_s`` (seconds) becomes the Job's
    ``activeDeadlineSeconds`` so the cluster ends the group even without this
    process; pass the same value to :meth:`wait`. The group's
    ``worker_image`` overrides ``settings.image``. ``batch_api`` /
    ``core_api`` replace the ``BatchV1Api`` / ``CoreV1Api`` of the Airflow
    connection ``settings.conn_id`` (created in :meth:`start`, not before).
    ``networking_api`` replaces its ``NetworkingV1Api``. The sweep's ``queue_name``
    and ``priority_class`` replace the settings' own. ``attempt`` counts the runs of
    this group (1 the first; a preempted group is run again).
    ``clock`` (wall-clock seconds, as the trigger reads them) and ``sleep`` drive the polling every
    ``poll_interval_s`` seconds (default ``settings.poll_interval_s``).
    """

    def __init__(
        self,
        group: GroupPlan,
        *,
        names: GroupNames,
        settings: KubernetesSettings,
        sink: Callable[[str], None] | None = None,
        batch_api: Any = None,
        core_api: Any = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        results_root: str | Path | None = None,
        data_root: str | Path | None = None,
        poll_interval_s: float | None = None,
        networking_api: Any = None,
        attempt: int = 1,
    ) -> None:
        world_size, gpus_per_worker = group.world_size, group.request.gpus_per_worker
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if gpus_per_worker < 0:
            raise ValueError(f"gpus_per_worker must be 0 or more, got {gpus_per_worker}")
        shape = group.shape
        if len(f"{names.job}-{shape.nodes - 1}") > 63:
            raise ValueError(f"job name {names.job!r} is too long for {shape.nodes} pod hostnames")
        if results_root is None or data_root is None:
            from scalebench import config

            results_root = config.results_path() if results_root is None else results_root
            data_root = config.data_dir() if data_root is None else data_root
        self.pod_args = pod_argv(group, results_root, data_root)
        self.plan = group
        self.attempt = attempt
        settings = settings.with_request(group.request.queue_name, group.request.priority_class)
        self.run_id = group.run_id
        stack = group.stack  # its image and variables, over the request's image
        image = (stack.image if stack is not None else "") or group.request.worker_image or None
        timeout_s = group.timeout_s
        self.world_size = world_size
        self.ranks_per_node = shape.local_world_size  # ranks in each pod (one pod per node)
        self.names = names
        self.settings = settings
        self.gpus_per_worker = gpus_per_worker
        self.placement = group.request.placement
        self.network = group.network  # a shaped profile: the pods' bandwidth limits
        self.image = image
        self.stack_env = (
            {} if stack is None else {**dict(stack.env), STACK_VARIABLE: stack.variable()}
        )
        self.timeout_s = timeout_s
        self.sink = sink or (lambda line: print(line, flush=True))
        self.poll_interval_s = poll_interval_s or settings.poll_interval_s
        self._batch = batch_api
        self._core = core_api
        self._networking = networking_api
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._created: list[str] = []  # "service" / "policy" / "job", in creation order
        self._started: float | None = None
        self._rank0 = Rank0Follower(self.ranks_per_node)

    @property
    def deferrable(self) -> bool:
        """Whether the Airflow task waits for this group from the triggerer (a setting)."""
        return self.settings.deferrable

    # -- following the group

    def watch(self, timeout_s: float) -> GroupWatch:
        """The verdict rules for this group, counting ``timeout_s`` (s) from :meth:`start`."""
        if self._started is None:
            raise RuntimeError("start() the group before waiting for it")
        return GroupWatch(
            world_size=self.world_size,
            namespace=self.settings.namespace,
            job=self.names.job,
            started_s=self._started,
            timeout_s=timeout_s,
            schedule_timeout_s=self.settings.schedule_timeout_s,
            queue_name=self.settings.queue_name,
            admission_timeout_s=self.settings.admission_timeout_s,
            ranks_per_node=self.ranks_per_node,
        )

    def may_retry(self, status: str) -> bool:
        """Whether a group that ended with ``status`` is run again: ``preempted`` with
        retries left (``SCALEBENCH_K8S_PREEMPTION_RETRIES``)."""
        return status == PREEMPTED and self.attempt <= self.settings.preemption_retries

    def next_attempt(self, result: GroupResult) -> None:
        """Run the group again after ``result`` (a preempted attempt, whose objects are
        deleted): record that attempt in the sweep's manifest, set its rank files aside
        (``<run id>.attempt-<n>``), and start a new Job under new names."""
        from scalebench import manifest

        self.delete()
        manifest.record_attempt(
            Path(self.plan.sweep_dir),
            self.run_id,
            attempt=self.attempt,
            status=result.status,
            reason=result.reason,
            seconds=result.seconds,
            job=self.names.job,
        )
        set_aside_earlier_attempt(self.plan.run_dir)
        self.sink(
            f"[kubernetes] attempt {self.attempt} was {result.status} ({result.reason}); "
            f"running the group again ({self.attempt + 1} of "
            f"{self.settings.preemption_retries + 1})"
        )
        self.attempt += 1
        self.names = attempt_names(self.names, self.attempt)
        self._rank0 = Rank0Follower(self.ranks_per_node)
        self.start()

    def trigger(
        self,
        timeout_s: float,
        group: dict[str, Any] | None = None,
        owner: str | None = None,
        live_ingest_s: float = 0.0,
        watch_state: dict[str, Any] | None = None,
    ) -> GroupTrigger:
        """The trigger that waits for this started group from Airflow's triggerer (the
        deferred wait: same rules as :meth:`wait`, ``timeout_s`` seconds from :meth:`start`;
        ``group``: the planned group as XCom carries it, where a cancellation is recorded;
        ``owner``: the Airflow try that runs the group, who signs a cancellation).

        With ``live_ingest_s`` (seconds) above 0 it fires a ``running`` event that often
        while the group runs, carrying rank 0's log place as this group left it; the
        task resumed by it hands it to :meth:`carry_on` (and defers again), the one
        resumed by the ending event to :meth:`conclude`. ``watch_state`` is what the
        looks of an earlier trigger learnt (a ``running`` event's ``watch``)."""
        from operators.kubernetes.trigger import GroupTrigger

        watch = self.watch(timeout_s)
        return GroupTrigger(
            conn_id=self.settings.conn_id,
            namespace=watch.namespace,
            job=self.names.job,
            service=self.names.service,
            world_size=self.world_size,
            started_s=watch.started_s,
            timeout_s=timeout_s,
            schedule_timeout_s=watch.schedule_timeout_s,
            poll_interval_s=self.poll_interval_s,
            group=group,
            queue_name=watch.queue_name,
            admission_timeout_s=watch.admission_timeout_s,
            attempt=self.attempt,
            owner=owner,
            ranks_per_node=self.ranks_per_node,
            live_ingest_s=live_ingest_s,
            watch_state=watch_state,
            rank0_log=self._rank0.log.position() if live_ingest_s > 0 else None,
        )

    def carry_on(
        self,
        event: GroupEvent | dict[str, Any],
        timeout_s: float,
        group: dict[str, Any] | None = None,
        owner: str | None = None,
        live_ingest_s: float = 0.0,
    ) -> GroupTrigger:
        """Act on a :class:`GroupTrigger`'s ``running`` event: pass rank 0's lines written
        since the event's log place to the sink, and return the trigger to defer to next,
        which goes on with the looks' state and the new log place (the arguments are
        those of :meth:`trigger`)."""
        typed = GroupEvent.of(event)
        self._follow_carried(typed)
        return self.trigger(timeout_s, group, owner, live_ingest_s, watch_state=typed.watch)

    def _follow_carried(self, event: GroupEvent) -> None:
        """Follow rank 0's log from the place a trigger's ``event`` carries (none when the
        deferred wait does not follow it): pass on the lines written since."""
        if event.rank0_log is None:
            return
        self._rank0 = Rank0Follower(self.ranks_per_node, Rank0Log(**event.rank0_log))
        if event.rank0_pod is not None:
            pod = {"metadata": {"name": event.rank0_pod}, "status": {"phase": event.rank0_phase}}
            self._rank0.follow_pod(pod, self._clock(), self._read_log, self.sink)

    def resumed(self, started_s: float, attempt: int = 1) -> KubernetesGroup:
        """This group as :meth:`start` left it (Job, Service and NetworkPolicy created at
        ``started_s``, wall-clock seconds, as attempt ``attempt``), for the task that
        resumes after the trigger fired."""
        self.connect()
        self._started = started_s
        self.attempt = attempt
        self._created = ["service", "policy", "job"]
        return self

    def wait(self, timeout_s: float) -> GroupResult:
        """Follow the group until it ends, fails, cannot start, or ``timeout_s`` (s) passes;
        a preempted group is run again while retries are left (:meth:`next_attempt`).

        Always deletes the Job, the Service and the NetworkPolicy before returning or raising.
        """
        while True:
            result = self._wait_once(timeout_s)
            if self._stopping.is_set() or not self.may_retry(result.status):
                return result
            self.next_attempt(result)

    def _wait_once(self, timeout_s: float) -> GroupResult:
        """One attempt of :meth:`wait`."""
        watch = self.watch(timeout_s)
        try:
            verdict, pods = self._watch(watch)
            return self.conclude(watch.ending(verdict, pods, self._clock()))
        finally:
            self.delete()

    def _watch(self, watch: GroupWatch) -> tuple[Verdict, list[Any]]:
        """Look every ``poll_interval_s`` seconds, passing rank 0's new lines to the sink,
        until ``watch`` gives a verdict: it, and the pods of the look that gave it."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        namespace, job_name = self.settings.namespace, self.names.job
        stopped = "the group was stopped before it finished (Job deleted)"
        deleted = f"Job {namespace}/{job_name} was deleted by someone else"
        api_errors = 0
        while True:
            if self._stopping.is_set():
                return Verdict(FAILED, stopped), []
            try:
                job = self._batch.read_namespaced_job(job_name, namespace)
                pods: list[Any] = []
                if watch.needs_pods(job):
                    selector = f"{JOB_NAME_LABEL}={job_name}"
                    pod_list = self._core.list_namespaced_pod(namespace, label_selector=selector)
                    pods = get_field(pod_list, "items") or []
            except (ApiException, HTTPError, OSError) as exc:
                code = getattr(exc, "status", None)
                if code == 404:
                    return Verdict(FAILED, stopped if self._stopping.is_set() else deleted), []
                api_errors += 1
                if code in (401, 403) or api_errors > MAX_API_ERRORS:
                    raise
                self.sink(f"[kubernetes] reading the group failed ({exc}); trying again")
                self._sleep(self.poll_interval_s)
                continue
            api_errors = 0
            self._rank0.follow(pods, self._clock(), self._read_log, self.sink)
            look = watch.look(job, pods, self._clock())
            for note in watch.take_notes():
                self.sink(f"[kubernetes] Job {namespace}/{job_name}: {note}")
            if look == SETTLE:
                self._sleep(min(SETTLE_S, self.poll_interval_s))
                continue
            if isinstance(look, Verdict):
                return look, pods
            self._sleep(self.poll_interval_s)

    def conclude(self, ending: Ending | GroupEvent | dict[str, Any]) -> GroupResult:
        """Act on how the group ended (an :class:`Ending`, or a :class:`GroupTrigger`
        event describing one): read the log tail that goes with the verdict, delete the
        Job, the Service and the NetworkPolicy (even when reading fails), and return the
        group's result. Both waits end here: the blocking one in :meth:`wait`, the
        deferred one in the task resumed by the trigger's event.

        An event that carries rank 0's log place (a deferred wait that follows it) first
        passes on rank 0's lines written since. The tail is the first failed rank's last
        lines (passed to the sink too, unless the rank is 0, whose lines were followed),
        else rank 0's last lines: those this group followed, or read now (passed to the
        sink too when a deferred wait did not follow them).
        """
        event = None if isinstance(ending, Ending) else GroupEvent.of(ending)
        if event is not None:
            ending = event.ending()
        verdict = ending.verdict
        try:
            if event is not None:
                self._follow_carried(event)
            followed = bool(self._rank0.seen or self._rank0.log.lines)
            tail: list[str] = []
            rank = verdict.first_failed_rank
            if rank is not None:
                tail = log_tail(self._read_log, ending.failed_pod, rank, self.ranks_per_node)
                if tail and (rank != 0 or not followed):
                    self.sink(f"[kubernetes] last {len(tail)} line(s) of rank {rank}:")
                    for line in tail:
                        self.sink(line)
            if not tail and self._rank0.seen and self._rank0.covers_tail:
                tail = self._rank0.seen[-LOG_TAIL_LINES:]
            elif not tail:
                tail = log_tail(self._read_log, ending.rank0_pod, 0, self.ranks_per_node)
                for line in [] if followed else tail:  # passed on already, when followed
                    self.sink(line)
        finally:
            self.delete()
        status, reason = verdict.status, verdict.reason
        refusal = self.rdma_refusal() if status == SUCCEEDED else ""
        if refusal:
            self.sink(f"[kubernetes] {refusal}")
            status, reason = FAILED, refusal
        return GroupResult(
            world_size=self.world_size,
            status=status,
            reason=reason,
            exit_codes=ending.exit_codes,
            seconds=ending.seconds,
            first_failed_rank=verdict.first_failed_rank,
            log_tail=tail,
            qos_class=ending.qos_class,
            image_digest=ending.image_digest,
            attempt=self.attempt,
        )

    def rdma_refusal(self) -> str:
        """Why the group fails though its ranks succeeded (``""``: it does not): with
        ``SCALEBENCH_K8S_REQUIRE_RDMA``, an nccl group of several nodes whose traffic between
        them went over TCP sockets, as its ranks' NCCL logs in the run's folder say."""
        nodes = self.world_size // self.ranks_per_node
        if not self.settings.require_rdma or self.plan.request.backend != "nccl" or nodes < 2:
            return ""
        logs = []
        for path in sorted(self.plan.run_dir.glob(NCCL_LOG_PATTERN)):
            try:
                with path.open("rb") as handle:
                    logs.append(handle.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
            except OSError:
                continue
        if not logs:
            return (
                "SCALEBENCH_K8S_REQUIRE_RDMA is set, and no rank left an NCCL log in "
                f"{self.plan.run_dir} to say which transport its traffic took"
            )
        found = group_transports("nccl", self.world_size, self.ranks_per_node, logs)
        return rdma_refusal(found, nodes)

    def _read_log(self, pod_name: str, **options: Any) -> str | None:
        """Pod ``pod_name``'s log, read with ``options``; ``None`` when it cannot be read."""
        try:
            response = self._core.read_namespaced_pod_log(
                pod_name,
                self.settings.namespace,
                container=CONTAINER,
                _preload_content=False,
                **options,
            )
            return log_text(response)
        except Exception as exc:  # logs are for people; never let them end the wait
            self.sink(f"[kubernetes] could not read the log of pod {pod_name}: {exc}")
            return None


def launch(
    group: GroupPlan, names: GroupNames | None, sink: Callable[[str], None] | None
) -> KubernetesGroup:
    """The Kubernetes launcher for a planned group (:mod:`scalebench.launchers` names this
    entry): the Job and Service are named by ``names`` (an Airflow task instance's), or by
    the run id alone from the command line."""
    from operators.kubernetes.names import group_names

    if names is None:
        names = group_names("scalebench", group.run_id, 0, 1, group.world_size)
    return KubernetesGroup(group, names=names, settings=KubernetesSettings.from_env(), sink=sink)
