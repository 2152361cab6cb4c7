"""Reading a group's state from what the API returns (``kubernetes.client``
models or the API's JSON dicts alike): :func:`pod_rank` is a pod's rank,
:func:`pending_problem` says why a group cannot start (an unschedulable pod, in
the scheduler's words, or an image that cannot be pulled), and
:func:`job_verdict` says how it ended: ``succeeded``, ``failed`` naming the
failed rank with its exit code and reason, ``diverged`` when the ranks that
failed all exited with status 3, ``preempted`` when a pod was disrupted
(the ``DisruptionTarget`` condition: preempted, evicted, its node drained)
naming the node and the reason, or ``timed_out`` at the Job's deadline;
:func:`qos_class` is the QoS class the kubelet gave the pods and :func:`image_digest`
the image their worker container ran, as the kubelet resolved it (``repo@sha256:…``). A
rank that exited with status 4 found the results volume full: the group's reason says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from operators.kubernetes.constants import (
    CONTAINER,
    DISRUPTION_CONDITION,
    IMAGE_PULL_GRACE_S,
    INDEX_KEY,
    JOB_NAME_LABEL,
    RESULTS_MOUNT,
)
from scalebench.diskspace import NO_SPACE
from scalebench.rank import EXIT_DIVERGED, EXIT_NO_SPACE
from scalebench.statuses import DIVERGED, FAILED, NOT_ADMITTED, PREEMPTED, SUCCEEDED, TIMED_OUT

# Container waiting reasons that never resolve without a change to the spec.
HOPELESS_REASONS = ("InvalidImageName", "CreateContainerConfigError")
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")


def get_field(obj: Any, *path: str) -> Any:
    """Follow ``path`` (API field names, camelCase) through JSON dicts or client models.

    ``kubernetes.client`` models spell fields in snake_case; keys of plain
    maps (labels, annotations) are used as they are; a run of capitals is one word
    (``imageID``: ``image_id``).
    """
    for key in path:
        if obj is None:
            return None
        if isinstance(obj, Mapping):
            obj = obj.get(key)
        else:
            obj = getattr(obj, re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower(), None)
    return obj


def pod_rank(pod: Any) -> int | None:
    """The completion index of a Job pod (annotation, or label since 1.28): the rank of a pod
    of one rank, the node of a pod of several (:func:`failed_rank` names the rank). A
    group's lone pod, which no Job made (:mod:`operators.kubernetes.pod_group`), is node 0."""
    for where in ("annotations", "labels"):
        value = get_field(pod, "metadata", where, INDEX_KEY)
        if value is not None and str(value).isdigit():
            return int(value)
    if get_field(pod, "metadata", "labels", JOB_NAME_LABEL) is None:
        return 0
    return None


def failed_rank(pod: Any, ranks_per_node: int = 1) -> int | None:
    """The global rank a failed pod names: its index, for a pod of one rank; for a node of
    ``ranks_per_node`` ranks, the rank its node starter wrote in the termination message
    (``rank 5 exited with status 1``), else the node's first rank."""
    index = pod_rank(pod)
    if ranks_per_node == 1 or index is None:
        return index
    message = get_field(_terminated(pod), "message") or ""
    named = re.search(r"\brank ([0-9]+)\b", message)
    return int(named.group(1)) if named else index * ranks_per_node


def _who(pod: Any, ranks_per_node: int = 1) -> str:
    """``rank 1 (pod …)``, or for a pod of several ranks ``ranks 4-7 (pod …)``."""
    index, name = pod_rank(pod), get_field(pod, "metadata", "name")
    if index is None:
        return f"{'rank' if ranks_per_node == 1 else 'ranks'} ? (pod {name})"
    if ranks_per_node == 1:
        return f"rank {index} (pod {name})"
    first = index * ranks_per_node
    return f"ranks {first}-{first + ranks_per_node - 1} (pod {name})"


def log_prefix(index: int, ranks_per_node: int = 1) -> str:
    """What a line of pod ``index``'s log is passed on behind: ``[rank 1]`` for a pod of one
    rank; nothing for a node's, whose starter already puts each line behind its rank."""
    return f"[rank {index}] " if ranks_per_node == 1 else ""


def _describe_pod(pod: Any) -> str:
    rank = pod_rank(pod)
    return f"pod {get_field(pod, 'metadata', 'name')} (rank {'?' if rank is None else rank})"


def _container_statuses(pod: Any) -> list[Any]:
    return [
        *(get_field(pod, "status", "initContainerStatuses") or []),
        *(get_field(pod, "status", "containerStatuses") or []),
    ]


def _image_of(pod: Any, status: Any) -> str:
    image = get_field(status, "image")
    if not image:
        for container in get_field(pod, "spec", "containers") or []:
            if get_field(container, "name") == get_field(status, "name"):
                image = get_field(container, "image")
    return image or "?"


def pending_problem(
    pods: Iterable[Any],
    now: float,
    started: float,
    schedule_timeout_s: float,
    *,
    image_pull_grace_s: float = IMAGE_PULL_GRACE_S,
) -> str | None:
    """Why the group cannot start, or ``None`` while it still may.

    ``pods`` are ``kubernetes.client.V1Pod`` objects or the API's JSON dicts;
    ``now`` and ``started`` are readings of the same clock (seconds). A pod
    waiting on ``InvalidImageName`` or ``CreateContainerConfigError`` is
    hopeless at once, on an image pull error after ``image_pull_grace_s``;
    a pod still ``Pending`` ``schedule_timeout_s`` after ``started`` is
    reported with the scheduler's message when it was not scheduled.
    """
    pods = list(pods)
    waited = now - started
    pending = [p for p in pods if get_field(p, "status", "phase") == "Pending"]
    for pod in pending:
        for status in _container_statuses(pod):
            reason = get_field(status, "state", "waiting", "reason") or ""
            if reason in HOPELESS_REASONS or (
                reason in IMAGE_PULL_REASONS and waited >= image_pull_grace_s
            ):
                message = get_field(status, "state", "waiting", "message") or "no details"
                return (
                    f"{_describe_pod(pod)} cannot start: {reason} for image "
                    f"{_image_of(pod, status)}: {message}"
                )
    if waited < schedule_timeout_s:
        return None
    for pod in pending:
        for condition in get_field(pod, "status", "conditions") or []:
            if (
                get_field(condition, "type") == "PodScheduled"
                and get_field(condition, "status") == "False"
            ):
                message = (
                    get_field(condition, "message") or get_field(condition, "reason") or "no reason"
                )
                return (
                    f"{_describe_pod(pod)} could not be scheduled within "
                    f"{schedule_timeout_s:g} s: {message}"
                )
        waiting = [_waiting(s) for s in _container_statuses(pod) if _waiting(s)]
        detail = "; ".join(waiting) or "no reason reported (see kubectl describe pod)"
        return f"{_describe_pod(pod)} was still pending after {schedule_timeout_s:g} s: {detail}"
    return None


def _waiting(status: Any) -> str:
    """``reason (message)`` of a waiting container, or ``""``."""
    reason = get_field(status, "state", "waiting", "reason")
    message = get_field(status, "state", "waiting", "message")
    return f"{reason} ({message})" if reason and message else reason or ""


def _terminated(pod: Any) -> Any:
    for status in get_field(pod, "status", "containerStatuses") or []:
        if get_field(status, "name") == CONTAINER:
            return get_field(status, "state", "terminated")
    return None


def exit_code(pod: Any) -> int | None:
    code = get_field(_terminated(pod), "exitCode")
    return None if code is None else int(code)


def _true_conditions(job: Any) -> dict[str, Any]:
    return {
        get_field(c, "type"): c
        for c in get_field(job, "status", "conditions") or []
        if get_field(c, "status") == "True"
    }


def job_verdict(
    job: Any, pods: Iterable[Any], ranks_per_node: int = 1
) -> tuple[str, str, int | None] | None:
    """``(status, reason, first failed rank)`` once the group has ended, else ``None``.

    ``job`` and ``pods`` as the API returns them (client models or JSON dicts); each pod
    runs ``ranks_per_node`` ranks (one node).
    A disrupted pod makes ``preempted``; the Job's deadline makes ``timed_out``; failed
    pods make ``failed`` (or
    ``diverged`` when every rank that failed by itself exited with status 3);
    the Job complete makes ``succeeded``.
    """
    pods = list(pods)
    conditions = _true_conditions(job)
    disrupted = [p for p in pods if _disruption(p) is not None]
    if disrupted:
        described = (_describe_disruption(p, ranks_per_node) for p in disrupted)
        return PREEMPTED, "; ".join(described), None
    failed_condition = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed_condition is not None and get_field(failed_condition, "reason") == "DeadlineExceeded":
        deadline = get_field(job, "spec", "activeDeadlineSeconds")
        return TIMED_OUT, f"the Job's deadline of {deadline} s passed", None
    failed = [p for p in pods if get_field(p, "status", "phase") == "Failed"]
    if failed:
        return _classify_failed(failed, ranks_per_node)
    if failed_condition is not None:
        reason = get_field(failed_condition, "reason") or "Failed"
        message = get_field(failed_condition, "message") or ""
        return FAILED, f"the Job failed: {reason}" + (f": {message}" if message else ""), None
    completions = get_field(job, "spec", "completions") or 0
    succeeded = get_field(job, "status", "succeeded") or 0
    if "Complete" in conditions or (completions and succeeded >= completions):
        return SUCCEEDED, "", None
    return None


def _classify_failed(failed: list[Any], ranks_per_node: int = 1) -> tuple[str, str, int | None]:
    # Pods the Job controller is deleting (it ends the group after one rank
    # failed) did not fail by themselves: blame the others first.
    own = [p for p in failed if get_field(p, "metadata", "deletionTimestamp") is None] or failed
    own.sort(key=lambda p: (str(get_field(_terminated(p), "finishedAt") or "~"), pod_rank(p) or 0))

    def rank(pod: Any) -> int | None:
        return failed_rank(pod, ranks_per_node)

    if all(exit_code(p) == EXIT_DIVERGED for p in own):
        ranks = ", ".join(str(rank(p)) for p in own)
        return DIVERGED, f"the loss stopped being finite (rank {ranks})", rank(own[0])
    full = [p for p in own if exit_code(p) == EXIT_NO_SPACE]
    if full:  # the cause, whatever the other ranks did next
        ranks = ", ".join(str(rank(p)) for p in full)
        return FAILED, f"{NO_SPACE}{RESULTS_MOUNT} (the results volume; rank {ranks})", None
    culprits = [p for p in own if exit_code(p) != EXIT_DIVERGED]
    described = "; ".join(_describe_failure(p, ranks_per_node) for p in culprits)
    return FAILED, described, rank(culprits[0])


def _describe_failure(pod: Any, ranks_per_node: int = 1) -> str:
    terminated = _terminated(pod)
    who = _who(pod, ranks_per_node)
    if terminated is None:  # e.g. evicted before the container ran
        reason = get_field(pod, "status", "reason") or "no container status"
        message = get_field(pod, "status", "message")
        return f"{who} failed: {reason}" + (f": {message}" if message else "")
    code, reason = get_field(terminated, "exitCode"), get_field(terminated, "reason") or "no reason"
    message = get_field(terminated, "message")
    return f"{who} exited with status {code} ({reason})" + (f": {message}" if message else "")


def _disruption(pod: Any) -> Any:
    """The pod's ``DisruptionTarget`` condition when it is true, else ``None``."""
    for condition in get_field(pod, "status", "conditions") or []:
        if (
            get_field(condition, "type") == DISRUPTION_CONDITION
            and get_field(condition, "status") == "True"
        ):
            return condition
    return None


def _describe_disruption(pod: Any, ranks_per_node: int = 1) -> str:
    """``rank 1 (pod …) on node gpu-3 was disrupted: EvictionByEvictionAPI: …``."""
    condition = _disruption(pod)
    node = get_field(pod, "spec", "nodeName") or "an unknown node"
    reason = get_field(condition, "reason") or "DisruptionTarget"
    message = get_field(condition, "message")
    return f"{_who(pod, ranks_per_node)} on node {node} was disrupted: {reason}" + (
        f": {message}" if message else ""
    )


def qos_class(pods: Iterable[Any]) -> str:
    """The QoS class the kubelet gave the group's pods (``Guaranteed``, ``Burstable``,
    ``BestEffort``; the lowest when they differ), or ``""`` while no pod reports one."""
    order = ("BestEffort", "Burstable", "Guaranteed")
    classes = {get_field(p, "status", "qosClass") for p in pods} & set(order)
    return min(classes, key=order.index) if classes else ""


# A container's imageID as the kubelet reports it, by runtime: ``repo@sha256:…``
# (containerd, CRI-O), ``docker-pullable://repo@sha256:…`` (dockershim), or
# ``docker://sha256:…`` and ``sha256:…`` (an image built on the node, named by no registry
# digest: its image ID).
_IMAGE_ID = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://)?(?:(?P<repository>[^@\s]+)@)?sha256:(?P<digest>[0-9a-fA-F]{64})$"
)


def _repository(image: str) -> str:
    """``image`` without its digest and tag: ``registry:5000/repo/worker:tag`` →
    ``registry:5000/repo/worker``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.split(":", 1)[0]


def resolved_image(status: Any) -> str:
    """The image a container status says ran, as the kubelet resolved it:
    ``repository@sha256:<64 hex>`` from its ``imageID`` (the repository from its ``image``
    where the ID names none), or ``""`` while it names no digest (not pulled yet)."""
    found = _IMAGE_ID.match(str(get_field(status, "imageID") or "").strip())
    if found is None:
        return ""
    repository = _repository(found.group("repository") or str(get_field(status, "image") or ""))
    digest = f"sha256:{found.group('digest').lower()}"
    return f"{repository}@{digest}" if repository else digest


def image_digest(pods: Iterable[Any]) -> str:
    """The image the group's worker containers ran, as the kubelet resolved it
    (``repo/worker@sha256:…``), or ``""`` while no pod reports one. Pods that ran different
    images (a tag moved while nodes pulled it) give them all, sorted, comma-separated."""
    images = {
        resolved_image(status)
        for pod in pods
        for status in get_field(pod, "status", "containerStatuses") or []
        if get_field(status, "name") == CONTAINER
    }
    return ",".join(sorted(images - {""}))


SCHEDULING_GATED = "SchedulingGated"  # Kueue holds a pod of its queue until it admits it


def pod_verdict(
    pod: Any, ranks_per_node: int = 1, *, schedule_timeout_s: float = 0.0
) -> tuple[str, str, int | None] | None:
    """``(status, reason, first failed rank)`` of a group that is one pod (no Job), as
    :func:`job_verdict` says it of a Job's, once the pod ended or can no longer start;
    ``None`` while it runs.

    A disrupted pod makes ``preempted``; the pod's own deadline (``activeDeadlineSeconds``:
    the kubelet stops it, reason ``DeadlineExceeded``) ``timed_out``; a failed pod ``failed``
    or ``diverged``; a pod still held by Kueue's scheduling gate ``not_admitted``; a pod
    still pending (the pod operator gave up waiting for it to start) ``failed`` with the
    scheduler's or the kubelet's words, as if ``schedule_timeout_s`` (s) had passed.
    """
    if _disruption(pod) is not None:
        return PREEMPTED, _describe_disruption(pod, ranks_per_node), None
    phase = get_field(pod, "status", "phase")
    if phase == "Failed" and get_field(pod, "status", "reason") == "DeadlineExceeded":
        deadline = get_field(pod, "spec", "activeDeadlineSeconds")
        return TIMED_OUT, f"the pod's deadline of {deadline} s passed", None
    if phase == "Failed":
        return _classify_failed([pod], ranks_per_node)
    if phase == "Succeeded":
        return SUCCEEDED, "", None
    if phase == "Pending":
        for condition in get_field(pod, "status", "conditions") or []:
            if get_field(condition, "type") == "PodScheduled" and (
                get_field(condition, "reason") == SCHEDULING_GATED
            ):
                return NOT_ADMITTED, f"{_describe_pod(pod)} was never admitted by Kueue", None
        problem = pending_problem(
            [pod], schedule_timeout_s, 0.0, schedule_timeout_s, image_pull_grace_s=0.0
        )
        return FAILED, problem or f"{_describe_pod(pod)} never started", None
    return None
