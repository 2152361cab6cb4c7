"""A full data set prepared where the worker pods read it: in the data claim, by a pod.

With the Kubernetes launcher the Airflow worker never holds a data set. A **data pod**
(:func:`data_pod_manifest`) of the worker image mounts the data claim
(``SCALEBENCH_K8S_DATA_CLAIM``) read-write at ``/var/scalebench/data`` and runs
``python -m workers.data NAME --data-dir /var/scalebench/data [--download]``: the set is
fetched when asked and missing, then verified (checksums, format, stamps), and the pod
says in one line where it is or why it is not. The worker pods then mount the same claim
read-only.

- In an Airflow task the pod is run by the provider's ``KubernetesPodOperator``
  (:func:`prepare_in_task`): its output streams into the task log, and the pod is deleted
  however it ends. The ``validate`` task runs it without ``--download`` for a full sweep
  that does not ask for the download, so that a set missing from the claim is refused
  before anything is planned; ``prepare_dataset`` runs it with the request's ``download``.
- From the command line (no task instance) the same pod is created, followed and deleted
  through the API (:func:`prepare_with_api`).

The pod is labelled ``app.kubernetes.io/name: scalebench-data``, so the workers'
default-deny NetworkPolicy does not hold it: a download needs the internet.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from typing import Any

from operators.kubernetes.constants import CONTAINER, DATA_MOUNT, WRITABLE_HOMES
from operators.kubernetes.manifests import container_security, pod_security
from operators.kubernetes.pod_status import get_field, pending_problem
from operators.kubernetes.settings import KubernetesSettings

DATA_POD_LABELS = {
    "app.kubernetes.io/name": "scalebench-data",
    "app.kubernetes.io/managed-by": "scalebench",
}
DATA_POD_DEADLINE_S = 6 * 3600  # a full download and preparation (WMT's BPE) fits
DATA_POD_RESOURCES = {"cpu": "2", "memory": "8Gi"}  # requests = limits: Guaranteed
POLL_S = 2.0


class DataPodFailed(RuntimeError):
    """The data pod could not make the set ready; the message is the pod's own line (what
    is missing and what to do), or why the pod did not run."""


# Where a download comes from, when the Airflow side sets it: the pod fetches from the same
# mirrors (workers/data/archives.py, workers/data/sources.py).
SOURCE_VARIABLES = ("SCALEBENCH_DATA_MIRRORS", "SCALEBENCH_CIFAR10_URL")


def source_addresses(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The download settings of ``environ`` (this process's) that are set."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SOURCE_VARIABLES if environ.get(name, "").strip()}


def data_pod_manifest(
    settings: KubernetesSettings, name: str, data_set: str, download: bool
) -> dict[str, Any]:
    """The data pod for ``data_set``: the worker image, the data claim read-write at
    ``/var/scalebench/data``, locked down as a worker pod, on any node (it needs no GPU)."""
    if not settings.data_claim:
        raise DataPodFailed(
            "no data claim to prepare the set in: set SCALEBENCH_K8S_DATA_CLAIM "
            "(deploy/kubernetes/base makes scalebench-data), or run the light variant"
        )
    command = ["python", "-m", "workers.data", data_set, "--data-dir", DATA_MOUNT]
    if download:
        command.append("--download")
    container = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": command,
        "env": [
            {"name": key, "value": value}
            for key, value in {**WRITABLE_HOMES, **source_addresses()}.items()
        ],
        "securityContext": container_security(),
        "resources": {"requests": dict(DATA_POD_RESOURCES), "limits": dict(DATA_POD_RESOURCES)},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": DATA_POD_DEADLINE_S,
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "containers": [container],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": settings.data_claim}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}},
        ],
    }
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.image_pull_credentials:
        spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_credentials]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {**DATA_POD_LABELS, **settings.labels, "scalebench.io/data-set": data_set},
        },
        "spec": spec,
    }


def pod_name(data_set: str) -> str:
    """A data pod's name: the set's, and a random part (two preparations never meet)."""
    return f"scalebench-data-{data_set.replace('_', '-')}-{secrets.token_hex(3)}"


def _their_line(lines: list[str], fallback: str) -> str:
    """The pod's own last word: its last non-empty line, or ``fallback``."""
    said = [line.strip() for line in lines if line.strip()]
    return said[-1] if said else fallback


def prepare_in_task(
    settings: KubernetesSettings, data_set: str, download: bool, context: Any, task_id: str
) -> str:
    """Run the data pod through the provider's ``KubernetesPodOperator`` inside the Airflow
    task ``context``; the pod's last line when the set is ready. Raises
    :class:`DataPodFailed` with the pod's own words when it is not."""
    from airflow.sdk.exceptions import AirflowException

    from operators.kubernetes.pod_group import GroupPodOperator

    manifest = data_pod_manifest(settings, pod_name(data_set), data_set, download)
    operator = GroupPodOperator(
        task_id=task_id,
        name=manifest["metadata"]["name"],
        random_name_suffix=False,
        namespace=settings.namespace,
        kubernetes_conn_id=settings.conn_id,
        pod_template_dict=manifest,
        base_container_name=CONTAINER,
        deferrable=False,
        on_finish_action="delete_pod",
        get_logs=True,
        startup_timeout_seconds=int(settings.schedule_timeout_s),
        log_events_on_failure=True,
    )
    operator.trigger_extra = {}
    try:
        operator.execute(context)
    except AirflowException as exc:
        raise DataPodFailed(
            _their_line(operator.last_lines, f"the data pod failed: {' '.join(str(exc).split())}")
        ) from None
    return f"{data_set}: ready in the data claim {settings.data_claim}"


def prepare_with_api(
    core: Any,
    settings: KubernetesSettings,
    data_set: str,
    download: bool,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = print,
) -> str:
    """Create the data pod through the core API ``core``, follow it to its end and delete it
    however this ends (the command line's way: no task instance); its last line when the set
    is ready. Raises :class:`DataPodFailed` with the pod's own words when it is not."""
    name = pod_name(data_set)
    manifest = data_pod_manifest(settings, name, data_set, download)
    core.create_namespaced_pod(settings.namespace, manifest)
    started = clock()
    said = 0
    try:
        while True:
            pod = core.api_client.sanitize_for_serialization(
                core.read_namespaced_pod(name, settings.namespace)
            )
            phase = get_field(pod, "status", "phase")
            if phase in ("Running", "Succeeded", "Failed"):
                lines = _log_lines(core, name, settings.namespace)
                for line in lines[said:]:
                    say(f"[data pod] {line}")
                said = max(said, len(lines))
                if phase != "Running":
                    if phase == "Succeeded":
                        return _their_line(lines, f"{data_set}: ready")
                    raise DataPodFailed(_their_line(lines, f"the data pod {name} failed"))
            else:
                problem = pending_problem(
                    [pod], clock(), started, settings.schedule_timeout_s, image_pull_grace_s=60.0
                )
                if problem:
                    raise DataPodFailed(f"the data pod {name} did not start: {problem}")
            if clock() - started > DATA_POD_DEADLINE_S:
                raise DataPodFailed(f"the data pod {name} did not end in {DATA_POD_DEADLINE_S} s")
            sleep(POLL_S)
    finally:
        try:
            core.delete_namespaced_pod(name, settings.namespace)
        except Exception:  # gone already, or the cluster went away: its deadline ends it
            say(f"[data pod] {name} could not be deleted; its deadline ends it")


def _log_lines(core: Any, name: str, namespace: str) -> list[str]:
    try:
        text = core.read_namespaced_pod_log(
            name, namespace, container=CONTAINER, _preload_content=False
        ).data.decode("utf-8", "replace")
    except Exception:  # logs are for people: never the verdict's cause
        return []
    return text.splitlines()
