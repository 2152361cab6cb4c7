"""Start a training group as a Kubernetes Indexed Job and see it through.

One group of ``k`` workers is one **Indexed Job** (``k`` pods, completion
index = rank, no retries) plus one **headless Service** named by the pod
template's ``subdomain``, so that rank 0 answers at ``<job>-0.<service>``:
the rendezvous address every rank gets as ``MASTER_ADDR`` (port 29500).
Kubernetes sets ``JOB_COMPLETION_INDEX``, which ``workers.distributed`` reads
as the rank.

:class:`KubernetesGroup` has the interface of the local launcher
(``start`` / ``wait`` / ``stop``, a :class:`~operators.local_launcher.GroupResult`
verdict) and adds what the provider's ``KubernetesJobOperator`` lacks:

- a pod still ``Pending`` after ``SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S`` fails the
  group with the scheduler's own words (``0/3 nodes are available: 3
  Insufficient nvidia.com/gpu.``), and an image that cannot be pulled or a
  container that cannot be configured fails it at once;
- a failed rank is named with its exit code and termination reason, and ranks
  that all exit with status 3 make the verdict ``diverged``;
- the Job and the Service are deleted when :meth:`KubernetesGroup.wait` ends,
  however it ends, and by :meth:`KubernetesGroup.stop` (Airflow's ``on_kill``).
  ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` on the Job, and
  the Service's owner reference to it, clean up after an Airflow worker that
  died without either.

Rank 0's output is copied to the ``sink`` line by line, prefixed ``[rank 0]``:
each poll reads rank 0's whole log and passes on the lines not seen yet (simple,
and right for the few thousand lines a worker prints; lines rotated away by the
kubelet before a poll are lost). When a rank fails, the end of its log is
fetched into ``log_tail``.

Configuration, read by :meth:`KubernetesSettings.from_env` on the Airflow worker:

| variable                          | default                  | meaning                          |
|-----------------------------------|--------------------------|----------------------------------|
| SCALEBENCH_K8S_NAMESPACE          | scalebench               | namespace of Jobs, Services, pods|
| SCALEBENCH_K8S_CONN_ID            | kubernetes_default       | Airflow connection to the cluster|
| SCALEBENCH_WORKER_IMAGE           | scalebench-worker:latest | worker image (a group may differ)|
| SCALEBENCH_K8S_IMAGE_PULL_POLICY  | IfNotPresent             | Always, IfNotPresent or Never    |
| SCALEBENCH_K8S_SERVICE_ACCOUNT    | scalebench-worker        | service account of worker pods   |
| SCALEBENCH_K8S_NODE_SELECTOR      | {} (none)                | JSON object: node label -> value |
| SCALEBENCH_K8S_TOLERATIONS        | [] (none)                | JSON list of pod tolerations     |
| SCALEBENCH_K8S_RESULTS_CLAIM      | scalebench-results       | PVC of results (read-write)      |
| SCALEBENCH_K8S_DATA_CLAIM         | empty (no data volume)   | PVC of data sets (read-only)     |
| SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S | 600                      | seconds a pod may stay Pending   |
| SCALEBENCH_K8S_SHM_SIZE           | 2Gi                      | /dev/shm size in bytes (quantity)|

In the pods the results claim is mounted at ``/var/scalebench/results`` and the
data claim at ``/var/scalebench/data``. Tolerations are spelled as in a pod
spec (``[{"key": "nvidia.com/gpu", "operator": "Exists", "effect":
"NoSchedule"}]``); a pod still Pending after the schedule timeout (counted
from :meth:`KubernetesGroup.start`) fails the group.

The results claim must be the volume the Airflow workers see at
``SCALEBENCH_RESULTS_URI``: :func:`pod_argv` maps a run directory below that
root to the same place below the pod's mount.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from operators.launcher import GroupResult
from workers.request import EXIT_DIVERGED

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan

RESULTS_MOUNT = "/var/scalebench/results"
DATA_MOUNT = "/var/scalebench/data"
MASTER_PORT = 29500
CONTAINER = "worker"
WORKER_UID = 1000

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # annotation (and label since 1.28)
RUN_ID_LABEL = "scalebench.io/run-id"
BASE_LABELS = {
    "app.kubernetes.io/name": "scalebench-worker",
    "app.kubernetes.io/managed-by": "scalebench",
}

# The pod hostname is "<job>-<index>" and must fit in 63 characters: 52 leaves
# room for any index below 100000.
MAX_JOB_NAME = 52
TTL_AFTER_FINISHED_S = 3600  # safety net: the Job outlives an Airflow worker that died by 1 h
IMAGE_PULL_GRACE_S = 60.0  # ErrImagePull / ImagePullBackOff fail the group after this (s)
SETTLE_S = 2.0  # after a first failed rank, wait this long (s) for others that stop with it
MAX_API_ERRORS = 3  # consecutive transient API errors tolerated while waiting
LOG_TAIL_LINES = 50
LOG_PHASES = ("Running", "Succeeded", "Failed")  # a pod's log can be read

# Every API call the launcher makes, as RBAC sees it: client method -> (API group,
# resource, verb). deploy/kubernetes/rbac.yaml must grant them all.
API_CALLS = {
    "create_namespaced_service": ("", "services", "create"),
    "patch_namespaced_service": ("", "services", "patch"),
    "delete_namespaced_service": ("", "services", "delete"),
    "create_namespaced_job": ("batch", "jobs", "create"),
    "read_namespaced_job": ("batch", "jobs", "get"),
    "delete_namespaced_job": ("batch", "jobs", "delete"),
    "list_namespaced_pod": ("", "pods", "list"),
    "read_namespaced_pod_log": ("", "pods/log", "get"),
}

# Container waiting reasons that never resolve without a change to the spec.
HOPELESS_REASONS = ("InvalidImageName", "CreateContainerConfigError")
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class KubernetesSettings:
    """Where and how worker pods run; see the module docstring for each variable.

    ``node_selector`` and ``tolerations`` are in the API's own form (as in a
    pod spec). ``schedule_timeout_s`` is in seconds; ``shm_size`` is a
    Kubernetes quantity (``2Gi``). Invalid values raise :class:`ValueError`
    naming the environment variable that sets them.
    """

    namespace: str = "scalebench"
    conn_id: str = "kubernetes_default"
    image: str = "scalebench-worker:latest"
    image_pull_policy: str = "IfNotPresent"
    service_account: str = "scalebench-worker"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    results_claim: str = "scalebench-results"
    data_claim: str = ""
    schedule_timeout_s: float = 600.0
    shm_size: str = "2Gi"

    def __post_init__(self) -> None:
        selector = self.node_selector
        checks = [
            (
                "SCALEBENCH_K8S_NAMESPACE",
                self.namespace,
                _DNS_LABEL.match(self.namespace) and len(self.namespace) <= 63,
                "a DNS-1123 label (e.g. scalebench)",
            ),
            (
                "SCALEBENCH_K8S_CONN_ID",
                self.conn_id,
                self.conn_id.strip(),
                "an Airflow connection id",
            ),
            (
                "SCALEBENCH_WORKER_IMAGE",
                self.image,
                self.image and not any(c.isspace() for c in self.image),
                "an image reference without spaces",
            ),
            (
                "SCALEBENCH_K8S_IMAGE_PULL_POLICY",
                self.image_pull_policy,
                self.image_pull_policy in PULL_POLICIES,
                "one of " + ", ".join(PULL_POLICIES),
            ),
            (
                "SCALEBENCH_K8S_SERVICE_ACCOUNT",
                self.service_account,
                _is_subdomain(self.service_account),
                "a service account name (DNS-1123 subdomain)",
            ),
            (
                "SCALEBENCH_K8S_NODE_SELECTOR",
                selector,
                isinstance(selector, Mapping)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()),
                'a JSON object of strings, e.g. {"pool": "gpu"}',
            ),
            (
                "SCALEBENCH_K8S_RESULTS_CLAIM",
                self.results_claim,
                _is_subdomain(self.results_claim),
                "a PersistentVolumeClaim name",
            ),
            (
                "SCALEBENCH_K8S_DATA_CLAIM",
                self.data_claim,
                self.data_claim == "" or _is_subdomain(self.data_claim),
                "a PersistentVolumeClaim name, or empty for none",
            ),
            (
                "SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S",
                self.schedule_timeout_s,
                math.isfinite(self.schedule_timeout_s) and self.schedule_timeout_s > 0,
                "a positive number of seconds",
            ),
            (
                "SCALEBENCH_K8S_SHM_SIZE",
                self.shm_size,
                _QUANTITY.match(self.shm_size),
                "a Kubernetes quantity such as 2Gi or 512Mi",
            ),
        ]
        for variable, value, ok, expected in checks:
            _check(ok, variable, value, expected)
        for toleration in self.tolerations:
            _check_toleration(toleration)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> KubernetesSettings:
        """Settings from ``SCALEBENCH_K8S_*`` / ``SCALEBENCH_WORKER_IMAGE``; unset means default."""
        defaults = cls()

        def text(name: str, default: str) -> str:
            return env.get(name, "").strip() or default

        raw_timeout = text("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "")
        try:
            timeout = float(raw_timeout) if raw_timeout else defaults.schedule_timeout_s
        except ValueError:
            raise ValueError(
                f"SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S={raw_timeout!r}: "
                "must be a positive number of seconds"
            ) from None
        tolerations = _json_var(env, "SCALEBENCH_K8S_TOLERATIONS", [], list, "a JSON list")
        return cls(
            namespace=text("SCALEBENCH_K8S_NAMESPACE", defaults.namespace),
            conn_id=text("SCALEBENCH_K8S_CONN_ID", defaults.conn_id),
            image=text("SCALEBENCH_WORKER_IMAGE", defaults.image),
            image_pull_policy=text("SCALEBENCH_K8S_IMAGE_PULL_POLICY", defaults.image_pull_policy),
            service_account=text("SCALEBENCH_K8S_SERVICE_ACCOUNT", defaults.service_account),
            node_selector=_json_var(env, "SCALEBENCH_K8S_NODE_SELECTOR", {}, dict, "a JSON object"),
            tolerations=tuple(tolerations),
            results_claim=text("SCALEBENCH_K8S_RESULTS_CLAIM", defaults.results_claim),
            data_claim=env.get("SCALEBENCH_K8S_DATA_CLAIM", "").strip(),
            schedule_timeout_s=timeout,
            shm_size=text("SCALEBENCH_K8S_SHM_SIZE", defaults.shm_size),
        )


def _check(ok: object, variable: str, value: object, expected: str) -> None:
    if not ok:
        raise ValueError(f"{variable}={value!r}: must be {expected}")


def _is_subdomain(name: str) -> bool:
    return bool(_DNS_SUBDOMAIN.match(name)) and len(name) <= 253


def _json_var(env: Mapping[str, str], name: str, default: Any, kind: type, what: str) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}={raw!r}: must be {what} ({exc})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{name}={raw!r}: must be {what}")
    return value


def _check_toleration(toleration: object) -> None:
    problem = ""
    if not isinstance(toleration, Mapping):
        problem = "is not a JSON object"
    elif unknown := set(toleration) - _TOLERATION_KEYS:
        problem = f"has unknown keys {sorted(map(str, unknown))}; known: {sorted(_TOLERATION_KEYS)}"
    elif toleration.get("operator", "Equal") not in ("Equal", "Exists"):
        problem = "needs operator Equal or Exists"
    elif toleration.get("effect", "") not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
        problem = "needs effect NoSchedule, PreferNoSchedule or NoExecute"
    elif type(toleration.get("tolerationSeconds", 0)) is not int:
        problem = "needs an integer tolerationSeconds"
    if problem:
        raise ValueError(f"SCALEBENCH_K8S_TOLERATIONS: the toleration {toleration!r} {problem}")


# --------------------------------------------------------------------------- names


@dataclass(frozen=True)
class GroupNames:
    """Names of one group's Job and headless Service (DNS-1035 labels)."""

    job: str
    service: str


def _slug(text: str) -> str:
    """Lowercase letters, digits and single dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def group_names(
    dag_id: str, airflow_run_id: str, map_index: int, try_number: int, world_size: int
) -> GroupNames:
    """Job and Service names for one try of one (mapped) Airflow task.

    ``sb-<dag>-w<k>[-m<map index>]-t<try>-<hash>``: readable, at most
    :data:`MAX_JOB_NAME` characters, and unique per try because the hash covers
    every input (a retry never meets the leftovers of the try before it). The
    Airflow run id, full of ``:``, ``+`` and ``.``, appears only in the hash.
    The Service has the Job's name (they are different kinds).
    """
    key = "\0".join(map(str, (dag_id, airflow_run_id, map_index, try_number, world_size)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    tags = f"w{world_size}" + (f"-m{map_index}" if map_index >= 0 else "") + f"-t{try_number}"
    room = MAX_JOB_NAME - len("sb--") - len(tags) - len(digest) - 1
    readable = _slug(dag_id)[: max(room, 0)].strip("-")
    name = "-".join(part for part in ("sb", readable, _slug(tags), digest) if part)
    if len(name) > MAX_JOB_NAME:
        raise ValueError(
            f"cannot name a group for world size {world_size}, map index "
            f"{map_index}, try {try_number} in {MAX_JOB_NAME} characters"
        )
    return GroupNames(job=name, service=name)


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric ends).

    Too long a value keeps its start and gets a hash of the whole, so two
    values stay distinct.
    """
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)
    if len(value) > 63:
        value = value[:52] + "-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


# --------------------------------------------------------------------------- arguments


def pod_path(path: str | Path, root: str | Path, mount: str, what: str) -> str:
    """``path`` on the Airflow side, moved from below ``root`` to below ``mount`` (pod side).

    Raises :class:`ValueError` when ``path`` is outside ``root``: the pods see
    only that volume, so they could not use the path.
    """
    absolute, absolute_root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        relative = absolute.relative_to(absolute_root)
    except ValueError:
        raise ValueError(
            f"{path} is not under {what} {root}: the pods see only that volume "
            f"(at {mount}), so they could not use this path"
        ) from None
    return str(PurePosixPath(mount, *relative.parts))


def pod_argv(group: GroupPlan, results_root: str | Path, data_root: str | Path) -> list[str]:
    """The ``python -m workers.run`` arguments of ``group``'s pods: paths on their mounts.

    The run directory below ``results_root`` moves below
    ``/var/scalebench/results`` and the data directory below ``data_root``
    below ``/var/scalebench/data``.
    """
    return group.worker.argv(
        results_dir=pod_path(group.run_dir, results_root, RESULTS_MOUNT,
                             "the results root (SCALEBENCH_RESULTS_URI)"),
        data_dir=pod_path(group.data_dir, data_root, DATA_MOUNT,
                          "the data root (SCALEBENCH_DATA_DIR)"),
    )  # fmt: skip


# --------------------------------------------------------------------------- manifests


def _labels(run_id: str) -> dict[str, str]:
    labels = dict(BASE_LABELS)
    if label_value(run_id):
        labels[RUN_ID_LABEL] = label_value(run_id)
    return labels


def service_manifest(names: GroupNames, settings: KubernetesSettings, *, run_id: str = "") -> dict:
    """The headless Service that gives each pod of the Job a DNS name (rank 0: the rendezvous)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service,
            "namespace": settings.namespace,
            "labels": _labels(run_id),
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_NAME_LABEL: names.job},
            "ports": [
                {
                    "name": "rendezvous",
                    "port": MASTER_PORT,
                    "targetPort": MASTER_PORT,
                    "protocol": "TCP",
                }
            ],
            # Ranks resolve rank 0 before it could ever be "ready".
            "publishNotReadyAddresses": True,
        },
    }


def job_manifest(
    names: GroupNames,
    worker_args: Sequence[str],
    world_size: int,
    settings: KubernetesSettings,
    *,
    gpus_per_worker: int = 1,
    image: str | None = None,
    timeout_s: float | None = None,
    run_id: str = "",
) -> dict:
    """The Indexed Job of one group: ``world_size`` pods, rank = completion index.

    ``worker_args`` are the pod-side arguments (see :func:`pod_argv`).
    ``timeout_s`` (seconds) becomes ``activeDeadlineSeconds``, rounded up;
    ``gpus_per_worker`` is the ``nvidia.com/gpu`` limit of each pod (none when 0).
    """
    labels = _labels(run_id)
    env = {
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": f"{names.job}-0.{names.service}",
        "MASTER_PORT": str(MASTER_PORT),
        "PYTHONUNBUFFERED": "1",
    }
    mounts = [
        {"name": "results", "mountPath": RESULTS_MOUNT},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "results", "persistentVolumeClaim": {"claimName": settings.results_claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
    ]
    if settings.data_claim:
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "data",
                "persistentVolumeClaim": {"claimName": settings.data_claim, "readOnly": True},
            }
        )
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image or settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["python", "-m", "workers.run", *worker_args],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": mounts,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if gpus_per_worker > 0:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus_per_worker}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": names.service,
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,  # workers never call the API
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "fsGroup": WORKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": world_size,
        "parallelism": world_size,
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(timeout_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": names.job, "namespace": settings.namespace, "labels": labels},
        "spec": spec,
    }


# --------------------------------------------------------------------------- reading status


def _get(obj: Any, *path: str) -> Any:
    """Follow ``path`` (API field names, camelCase) through JSON dicts or client models.

    ``kubernetes.client`` models spell fields in snake_case; keys of plain
    maps (labels, annotations) are used as they are.
    """
    for key in path:
        if obj is None:
            return None
        if isinstance(obj, Mapping):
            obj = obj.get(key)
        else:
            obj = getattr(obj, re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower(), None)
    return obj


def pod_rank(pod: Any) -> int | None:
    """The rank of a Job pod: its completion index (annotation, or label since 1.28)."""
    for where in ("annotations", "labels"):
        value = _get(pod, "metadata", where, INDEX_KEY)
        if value is not None and str(value).isdigit():
            return int(value)
    return None


def _describe_pod(pod: Any) -> str:
    rank = pod_rank(pod)
    return f"pod {_get(pod, 'metadata', 'name')} (rank {'?' if rank is None else rank})"


def _container_statuses(pod: Any) -> list[Any]:
    return [
        *(_get(pod, "status", "initContainerStatuses") or []),
        *(_get(pod, "status", "containerStatuses") or []),
    ]


def _image_of(pod: Any, status: Any) -> str:
    image = _get(status, "image")
    if not image:
        for container in _get(pod, "spec", "containers") or []:
            if _get(container, "name") == _get(status, "name"):
                image = _get(container, "image")
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
    pending = [p for p in pods if _get(p, "status", "phase") == "Pending"]
    for pod in pending:
        for status in _container_statuses(pod):
            reason = _get(status, "state", "waiting", "reason") or ""
            if reason in HOPELESS_REASONS or (
                reason in IMAGE_PULL_REASONS and waited >= image_pull_grace_s
            ):
                message = _get(status, "state", "waiting", "message") or "no details"
                return (
                    f"{_describe_pod(pod)} cannot start: {reason} for image "
                    f"{_image_of(pod, status)}: {message}"
                )
    if waited < schedule_timeout_s:
        return None
    for pod in pending:
        for condition in _get(pod, "status", "conditions") or []:
            if _get(condition, "type") == "PodScheduled" and _get(condition, "status") == "False":
                message = _get(condition, "message") or _get(condition, "reason") or "no reason"
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
    reason = _get(status, "state", "waiting", "reason")
    message = _get(status, "state", "waiting", "message")
    return f"{reason} ({message})" if reason and message else reason or ""


def _terminated(pod: Any) -> Any:
    for status in _get(pod, "status", "containerStatuses") or []:
        if _get(status, "name") == CONTAINER:
            return _get(status, "state", "terminated")
    return None


def _exit_code(pod: Any) -> int | None:
    code = _get(_terminated(pod), "exitCode")
    return None if code is None else int(code)


def _true_conditions(job: Any) -> dict[str, Any]:
    return {
        _get(c, "type"): c
        for c in _get(job, "status", "conditions") or []
        if _get(c, "status") == "True"
    }


def job_verdict(job: Any, pods: Iterable[Any]) -> tuple[str, str, int | None] | None:
    """``(status, reason, first failed rank)`` once the group has ended, else ``None``.

    ``job`` and ``pods`` as the API returns them (client models or JSON dicts).
    The Job's deadline makes ``timed_out``; failed pods make ``failed`` (or
    ``diverged`` when every rank that failed by itself exited with status 3);
    the Job complete makes ``succeeded``.
    """
    pods = list(pods)
    conditions = _true_conditions(job)
    failed_condition = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed_condition is not None and _get(failed_condition, "reason") == "DeadlineExceeded":
        deadline = _get(job, "spec", "activeDeadlineSeconds")
        return "timed_out", f"the Job's deadline of {deadline} s passed", None
    failed = [p for p in pods if _get(p, "status", "phase") == "Failed"]
    if failed:
        return _classify_failed(failed)
    if failed_condition is not None:
        reason = _get(failed_condition, "reason") or "Failed"
        message = _get(failed_condition, "message") or ""
        return "failed", f"the Job failed: {reason}" + (f": {message}" if message else ""), None
    completions = _get(job, "spec", "completions") or 0
    succeeded = _get(job, "status", "succeeded") or 0
    if "Complete" in conditions or (completions and succeeded >= completions):
        return "succeeded", "", None
    return None


def _classify_failed(failed: list[Any]) -> tuple[str, str, int | None]:
    # Pods the Job controller is deleting (it ends the group after one rank
    # failed) did not fail by themselves: blame the others first.
    own = [p for p in failed if _get(p, "metadata", "deletionTimestamp") is None] or failed
    own.sort(key=lambda p: (str(_get(_terminated(p), "finishedAt") or "~"), pod_rank(p) or 0))
    if all(_exit_code(p) == EXIT_DIVERGED for p in own):
        ranks = ", ".join(str(pod_rank(p)) for p in own)
        return "diverged", f"the loss stopped being finite (rank {ranks})", pod_rank(own[0])
    culprits = [p for p in own if _exit_code(p) != EXIT_DIVERGED]
    return "failed", "; ".join(_describe_failure(p) for p in culprits), pod_rank(culprits[0])


def _describe_failure(pod: Any) -> str:
    terminated = _terminated(pod)
    rank = pod_rank(pod)
    who = f"rank {'?' if rank is None else rank} (pod {_get(pod, 'metadata', 'name')})"
    if terminated is None:  # e.g. evicted before the container ran
        reason = _get(pod, "status", "reason") or "no container status"
        message = _get(pod, "status", "message")
        return f"{who} failed: {reason}" + (f": {message}" if message else "")
    code, reason = _get(terminated, "exitCode"), _get(terminated, "reason") or "no reason"
    message = _get(terminated, "message")
    return f"{who} exited with status {code} ({reason})" + (f": {message}" if message else "")


# --------------------------------------------------------------------------- the group


def _log_text(response: Any) -> str:
    """Text of a log read with ``_preload_content=False`` (or a plain string)."""
    if isinstance(response, str):
        return response
    data = response if isinstance(response, bytes) else getattr(response, "data", b"")
    release = getattr(response, "release_conn", None)
    if release is not None:
        release()
    return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)


class KubernetesGroup:
    """The planned ``group``'s ``world_size`` pods of ``python -m workers.run`` as one Indexed Job.

    The pods' arguments are the group's worker request with the paths of the
    pods' volumes (:func:`pod_argv`; ``results_root`` and ``data_root``
    default to ``SCALEBENCH_RESULTS_URI`` and ``SCALEBENCH_DATA_DIR``). The
    group's ``timeout_s`` (seconds) becomes the Job's
    ``activeDeadlineSeconds`` so the cluster ends the group even without this
    process; pass the same value to :meth:`wait`. The group's
    ``worker_image`` overrides ``settings.image``. ``batch_api`` /
    ``core_api`` replace the ``BatchV1Api`` / ``CoreV1Api`` of the Airflow
    connection ``settings.conn_id`` (created in :meth:`start`, not before).
    ``clock`` (seconds) and ``sleep`` drive the polling every
    ``poll_interval_s``.
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
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        results_root: str | Path | None = None,
        data_root: str | Path | None = None,
        poll_interval_s: float = 5.0,
    ) -> None:
        world_size, gpus_per_worker = group.world_size, group.gpus_per_worker
        if world_size < 1:
            raise ValueError(f"world_size must be at least 1, got {world_size}")
        if gpus_per_worker < 0:
            raise ValueError(f"gpus_per_worker must be 0 or more, got {gpus_per_worker}")
        if len(f"{names.job}-{world_size - 1}") > 63:
            raise ValueError(f"job name {names.job!r} is too long for {world_size} pod hostnames")
        if results_root is None or data_root is None:
            from scalebench import config

            results_root = config.results_path() if results_root is None else results_root
            data_root = config.data_dir() if data_root is None else data_root
        self.pod_args = pod_argv(group, results_root, data_root)
        self.run_id = group.run_id
        image = group.worker_image or None
        timeout_s = group.timeout_s
        self.world_size = world_size
        self.names = names
        self.settings = settings
        self.gpus_per_worker = gpus_per_worker
        self.image = image
        self.timeout_s = timeout_s
        self.sink = sink or (lambda line: print(line, flush=True))
        self.poll_interval_s = poll_interval_s
        self._batch = batch_api
        self._core = core_api
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._created: list[str] = []  # "service" / "job", in creation order
        self._started: float | None = None
        self._rank0_pod: str | None = None
        self._rank0_lines = 0
        self._rank0_seen: list[str] = []

    # -- manifests

    def job_manifest(self) -> dict:
        return job_manifest(
            self.names,
            self.pod_args,
            self.world_size,
            self.settings,
            gpus_per_worker=self.gpus_per_worker,
            image=self.image,
            timeout_s=self.timeout_s,
            run_id=self.run_id,
        )

    def service_manifest(self) -> dict:
        return service_manifest(self.names, self.settings, run_id=self.run_id)

    # -- life cycle

    def _connect(self) -> None:
        if self._batch is not None and self._core is not None:
            return
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        hook = KubernetesHook(conn_id=self.settings.conn_id)
        self._batch = self._batch if self._batch is not None else hook.batch_v1_client
        self._core = self._core if self._core is not None else hook.core_v1_client

    def start(self) -> None:
        """Create the Service, then the Job (the pods find rank 0's name from the start)."""
        namespace = self.settings.namespace
        with self._lock:
            if self._stopping.is_set():
                raise RuntimeError(f"group {self.names.job} was stopped before it started")
            self._connect()
            self._started = self._clock()
            try:
                self._core.create_namespaced_service(namespace, self.service_manifest())
                self._created.append("service")
                job = self._batch.create_namespaced_job(namespace, self.job_manifest())
                self._created.append("job")
            except BaseException as exc:
                self._delete()
                if getattr(exc, "status", None) == 409:
                    raise RuntimeError(
                        f"a Job or Service named {self.names.job} already exists in namespace "
                        f"{namespace}; group names are unique per Airflow try, so it is a "
                        "leftover of this very try"
                    ) from exc
                raise
            self._own_service(job)
        self.sink(
            f"[kubernetes] started Job {namespace}/{self.names.job}: "
            f"{self.world_size} pod(s), rendezvous {self.names.job}-0.{self.names.service}"
        )

    def _own_service(self, job: Any) -> None:
        """Make the Job the Service's owner, so deleting the Job (its TTL) takes it along."""
        uid = _get(job, "metadata", "uid")
        if not uid:
            return
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": self.names.job, "uid": uid}
        try:
            # A JSON patch (a list): the client sends a dict as json-patch too, which fails.
            self._core.patch_namespaced_service(
                self.names.service,
                self.settings.namespace,
                [{"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}],
            )
        except Exception as exc:  # only a safety net: wait() and stop() delete it anyway
            self.sink(f"[kubernetes] could not make Job {self.names.job} own its Service: {exc}")

    def stop(self) -> None:
        """Delete the Job (with its pods) and the Service. Idempotent and thread-safe."""
        self._stopping.set()
        with self._lock:
            self._delete()

    def _delete(self) -> None:
        """Delete what this group created; 404 counts as deleted. Call with the lock held."""
        namespace = self.settings.namespace
        calls = {
            "job": lambda: self._batch.delete_namespaced_job(
                self.names.job, namespace, propagation_policy="Background"
            ),
            "service": lambda: self._core.delete_namespaced_service(self.names.service, namespace),
        }
        for kind in reversed(list(self._created)):
            try:
                calls[kind]()
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    self.sink(
                        f"[kubernetes] could not delete {kind} {namespace}/{self.names.job} "
                        f"({exc}); delete it with: kubectl -n {namespace} delete {kind} "
                        f"{self.names.job}"
                    )
                    continue
            self._created.remove(kind)

    # -- following the group

    def wait(self, timeout_s: float) -> GroupResult:
        """Follow the group until it ends, fails, cannot start, or ``timeout_s`` (s) passes.

        Always deletes the Job and the Service before returning or raising.
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        if self._started is None:
            raise RuntimeError("start() the group before waiting for it")
        namespace, job_name = self.settings.namespace, self.names.job
        stopped = "the group was stopped before it finished (Job deleted)"
        deleted = f"Job {namespace}/{job_name} was deleted by someone else"
        status, reason, first_failed = "failed", "", None
        pods: list[Any] = []
        log_tail: list[str] = []
        settled = False
        api_errors = 0
        try:
            while True:
                if self._stopping.is_set():
                    reason = stopped
                    break
                try:
                    job = self._batch.read_namespaced_job(job_name, namespace)
                    selector = f"{JOB_NAME_LABEL}={job_name}"
                    pod_list = self._core.list_namespaced_pod(namespace, label_selector=selector)
                    pods = _get(pod_list, "items") or []
                except (ApiException, HTTPError, OSError) as exc:
                    code = getattr(exc, "status", None)
                    if code == 404:
                        reason = stopped if self._stopping.is_set() else deleted
                        break
                    api_errors += 1
                    if code in (401, 403) or api_errors > MAX_API_ERRORS:
                        raise
                    self.sink(f"[kubernetes] reading the group failed ({exc}); trying again")
                    self._sleep(self.poll_interval_s)
                    continue
                api_errors = 0
                self._follow_rank0(pods)
                verdict = job_verdict(job, pods)
                if verdict is not None and verdict[0] in ("failed", "diverged") and not settled:
                    # Ranks that stop together (divergence) exit moments apart: let them.
                    settled = True
                    self._sleep(min(SETTLE_S, self.poll_interval_s))
                    continue
                if verdict is not None:
                    status, reason, first_failed = verdict
                    break
                now = self._clock()
                problem = pending_problem(
                    pods, now, self._started, self.settings.schedule_timeout_s
                ) or self._missing_pods(pods, now)
                if problem:
                    status, reason = "failed", problem
                    break
                if now - self._started > timeout_s:
                    status, reason = "timed_out", f"the group did not finish within {timeout_s:g} s"
                    break
                self._sleep(self.poll_interval_s)
            if first_failed is not None:
                log_tail = self._failed_tail(pods, first_failed)
        finally:
            self.stop()
        return GroupResult(
            world_size=self.world_size,
            status=status,
            reason=reason,
            exit_codes=self._exit_codes(pods),
            seconds=self._clock() - self._started,
            first_failed_rank=first_failed,
            log_tail=log_tail or self._rank0_seen[-LOG_TAIL_LINES:],
        )

    def _missing_pods(self, pods: list[Any], now: float) -> str | None:
        """Pods the Job controller never created (quota, admission) count as unschedulable."""
        assert self._started is not None
        timeout = self.settings.schedule_timeout_s
        if now - self._started < timeout or len(pods) >= self.world_size:
            return None
        return (
            f"only {len(pods)} of {self.world_size} pods were created within {timeout:g} s; "
            f"kubectl -n {self.settings.namespace} describe job {self.names.job} says why "
            "(e.g. a ResourceQuota, or a missing service account)"
        )

    def _read_log(self, pod_name: str, **options: Any) -> str | None:
        try:
            response = self._core.read_namespaced_pod_log(
                pod_name,
                self.settings.namespace,
                container=CONTAINER,
                _preload_content=False,
                **options,
            )
            return _log_text(response)
        except Exception as exc:  # logs are for people; never let them end the wait
            self.sink(f"[kubernetes] could not read the log of pod {pod_name}: {exc}")
            return None

    def _follow_rank0(self, pods: list[Any]) -> None:
        """Pass rank 0's new complete lines to the sink."""
        started = [p for p in pods if pod_rank(p) == 0 and _get(p, "status", "phase") in LOG_PHASES]
        if not started:
            return
        pod = started[0]
        name = _get(pod, "metadata", "name")
        if name != self._rank0_pod:
            self._rank0_pod, self._rank0_lines = name, 0
        text = self._read_log(name)
        if text is None:
            return
        lines = text.splitlines()
        if lines and not text.endswith("\n") and _get(pod, "status", "phase") == "Running":
            lines.pop()  # still being written
        for line in lines[self._rank0_lines :]:
            entry = f"[rank 0] {line}"
            self.sink(entry)
            self._rank0_seen.append(entry)
        del self._rank0_seen[: -LOG_TAIL_LINES * 2]
        self._rank0_lines = max(self._rank0_lines, len(lines))

    def _failed_tail(self, pods: list[Any], rank: int) -> list[str]:
        pod = next((p for p in pods if pod_rank(p) == rank), None)
        if pod is None:
            return []
        text = self._read_log(_get(pod, "metadata", "name"), tail_lines=LOG_TAIL_LINES)
        tail = [f"[rank {rank}] {line}" for line in (text or "").splitlines()]
        if tail and rank != 0:
            self.sink(f"[kubernetes] last {len(tail)} line(s) of rank {rank}:")
            for line in tail:
                self.sink(line)
        return tail

    def _exit_codes(self, pods: list[Any]) -> list[int | None]:
        codes: list[int | None] = [None] * self.world_size
        for pod in pods:
            rank = pod_rank(pod)
            if rank is not None and 0 <= rank < self.world_size:
                codes[rank] = _exit_code(pod)
        return codes
