"""Read the cluster before a sweep: :func:`check_cluster` (``scalebench cluster check``),
:func:`sweep_checks` (the Kubernetes ``validate`` task) and :func:`read_nodes`.

Everything goes through the launcher's own client (the provider's
``KubernetesHook`` on ``SCALEBENCH_K8S_CONN_ID``), as the launcher's identity, and
each look becomes one :class:`CheckLine`: PASS, WARN or FAIL, what was found and,
short of PASS, what to do. The looks:

- ``access``: a ``SelfSubjectAccessReview`` for every call the launcher makes
  (:data:`~operators.kubernetes.constants.API_CALLS`);
- ``gpu nodes``: the nodes the pods may run on (matching the node selector, their
  taints tolerated, schedulable) and the ``nvidia.com/gpu`` each can give, with the
  GPU product label;
- ``rdma``: the RDMA resource (``SCALEBENCH_K8S_RDMA_RESOURCE``) those nodes advertise,
  and a namespace whose Pod Security level lets the pods add ``IPC_LOCK``;
- ``storage``: the storage classes, and the results and data claims, bound with an
  access mode several pods can mount;
- ``kueue``: Kueue's LocalQueue CRD and the named queue, where a queue is named;
- ``image``: a short-lived pod of the worker image that imports the worker (skipped
  with ``pull=False``), deleted however it ends;
- ``dns``: the DNS pods carry the labels the groups' NetworkPolicies open DNS to.

A cluster that cannot be reached raises :class:`ClusterUnreachable`, one sentence.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from operators.kubernetes.constants import (
    API_CALLS,
    BASE_LABELS,
    CHECK_CALLS,
    CLUSTER_READS,
    CONTAINER,
)
from operators.kubernetes.manifests import container_security, pod_security
from operators.kubernetes.pod_status import get_field, image_digest, pending_problem
from operators.kubernetes.settings import KubernetesSettings
from scalebench.cluster_fit import ClusterNode, ClusterNodes

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery
DNS_NAMESPACE = "kube-system"
DNS_LABELS = {"k8s-app": "kube-dns"}  # what the groups' NetworkPolicies open port 53 to
LOCAL_QUEUE_CRD = "localqueues.kueue.x-k8s.io"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"
SHARED_MODES = {"ReadWriteMany", "ReadOnlyMany"}  # a claim several pods (nodes) mount
REQUEST_TIMEOUT_S = 10.0  # each API call of the check
PULL_CHECK_TIMEOUT_S = 300.0  # the image check's pod: pulled and run within this
# Pod Security levels that refuse the IPC_LOCK capability RDMA needs.
RESTRICTING_LEVELS = ("restricted", "baseline")


class ClusterUnreachable(RuntimeError):
    """The cluster could not be asked, or cannot run a sweep: no or an unreadable kube
    config, an Airflow connection that is not there, an API server that does not answer, a
    FAIL of the looks a sweep needs. One sentence, with what to do."""


@dataclass(frozen=True)
class CheckLine:
    """One look at the cluster: ``status`` PASS, WARN or FAIL, the ``check`` it belongs
    to, what was ``found`` and, short of PASS, what to do (``fix``)."""

    status: str
    check: str
    found: str
    fix: str = ""


@dataclass
class ClusterApis:
    """The typed APIs of ``kubernetes.client`` the checks use, on one client."""

    core: Any
    storage: Any
    authorization: Any
    extensions: Any
    custom: Any
    api_client: Any

    @classmethod
    def connect(cls, settings: KubernetesSettings, config_file: str | None = None) -> ClusterApis:
        """The APIs through the launcher's Airflow connection (``config_file``: a kube config
        instead); raises :class:`ClusterUnreachable` when no client can be made."""
        if config_file is not None:
            problem = config_file_problem(config_file)
            if problem:
                raise ClusterUnreachable(
                    f"the kube config {config_file} {problem}; point --kubeconfig at the "
                    "file kubectl uses (~/.kube/config), or define the connection "
                    "(AIRFLOW_CONN_...)"
                )
        else:
            for path in filter(None, os.environ.get("KUBECONFIG", "").split(os.pathsep)):
                problem = config_file_problem(path)
                if problem and problem != "does not exist":  # missing: the connection's own
                    raise ClusterUnreachable(
                        f"cannot reach the cluster through KUBECONFIG: the file {path} "
                        f"{problem}; point KUBECONFIG at the file kubectl uses, or unset it"
                    )
        try:
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
            from kubernetes import client

            if config_file is not None:
                hook = KubernetesHook(conn_id=None, config_file=config_file)
            else:
                hook = KubernetesHook(conn_id=settings.conn_id)
            api_client = hook.api_client
        except Exception as exc:  # the hook's many ways of saying "no configuration"
            raise ClusterUnreachable(_no_client(settings, config_file, exc)) from None
        return cls(
            core=client.CoreV1Api(api_client),
            storage=client.StorageV1Api(api_client),
            authorization=client.AuthorizationV1Api(api_client),
            extensions=client.ApiextensionsV1Api(api_client),
            custom=client.CustomObjectsApi(api_client),
            api_client=api_client,
        )

    def plain(self, obj: Any) -> Any:
        """A client model as the API's JSON (camelCase dicts)."""
        return self.api_client.sanitize_for_serialization(obj)


# The most of a kube config read (bytes): a real one, of many clusters with their
# certificates, holds some hundreds of kilobytes.
MAX_CONFIG_BYTES = 4 << 20


def config_file_problem(path: str) -> str | None:
    """What keeps the file at ``path`` from being a kube config, as the end of a sentence
    ("does not exist", "is not YAML at line 3"), or None where it could be one: a readable file of
    at most :data:`MAX_CONFIG_BYTES`, UTF-8 YAML whose top is a mapping. Whether its
    contexts, clusters and users fit together is the client's to say."""
    import yaml

    if not os.path.exists(path):
        return "does not exist"
    if os.path.isdir(path):
        return "is a folder, not a file"
    if not os.path.isfile(path):
        return "is not a regular file"
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if len(raw) > MAX_CONFIG_BYTES:
        return f"is larger than {MAX_CONFIG_BYTES >> 20} MiB: no kube config is"
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where it is built
        data = yaml.load(raw.decode("utf-8"), Loader=loader)  # a safe loader
    except UnicodeDecodeError:
        return "is not text (UTF-8)"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"is not YAML{where}"
    if not raw.strip():
        return "is empty"
    if not isinstance(data, dict):
        return "is not a kube config: its top must be a mapping of clusters, contexts and users"
    return None


def _no_client(settings: KubernetesSettings, config_file: str | None, exc: Exception) -> str:
    where = (
        f"the kube config {config_file}"
        if config_file
        else f"the Airflow connection {settings.conn_id!r} (SCALEBENCH_K8S_CONN_ID)"
    )
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return (
        f"cannot reach the cluster through {where}: {reason}; point KUBECONFIG or --kubeconfig "
        "at a kube config, or define the connection (AIRFLOW_CONN_...)"
    )


def _api_status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and status > 0 else None


def _reached(apis: ClusterApis, settings: KubernetesSettings) -> None:
    """One cheap call: the namespace. Raises :class:`ClusterUnreachable` when the API server
    does not answer (a refusal, 403 or 404, is an answer)."""
    import logging

    # urllib3 warns of every retry; the one sentence below says what they came to
    pool_log = logging.getLogger("urllib3.connectionpool")
    level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    host = getattr(getattr(apis.api_client, "configuration", None), "host", "the cluster")
    try:
        answer = apis.core.read_namespace(
            settings.namespace, _request_timeout=REQUEST_TIMEOUT_S, _preload_content=False
        )
        not_an_api = _not_an_api_answer(answer)
        getattr(answer, "release_conn", lambda: None)()  # read whole: back to the pool
        if not_an_api:
            raise ClusterUnreachable(
                f"the server at {host} answers, but not as a Kubernetes API server "
                f"({not_an_api}); point the kube config's server at the cluster's API "
                "(kubectl cluster-info shows it)"
            )
    except ClusterUnreachable:
        raise
    except Exception as exc:
        if _api_status(exc) is not None:
            return
        raise ClusterUnreachable(
            f"the API server at {host} does not answer: {unanswered_reason(exc)}; check that "
            "the cluster is up and the kube config's server address is the one kubectl uses"
        ) from None
    finally:
        pool_log.setLevel(level)


def _not_an_api_answer(answer: Any) -> str | None:
    """What in a raw answer to a namespace read says it is not the Kubernetes API's (an HTML
    page of a proxy's login, a web server), or None: the API answers JSON with a ``kind``."""
    import json

    headers = getattr(answer, "headers", None) or {}
    kind = str(headers.get("Content-Type", "") or "").split(";")[0].strip()
    try:
        body = json.loads(getattr(answer, "data", b"") or b"")
    except (ValueError, TypeError):
        return f"its answer is {kind or 'not JSON'}"
    if not isinstance(body, dict) or "kind" not in body:
        return "its answer is JSON without a kind"
    return None


def unanswered_reason(exc: BaseException) -> str:
    """Why a call got no answer, in a few words: urllib3's innermost reason (``Connection
    refused``, ``timed out``, a name that does not resolve) without its connection object's
    text, at most 160 characters."""
    reason: BaseException | str = exc
    for _ in range(5):  # MaxRetryError → NewConnectionError → ... each says why in .reason
        inner = getattr(reason, "reason", None)
        if not isinstance(inner, BaseException | str) or inner is reason:
            break
        reason = inner
    text = " ".join(str(reason).split())
    # "HTTPSConnection(host='h', port=1): Failed to establish a new connection: [Errno 111] …"
    text = text.split("): ", 1)[1] if text.startswith("HTTP") and "): " in text else text
    text = text or type(reason).__name__
    return text if len(text) <= 160 else text[:159] + "…"


# -- reading the nodes ------------------------------------------------------------------------


def tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a ``NoSchedule`` or ``NoExecute`` taint is tolerated (``PreferNoSchedule``
    never keeps a pod off), as the scheduler matches them."""
    if taint.get("effect") == "PreferNoSchedule":
        return True
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator", "Equal") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def nodes_for_pods(
    nodes: Iterable[Mapping[str, Any]], settings: KubernetesSettings
) -> ClusterNodes:
    """The nodes (the API's JSON) the worker pods may run on: labelled as the node selector
    asks, schedulable, every taint tolerated; with the GPUs each can give."""
    chosen = []
    for node in nodes:
        labels = get_field(node, "metadata", "labels") or {}
        if any(labels.get(key) != value for key, value in settings.node_selector.items()):
            continue
        if get_field(node, "spec", "unschedulable"):
            continue
        taints = get_field(node, "spec", "taints") or []
        if not all(tolerated(taint, settings.tolerations) for taint in taints):
            continue
        allocatable = get_field(node, "status", "allocatable") or {}
        chosen.append(
            ClusterNode(
                name=get_field(node, "metadata", "name") or "",
                gpus=_count(allocatable.get(GPU_RESOURCE, 0)),
                gpu_product=labels.get(GPU_PRODUCT_LABEL, ""),
            )
        )
    selector = (
        "nodes labelled " + ", ".join(f"{k}={v}" for k, v in settings.node_selector.items())
        if settings.node_selector
        else "every schedulable node"
    )
    return ClusterNodes(tuple(sorted(chosen, key=lambda n: n.name)), selector=selector)


def _list_nodes(apis: ClusterApis) -> list[dict[str, Any]]:
    answer = apis.core.list_node(_request_timeout=REQUEST_TIMEOUT_S)
    return apis.plain(answer).get("items", [])


def read_nodes(apis: ClusterApis, settings: KubernetesSettings) -> ClusterNodes:
    """The nodes the worker pods may run on (raises the client's ``ApiException`` when the
    nodes may not be listed)."""
    return nodes_for_pods(_list_nodes(apis), settings)


# -- the checks -------------------------------------------------------------------------------


def _access(apis: ClusterApis, settings: KubernetesSettings) -> CheckLine:
    """Every call the launcher makes, and its reads before a sweep, asked of the API as
    this identity (the cluster-wide reads without a namespace)."""
    denied = []
    namespaced = set(API_CALLS.values()) | set(CHECK_CALLS.values())
    wide = set(CLUSTER_READS.values())
    for group, resource, verb in sorted(namespaced) + sorted(wide):
        name, _, sub = resource.partition("/")
        attributes = {"verb": verb, "group": group, "resource": name}
        if (group, resource, verb) in namespaced:
            attributes["namespace"] = settings.namespace
        if sub:
            attributes["subresource"] = sub
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = apis.plain(
            apis.authorization.create_self_subject_access_review(
                review, _request_timeout=REQUEST_TIMEOUT_S
            )
        )
        if not (answer.get("status") or {}).get("allowed"):
            denied.append((f"{verb} {resource}", (group, resource, verb) in namespaced))
    calls = len(namespaced | wide)
    if not denied:
        return CheckLine(PASS, "access", f"the launcher may make all {calls} of its calls")
    needed = [call for call, in_namespace in denied if in_namespace]
    if needed:  # a group could not start, or not be followed and cleaned up
        return CheckLine(
            FAIL,
            "access",
            f"denied in namespace {settings.namespace}: {', '.join(needed)}",
            "apply deploy/kubernetes/base and bind the Role scalebench-launcher to this identity",
        )
    return CheckLine(  # only the cluster-wide reads: groups run, unfitted and unchecked
        WARN,
        "access",
        f"denied cluster-wide: {', '.join(call for call, _ in denied)}; ranks_per_node auto "
        "becomes 1 and groups are not fitted to the nodes",
        "bind the ClusterRole scalebench-cluster-reader (deploy/kubernetes/base) to this identity",
    )


def _gpu_nodes(
    apis: ClusterApis, settings: KubernetesSettings
) -> tuple[CheckLine, ClusterNodes | None, list[dict[str, Any]]]:
    """The nodes the pods may run on and their GPUs; the nodes' JSON for the RDMA look."""
    try:
        listed = _list_nodes(apis)
    except Exception as exc:
        if _api_status(exc) != 403:
            raise
        line = CheckLine(
            WARN,
            "gpu nodes",
            "this identity may not list nodes: ranks_per_node auto and the fit check need it",
            "apply deploy/kubernetes/base (ClusterRole scalebench-cluster-reader) and bind it",
        )
        return line, None, []
    cluster = nodes_for_pods(listed, settings)
    gpu_nodes = cluster.gpu_nodes
    if not gpu_nodes:
        with_gpus = [n for n in nodes_for_pods(listed, _open(settings)).gpu_nodes]
        fix = "install the NVIDIA device plugin (or GPU Operator) on the GPU nodes"
        if with_gpus:
            fix = (
                f"{len(with_gpus)} GPU node(s) exist but the pods may not run there: set "
                "SCALEBENCH_K8S_NODE_SELECTOR and SCALEBENCH_K8S_TOLERATIONS to their labels "
                "and taints (deploy/kubernetes/overlays/gpu)"
            )
        found = f"no node the pods may run on ({cluster.selector}) advertises {GPU_RESOURCE}"
        return CheckLine(FAIL, "gpu nodes", found, fix), cluster, listed
    counts: dict[int, int] = {}
    for node in gpu_nodes:
        counts[node.gpus] = counts.get(node.gpus, 0) + 1
    shape = ", ".join(f"{n} × {gpus} GPUs" for gpus, n in sorted(counts.items()))
    products = ", ".join(cluster.products()) or "product unlabelled"
    found = f"{shape} ({products}) on {cluster.selector}; ranks_per_node auto: "
    found += f"{cluster.typical_gpus()}"
    return CheckLine(PASS, "gpu nodes", found), cluster, listed


def _open(settings: KubernetesSettings) -> KubernetesSettings:
    """The settings with no node selector and every taint tolerated: every node."""
    from dataclasses import replace

    return replace(settings, node_selector={}, tolerations=({"operator": "Exists"},))


def _rdma(
    apis: ClusterApis,
    settings: KubernetesSettings,
    cluster: ClusterNodes | None,
    listed: list[dict[str, Any]],
) -> list[CheckLine]:
    """The RDMA resource on the pods' GPU nodes, and a namespace that lets pods lock memory."""
    resource = settings.rdma_resource
    if not resource:
        return [
            CheckLine(
                WARN,
                "rdma",
                "no RDMA resource is asked (SCALEBENCH_K8S_RDMA_RESOURCE): NCCL between nodes "
                "runs over TCP sockets",
                "set SCALEBENCH_K8S_RDMA_RESOURCE to the fabric's device resource (e.g. "
                "rdma/ib) to measure the fabric",
            )
        ]
    lines = []
    if cluster is not None:
        names = {node.name for node in cluster.gpu_nodes}
        having = [
            get_field(n, "metadata", "name")
            for n in listed
            if get_field(n, "metadata", "name") in names
            and _count((get_field(n, "status", "allocatable") or {}).get(resource, 0))
            >= settings.rdma_devices
        ]
        if names and len(having) == len(names):
            lines.append(CheckLine(PASS, "rdma", f"{resource} on all {len(names)} GPU node(s)"))
        else:
            lines.append(
                CheckLine(
                    FAIL,
                    "rdma",
                    f"{resource} ({settings.rdma_devices} per pod) on {len(having)} of "
                    f"{len(names)} GPU node(s)",
                    "install the fabric's device plugin (e.g. the RDMA shared device plugin) "
                    "or correct SCALEBENCH_K8S_RDMA_RESOURCE",
                )
            )
    try:
        namespace = apis.plain(
            apis.core.read_namespace(settings.namespace, _request_timeout=REQUEST_TIMEOUT_S)
        )
    except Exception as exc:
        if _api_status(exc) is None:
            raise
        return lines
    level = (get_field(namespace, "metadata", "labels") or {}).get(
        "pod-security.kubernetes.io/enforce", ""
    )
    if level in RESTRICTING_LEVELS:
        lines.append(
            CheckLine(
                FAIL,
                "rdma",
                f"namespace {settings.namespace} enforces Pod Security {level!r}, which refuses "
                "the IPC_LOCK capability RDMA pods add",
                "label the namespace pod-security.kubernetes.io/enforce=privileged, or unset "
                "SCALEBENCH_K8S_RDMA_RESOURCE",
            )
        )
    return lines


def _claim(apis: ClusterApis, settings: KubernetesSettings, name: str, role: str) -> CheckLine:
    try:
        claim = apis.plain(
            apis.core.read_namespaced_persistent_volume_claim(
                name, settings.namespace, _request_timeout=REQUEST_TIMEOUT_S
            )
        )
    except Exception as exc:
        status = _api_status(exc)
        if status == 404:
            return CheckLine(
                FAIL,
                "storage",
                f"the {role} claim {name} does not exist in namespace {settings.namespace}",
                "apply deploy/kubernetes/base (it holds both claims)",
            )
        if status == 403:
            return CheckLine(
                WARN,
                "storage",
                f"this identity may not read the {role} claim {name}",
                "grant get on persistentvolumeclaims (the Role of deploy/kubernetes/base)",
            )
        raise
    phase = get_field(claim, "status", "phase") or "Pending"
    modes = set(
        get_field(claim, "status", "accessModes") or get_field(claim, "spec", "accessModes") or []
    )
    size = (get_field(claim, "status", "capacity") or {}).get("storage", "")
    if phase != "Bound":
        wanted = get_field(claim, "spec", "storageClassName") or "the default class"
        return CheckLine(
            FAIL,
            "storage",
            f"the {role} claim {name} is {phase}, not Bound ({wanted})",
            "set its storageClassName to a class that provides ReadWriteMany (see the storage "
            "classes line)",
        )
    if not modes & SHARED_MODES:
        return CheckLine(
            FAIL,
            "storage",
            f"the {role} claim {name} is bound {', '.join(sorted(modes)) or 'without a mode'}: "
            "one node only, and a group's pods run on several",
            "recreate it ReadWriteMany on a class that provides it (NFS, CephFS, EFS, Filestore)",
        )
    return CheckLine(
        PASS,
        "storage",
        f"the {role} claim {name}: Bound, {', '.join(sorted(modes))}, {size or 'size unknown'}",
    )


def _storage(apis: ClusterApis, settings: KubernetesSettings) -> list[CheckLine]:
    lines = []
    try:
        classes = apis.plain(
            apis.storage.list_storage_class(_request_timeout=REQUEST_TIMEOUT_S)
        ).get("items", [])
    except Exception as exc:
        if _api_status(exc) != 403:
            raise
        lines.append(CheckLine(WARN, "storage", "this identity may not list storage classes"))
    else:
        default_key = "storageclass.kubernetes.io/is-default-class"
        names = [
            get_field(c, "metadata", "name")
            + (
                " (default)"
                if (get_field(c, "metadata", "annotations") or {}).get(default_key) == "true"
                else ""
            )
            for c in classes
        ]
        lines.append(
            CheckLine(PASS, "storage", "storage classes: " + ", ".join(names))
            if names
            else CheckLine(
                WARN,
                "storage",
                "no storage class: the claims bind only to volumes made by hand",
                "install a provisioner with ReadWriteMany volumes (NFS, CephFS, EFS, Filestore)",
            )
        )
    lines.append(_claim(apis, settings, settings.results_claim, "results"))
    if settings.data_claim:
        lines.append(_claim(apis, settings, settings.data_claim, "data"))
    else:
        lines.append(
            CheckLine(
                WARN,
                "storage",
                "no data claim (SCALEBENCH_K8S_DATA_CLAIM): full sweeps have no data sets",
                "set SCALEBENCH_K8S_DATA_CLAIM=scalebench-data (deploy/kubernetes/base makes it)",
            )
        )
    return lines


def _kueue(apis: ClusterApis, settings: KubernetesSettings) -> CheckLine:
    queue = settings.queue_name
    try:
        apis.extensions.read_custom_resource_definition(  # whether it is there, not what
            LOCAL_QUEUE_CRD, _request_timeout=REQUEST_TIMEOUT_S, _preload_content=False
        )
        installed = True
    except Exception as exc:
        status = _api_status(exc)
        if status == 403:
            return CheckLine(WARN, "kueue", "this identity may not read CRDs: Kueue not checked")
        if status != 404:
            raise
        installed = False
    if not queue:
        state = "installed" if installed else "not installed"
        return CheckLine(
            PASS, "kueue", f"no queue named (SCALEBENCH_K8S_QUEUE_NAME); Kueue {state}"
        )
    if not installed:
        return CheckLine(
            FAIL,
            "kueue",
            f"queue {queue} named, but Kueue's {LOCAL_QUEUE_CRD} is not installed",
            "install Kueue, or unset SCALEBENCH_K8S_QUEUE_NAME",
        )
    try:
        apis.custom.get_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            settings.namespace,
            "localqueues",
            queue,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
    except Exception as exc:
        status = _api_status(exc)
        if status == 404:
            return CheckLine(
                FAIL,
                "kueue",
                f"no LocalQueue {queue} in namespace {settings.namespace}",
                "apply deploy/kubernetes/overlays/kueue, or name a queue that exists",
            )
        if status != 403:
            raise
        return CheckLine(WARN, "kueue", f"this identity may not read LocalQueue {queue}")
    return CheckLine(PASS, "kueue", f"LocalQueue {queue} in namespace {settings.namespace}")


def pull_check_manifest(settings: KubernetesSettings, name: str) -> dict[str, Any]:
    """The image check's pod: the worker image, scheduled where the workers are, importing
    the worker and exiting; as locked down as a worker pod."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(PULL_CHECK_TIMEOUT_S),
        "serviceAccountName": settings.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "containers": [
            {
                "name": CONTAINER,
                "image": settings.image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": ["python", "-c", "import workers.run"],
                "securityContext": container_security(),
                "resources": {
                    "requests": {"cpu": "100m", "memory": "512Mi"},
                    "limits": {"cpu": "1", "memory": "2Gi"},
                },
            }
        ],
    }
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.runtime_class:
        spec["runtimeClassName"] = settings.runtime_class
    if settings.image_pull_credentials:
        spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_credentials]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": {**BASE_LABELS, **settings.labels, "scalebench.io/check": "image"},
        },
        "spec": spec,
    }


def _image(
    apis: ClusterApis,
    settings: KubernetesSettings,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float = PULL_CHECK_TIMEOUT_S,
    poll_s: float = 1.0,
) -> CheckLine:
    """Run the image check's pod to its end (or ``timeout_s``); it is deleted however this ends."""
    name = f"scalebench-image-check-{secrets.token_hex(3)}"
    namespace = settings.namespace
    try:
        apis.core.create_namespaced_pod(
            namespace, pull_check_manifest(settings, name), _request_timeout=REQUEST_TIMEOUT_S
        )
    except Exception as exc:
        if _api_status(exc) != 403:
            raise
        return CheckLine(FAIL, "image", "this identity may not create pods", "see the access line")
    started = clock()
    try:
        while True:
            pod = apis.plain(
                apis.core.read_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT_S)
            )
            phase = get_field(pod, "status", "phase")
            if phase == "Succeeded":
                digest = image_digest([pod]) or settings.image
                where = get_field(pod, "spec", "nodeName") or "a node"
                return CheckLine(PASS, "image", f"{digest} pulled and ran on {where}")
            if phase == "Failed":
                statuses = get_field(pod, "status", "containerStatuses") or [{}]
                ended = get_field(statuses[0], "state", "terminated") or {}
                return CheckLine(
                    FAIL,
                    "image",
                    f"{settings.image} pulled, but `python -c 'import workers.run'` exited "
                    f"{ended.get('exitCode', '?')} ({ended.get('reason', 'Failed')})",
                    "build the worker image from docker/ (make worker-image) and push it",
                )
            problem = pending_problem([pod], clock(), started, timeout_s, image_pull_grace_s=0.0)
            if problem:
                return CheckLine(
                    FAIL,
                    "image",
                    f"{settings.image}: {problem}",
                    "push the image where the nodes pull from, or set "
                    "SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS",
                )
            if clock() - started > timeout_s:
                return CheckLine(FAIL, "image", f"the check pod did not end within {timeout_s:g} s")
            sleep(poll_s)
    finally:
        # already gone (its deadline), or the cluster went away: nothing left to delete
        with contextlib.suppress(Exception):
            apis.core.delete_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT_S)


def _dns(apis: ClusterApis) -> CheckLine:
    selector = ",".join(f"{k}={v}" for k, v in DNS_LABELS.items())
    try:
        pods = apis.plain(
            apis.core.list_namespaced_pod(
                DNS_NAMESPACE, label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S
            )
        ).get("items", [])
    except Exception as exc:
        if _api_status(exc) != 403:
            raise
        return CheckLine(
            WARN,
            "dns",
            f"this identity may not list the pods of {DNS_NAMESPACE}",
            f"check that the DNS pods carry {selector}: the groups' NetworkPolicies open "
            "DNS to those only",
        )
    labelled = [
        p
        for p in pods
        if all(
            (get_field(p, "metadata", "labels") or {}).get(k) == v for k, v in DNS_LABELS.items()
        )
    ]
    if not labelled:
        return CheckLine(
            FAIL,
            "dns",
            f"no pod in {DNS_NAMESPACE} carries {selector}: the groups' NetworkPolicies open DNS "
            "to those only, so ranks could not resolve rank 0",
            "tell us your DNS pods' labels; until then, allow DNS egress in your own policy",
        )
    running = sum(get_field(p, "status", "phase") == "Running" for p in labelled)
    return CheckLine(
        PASS, "dns", f"{running} of {len(labelled)} DNS pod(s) running with {selector}"
    )


def _guarded(check: str, look: Callable[[], CheckLine | list[CheckLine]]) -> list[CheckLine]:
    """One look, its unexpected API answer said as a FAIL line instead of raised."""
    try:
        lines = look()
    except ClusterUnreachable:
        raise
    except Exception as exc:
        status = _api_status(exc)
        reason = getattr(exc, "reason", "") or " ".join(str(exc).split())[:160]
        said = f"the API answered {status} {reason}" if status else f"failed: {reason}"
        return [CheckLine(FAIL, check, said)]
    return lines if isinstance(lines, list) else [lines]


class _NodesLook:
    """The ``gpu nodes`` look, keeping what it read for the looks after it."""

    def __init__(self, apis: ClusterApis, settings: KubernetesSettings) -> None:
        self.apis, self.settings = apis, settings
        self.cluster: ClusterNodes | None = None
        self.listed: list[dict[str, Any]] = []

    def __call__(self) -> CheckLine:
        line, self.cluster, self.listed = _gpu_nodes(self.apis, self.settings)
        return line


def sweep_checks(
    apis: ClusterApis, settings: KubernetesSettings
) -> tuple[list[CheckLine], ClusterNodes | None]:
    """What a sweep needs of the cluster: access, the GPU nodes (the nodes are returned, for
    ``ranks_per_node: auto`` and the fit), the claims, and the queue where one is named.
    Raises :class:`ClusterUnreachable` when the API server does not answer."""
    _reached(apis, settings)
    nodes = _NodesLook(apis, settings)
    lines = _guarded("access", lambda: _access(apis, settings)) + _guarded("gpu nodes", nodes)
    claims = [settings.results_claim, settings.data_claim]
    lines += _guarded(
        "storage",
        lambda: [
            _claim(apis, settings, name, role)
            for name, role in zip(claims, ("results", "data"), strict=True)
            if name
        ],
    )
    if settings.queue_name:
        lines += _guarded("kueue", lambda: _kueue(apis, settings))
    return lines, nodes.cluster


def check_cluster(
    apis: ClusterApis,
    settings: KubernetesSettings,
    *,
    pull: bool = True,
    say: Callable[[CheckLine], None] | None = None,
) -> list[CheckLine]:
    """Every look, in order (``say`` hears each line as it is found); raises
    :class:`ClusterUnreachable` when the API server does not answer."""
    _reached(apis, settings)
    nodes = _NodesLook(apis, settings)
    looks: list[tuple[str, Callable[[], CheckLine | list[CheckLine]]]] = [
        ("access", lambda: _access(apis, settings)),
        ("gpu nodes", nodes),
        ("rdma", lambda: _rdma(apis, settings, nodes.cluster, nodes.listed)),
        ("storage", lambda: _storage(apis, settings)),
        ("kueue", lambda: _kueue(apis, settings)),
        (
            "image",
            (lambda: _image(apis, settings))
            if pull
            else (
                lambda: CheckLine(WARN, "image", f"{settings.image} not checked (--no-pull-check)")
            ),
        ),
        ("dns", lambda: _dns(apis)),
    ]
    lines: list[CheckLine] = []
    for check, look in looks:
        for line in _guarded(check, look):
            lines.append(line)
            if say is not None:
                say(line)
    return lines


def nodes_for_sweep(settings: KubernetesSettings | None = None) -> ClusterNodes | None:
    """The nodes a sweep's pods may run on, after the looks a sweep needs
    (:func:`sweep_checks`); ``None`` where this identity may not list nodes (nothing is then
    fitted). Raises :class:`ClusterUnreachable` naming the first problem: a bad setting, a
    cluster out of reach, a FAIL (each with what to do)."""
    try:
        settings = settings or KubernetesSettings.from_env()
    except ValueError as exc:
        raise ClusterUnreachable(str(exc)) from None
    lines, nodes = sweep_checks(ClusterApis.connect(settings), settings)
    refusals = failures(lines)
    if refusals:
        said = "; ".join(
            f"{line.found} ({line.fix})" if line.fix else line.found for line in refusals
        )
        raise ClusterUnreachable(
            f"the cluster cannot run a sweep: {said} (scalebench cluster check shows every look)"
        )
    return nodes


def failures(lines: Iterable[CheckLine]) -> list[CheckLine]:
    """The FAIL lines."""
    return [line for line in lines if line.status == FAIL]


def table(lines: Iterable[CheckLine]) -> str:
    """The lines as the command prints them: status, check, what was found, then what to
    do on a line of its own beneath."""
    rows = []
    for line in lines:
        rows.append(f"{line.status:<5} {line.check:<10} {line.found}")
        if line.fix and line.status != PASS:
            rows.append(f"{'':<16}→ {line.fix}")
    return "\n".join(rows)


__all__ = [
    "FAIL",
    "PASS",
    "WARN",
    "CheckLine",
    "ClusterApis",
    "ClusterUnreachable",
    "check_cluster",
    "failures",
    "nodes_for_pods",
    "nodes_for_sweep",
    "read_nodes",
    "sweep_checks",
    "table",
    "tolerated",
]
