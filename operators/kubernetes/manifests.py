"""The objects of one group as the API takes them: :func:`job_manifest` renders the
Indexed Job (``k`` pods, completion index = rank, no retries, rendezvous at rank
0), :func:`service_manifest` the headless Service that gives each pod a DNS
name and :func:`network_policy_manifest` the group's own NetworkPolicy (its pods
reach each other and DNS, nothing else), all labelled with the worker's name,
the run id and the site's extra labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from operators.kubernetes.constants import (
    BASE_LABELS,
    CONTAINER,
    DATA_MOUNT,
    DISRUPTION_CONDITION,
    EPHEMERAL_PORTS,
    HOSTNAME_LABEL,
    JOB_NAME_LABEL,
    MASTER_PORT,
    QUEUE_LABEL,
    RESULTS_MOUNT,
    RUN_ID_LABEL,
    TMP_SIZE,
    TTL_AFTER_FINISHED_S,
    WORKER_UID,
    WRITABLE_HOMES,
)
from operators.kubernetes.names import GroupNames, label_value
from operators.kubernetes.setting_fields import times
from operators.kubernetes.settings import KubernetesSettings
from scalebench.config import mlperf_environment
from scalebench.network import HOST_PROFILE, NetworkProfile
from scalebench.rank import (
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_NO_SPACE,
    EXIT_REFUSED,
    EXIT_TERMINATED,
)

# Exit statuses that end the group at once (scalebench.rank): every status a rank
# answers with other than 0. The Job fails on the first, without waiting for the rest.
FAILING_EXIT_STATUSES = (EXIT_FAILED, EXIT_REFUSED, EXIT_DIVERGED, EXIT_NO_SPACE, EXIT_TERMINATED)


def _labels(run_id: str, settings: KubernetesSettings) -> dict[str, str]:
    labels = {**settings.labels, **BASE_LABELS}  # the site's labels never replace ours
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
            "labels": _labels(run_id, settings),
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


def _group_ports() -> list[dict[str, Any]]:
    """The rendezvous port and the collectives' port range, TCP."""
    low, high = EPHEMERAL_PORTS
    return [
        {"protocol": "TCP", "port": MASTER_PORT},
        {"protocol": "TCP", "port": low, "endPort": high},
    ]


def network_policy_manifest(
    names: GroupNames,
    settings: KubernetesSettings,
    *,
    run_id: str = "",
    selector: tuple[str, str] | None = None,
) -> dict:
    """The group's own NetworkPolicy: its pods accept connections only from pods of the
    same Job, on the rendezvous port and the collectives' ports, and connect only to
    those and to the cluster's DNS (``kube-dns`` in ``kube-system``, port 53). The
    namespace's default policy (deploy/kubernetes) denies the rest. ``selector`` (a
    label and its value) picks the group's pods when no Job labels them (a lone pod)."""
    label, value = selector or (JOB_NAME_LABEL, names.job)
    group = {"podSelector": {"matchLabels": {label: value}}}
    dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.job,
            "namespace": settings.namespace,
            "labels": _labels(run_id, settings),
        },
        "spec": {
            "podSelector": {"matchLabels": {label: value}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [group], "ports": _group_ports()}],
            "egress": [
                {"to": [group], "ports": _group_ports()},
                {
                    "to": [dns],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


def pod_failure_policy() -> dict[str, Any]:
    """The Job's ``podFailurePolicy``: a disrupted pod (preempted, evicted, drained) or a
    rank exiting with any of :data:`FAILING_EXIT_STATUSES` fails the Job at once. The
    disruption rule comes first: a preempted rank's SIGTERM exit (143) is a disruption."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER,
                    "operator": "In",
                    "values": list(FAILING_EXIT_STATUSES),
                },
            },
        ]
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
    ranks_per_node: int = 1,
    gpus_per_worker: int = 1,
    image: str | None = None,
    stack_env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    run_id: str = "",
    placement: str = "spread",
    network: NetworkProfile = HOST_PROFILE,
) -> dict:
    """The Indexed Job of one group of ``world_size`` ranks: one pod per node of
    ``ranks_per_node`` ranks (the ranks each pod holds: ``world_size`` must be a multiple).
    With one rank per pod, the pod runs ``python -m workers.run`` and its completion index is
    its rank; with several, it runs the node starter ``python -m workers.node``, which reads
    its node from the completion index and ``LOCAL_WORLD_SIZE`` and starts the node's ranks
    (global rank = index × ranks per node + local rank).

    ``worker_args`` are the pod-side arguments (see
    :func:`~operators.kubernetes.arguments.pod_argv`).
    ``timeout_s`` (seconds) becomes ``activeDeadlineSeconds``, rounded up;
    ``gpus_per_worker`` GPUs for each rank: a pod's ``nvidia.com/gpu`` limit is that times its
    ranks (none when 0), and its CPU and memory the settings' per rank, times its ranks too.
    ``placement`` ``spread`` keeps two pods of the group off one node (a required
    anti-affinity on the node's hostname label); ``pack`` lets them share.
    ``network`` a shaped profile (``scalebench.network``, rate only) sets the CNI bandwidth
    plugin's ingress and egress annotations on every pod. The ``SCALEBENCH_MLPERF_*``
    settings set in this process's environment, and the variables
    ``settings.env_passthrough`` names, are copied into the pods'.

    The site's settings add the rest: with a queue name the Job is created suspended
    and labelled for Kueue; the priority class, runtime class, image pull secrets,
    extra labels and annotations go on the pods; the resources' limits equal their
    requests unless the QoS setting is Burstable.
    """
    if ranks_per_node < 1 or world_size % ranks_per_node:
        raise ValueError(f"{world_size} ranks do not fill pods of {ranks_per_node}")
    pods = world_size // ranks_per_node
    labels = _labels(run_id, settings)
    container = _container(
        names,
        worker_args,
        world_size,
        settings,
        ranks_per_node=ranks_per_node,
        gpus_per_worker=gpus_per_worker,
        image=image,
        stack_env=stack_env or {},
    )
    pod_spec = _pod_spec(names, settings, container, ranks_per_node, placement)
    annotations = {**settings.annotations, **bandwidth_annotations(network).get("annotations", {})}
    template_metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        template_metadata["annotations"] = annotations
    spec = _job_spec(pods, {"metadata": template_metadata, "spec": pod_spec}, timeout_s)
    job_labels = dict(labels)
    if settings.queue_name:  # Kueue admits the Job by unsuspending it
        job_labels[QUEUE_LABEL] = settings.queue_name
        spec["suspend"] = True
    metadata: dict[str, Any] = {
        "name": names.job,
        "namespace": settings.namespace,
        "labels": job_labels,
    }
    if settings.annotations:
        metadata["annotations"] = dict(settings.annotations)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def _environment(
    names: GroupNames,
    world_size: int,
    ranks_per_node: int,
    settings: KubernetesSettings,
    stack_env: Mapping[str, str],
) -> list[dict[str, Any]]:
    """A worker container's environment: the rendezvous, the node's size where a pod holds
    several ranks, the MLPerf log's settings and the passed-on variables, the stack's
    variables, the writable homes, and the node the pod runs on."""
    node = {"LOCAL_WORLD_SIZE": str(ranks_per_node)} if ranks_per_node > 1 else {}
    env = {
        "WORLD_SIZE": str(world_size),
        **node,
        "MASTER_ADDR": f"{names.job}-0.{names.service}",
        "MASTER_PORT": str(MASTER_PORT),
        "PYTHONUNBUFFERED": "1",
        # Pods do not inherit Airflow's environment: the MLPerf log's settings that are set
        **mlperf_environment(),
        # NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...: the site's choice, as set for the launcher
        **settings.passed_environment(),
        **stack_env,  # a stack may not set the rendezvous (scalebench.stacks.RESERVED_ENV)
    }
    return [{"name": k, "value": v} for k, v in {**env, **WRITABLE_HOMES}.items()] + [
        # The node each rank runs on, for its environment record (placement is checked).
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]


def _mounts(settings: KubernetesSettings) -> list[dict[str, Any]]:
    """Where a worker container mounts the pod's volumes (:func:`_volumes`)."""
    # The root filesystem is read-only: these three are all a rank writes to.
    mounts: list[dict[str, Any]] = [
        {"name": "results", "mountPath": RESULTS_MOUNT},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if settings.data_claim:
        mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    return mounts


def _volumes(settings: KubernetesSettings, ranks_per_node: int) -> list[dict[str, Any]]:
    """A worker pod's volumes: the results claim, its shared memory and /tmp, and the data
    claim (read only) where there is one."""
    volumes: list[dict[str, Any]] = [
        {"name": "results", "persistentVolumeClaim": {"claimName": settings.results_claim}},
        # Shared memory: what each rank's data loading (and nccl between a node's GPUs) uses.
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": times(settings.shm_size, ranks_per_node)},
        },
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}},
    ]
    if settings.data_claim:
        volumes.append(
            {
                "name": "data",
                "persistentVolumeClaim": {"claimName": settings.data_claim, "readOnly": True},
            }
        )
    return volumes


def pod_security() -> dict[str, Any]:
    """The security context of every pod scalebench starts (workers, the image check, the
    data pod): a user that is not root (uid and gid 1000, which own what it writes in the
    claims) and the runtime's default seccomp profile, as Pod Security ``restricted`` asks."""
    return {
        "runAsNonRoot": True,
        "runAsUser": WORKER_UID,
        "runAsGroup": WORKER_UID,
        "fsGroup": WORKER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security(granted: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The security context of such a pod's container: not root, no privilege escalation,
    a read-only root filesystem, and the capabilities ``granted`` (default: none at all)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": WORKER_UID,
        "allowPrivilegeEscalation": False,
        "capabilities": granted or {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }


def capabilities(settings: KubernetesSettings) -> dict[str, list[str]]:
    """The worker container's capabilities: none, but ``IPC_LOCK`` with RDMA devices (the
    verbs library pins its buffers in memory; the namespace's Pod Security level must then
    be ``privileged``: ``restricted`` and ``baseline`` refuse the capability)."""
    if settings.rdma_resource:
        return {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    return {"drop": ["ALL"]}


def _container(
    names: GroupNames,
    worker_args: Sequence[str],
    world_size: int,
    settings: KubernetesSettings,
    *,
    ranks_per_node: int,
    gpus_per_worker: int,
    image: str | None,
    stack_env: Mapping[str, str],
) -> dict[str, Any]:
    """The worker container of a pod of ``ranks_per_node`` ranks: ``workers.run`` for one
    rank, the node starter ``workers.node`` for several; non-root, read-only, every
    capability dropped."""
    return {
        "name": CONTAINER,
        "image": image or settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": [
            "python",
            "-m",
            "workers.run" if ranks_per_node == 1 else "workers.node",
            *worker_args,
        ],
        "env": _environment(names, world_size, ranks_per_node, settings, stack_env),
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "volumeMounts": _mounts(settings),
        "securityContext": container_security(capabilities(settings)),
        "resources": settings.resources(gpus_per_worker, ranks=ranks_per_node),
    }


def _pod_spec(
    names: GroupNames,
    settings: KubernetesSettings,
    container: dict[str, Any],
    ranks_per_node: int,
    placement: str,
) -> dict[str, Any]:
    """The spec of a worker pod around its ``container``: its DNS name under the group's
    Service, its identity and security context, its volumes, the ``spread`` placement's
    anti-affinity, and the site's scheduling settings."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": names.service,
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,  # workers never call the API
        "enableServiceLinks": False,
        "securityContext": {
            **pod_security(),
            # The collectives' ports, which the group's NetworkPolicy opens (a safe sysctl).
            "sysctls": [
                {
                    "name": "net.ipv4.ip_local_port_range",
                    "value": f"{EPHEMERAL_PORTS[0]} {EPHEMERAL_PORTS[1]}",
                }
            ],
        },
        "containers": [container],
        "volumes": _volumes(settings, ranks_per_node),
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
    if settings.priority_class:
        pod_spec["priorityClassName"] = settings.priority_class
    if settings.runtime_class:
        pod_spec["runtimeClassName"] = settings.runtime_class
    if settings.image_pull_credentials:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_credentials]
    return pod_spec


def _job_spec(pods: int, template: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
    """An Indexed Job's spec of ``pods`` pods from ``template``: no retries, the pod failure
    policy, cleaned up after it finishes, ``timeout_s`` its deadline (rounded up)."""
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 0,
        "podFailurePolicy": pod_failure_policy(),
        "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
        "template": template,
    }
    if timeout_s is not None:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(timeout_s))
    return spec
