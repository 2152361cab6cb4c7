"""The objects of one group as the API takes them: :func:`job_manifest` renders the
Indexed Job (``k`` pods, completion index = rank, no retries, rendezvous at rank
0) and :func:`service_manifest` the headless Service that gives each pod a DNS
name, both labelled with the worker's name and the run id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from operators.kubernetes.constants import (
    BASE_LABELS,
    CONTAINER,
    DATA_MOUNT,
    HOSTNAME_LABEL,
    JOB_NAME_LABEL,
    MASTER_PORT,
    RESULTS_MOUNT,
    RUN_ID_LABEL,
    TMP_SIZE,
    TTL_AFTER_FINISHED_S,
    WORKER_UID,
    WRITABLE_HOMES,
)
from operators.kubernetes.names import GroupNames, label_value
from operators.kubernetes.settings import KubernetesSettings
from scalebench.config import mlperf_environment
from scalebench.network import HOST_PROFILE, NetworkProfile


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


def bandwidth_quantity(bits_per_s: int) -> str:
    """Bits per second as a Kubernetes quantity: 100000000 → ``100M``, 10**9 → ``1G``."""
    for suffix, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if bits_per_s % scale == 0:
            return f"{bits_per_s // scale}{suffix}"
    return str(bits_per_s)


def bandwidth_annotations(network: NetworkProfile) -> dict[str, dict[str, str]]:
    """``{"annotations": ...}`` asking the CNI bandwidth plugin to limit a pod's traffic in
    both directions to ``network``'s rate; nothing for ``host``. Delays cannot be asked
    for this way (validation refuses them on Kubernetes)."""
    if network.rate_bit_per_s is None:
        return {}
    if network.delay_s:
        raise ValueError(f"{network}: the bandwidth plugin limits rates; it cannot add delay")
    rate = bandwidth_quantity(network.rate_bit_per_s)
    return {
        "annotations": {
            "kubernetes.io/ingress-bandwidth": rate,
            "kubernetes.io/egress-bandwidth": rate,
        }
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
    placement: str = "spread",
    network: NetworkProfile = HOST_PROFILE,
) -> dict:
    """The Indexed Job of one group: ``world_size`` pods, rank = completion index.

    ``worker_args`` are the pod-side arguments (see :func:`pod_argv`).
    ``timeout_s`` (seconds) becomes ``activeDeadlineSeconds``, rounded up;
    ``gpus_per_worker`` is the ``nvidia.com/gpu`` limit of each pod (none when 0).
    ``placement`` ``spread`` keeps two pods of the group off one node (a required
    anti-affinity on the node's hostname label); ``pack`` lets them share.
    ``network`` a shaped profile (``scalebench.network``, rate only) sets the CNI bandwidth
    plugin's ingress and egress annotations on every pod. The ``SCALEBENCH_MLPERF_*``
    settings set in this process's environment are copied into the pods'.
    """
    labels = _labels(run_id)
    env = {
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": f"{names.job}-0.{names.service}",
        "MASTER_PORT": str(MASTER_PORT),
        "PYTHONUNBUFFERED": "1",
        # Pods do not inherit Airflow's environment: the MLPerf log's settings that are set
        **mlperf_environment(),
    }
    # The root filesystem is read-only: these three are all a rank writes to.
    mounts = [
        {"name": "results", "mountPath": RESULTS_MOUNT},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "results", "persistentVolumeClaim": {"claimName": settings.results_claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
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
        "env": [{"name": k, "value": v} for k, v in {**env, **WRITABLE_HOMES}.items()]
        # The node each rank runs on, for its environment record (placement is checked).
        + [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": mounts,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "resources": settings.resources,
    }
    if gpus_per_worker > 0:
        container["resources"]["limits"]["nvidia.com/gpu"] = gpus_per_worker
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
    if placement == "spread":  # one rank per node: the network between ranks is measured
        apart = {
            "labelSelector": {"matchLabels": {JOB_NAME_LABEL: names.job}},
            "topologyKey": HOSTNAME_LABEL,
        }
        pod_spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
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
        "template": {
            "metadata": {"labels": labels, **bandwidth_annotations(network)},
            "spec": pod_spec,
        },
    }
    if timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(timeout_s))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": names.job, "namespace": settings.namespace, "labels": labels},
        "spec": spec,
    }
