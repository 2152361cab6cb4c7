"""Where and how worker pods run: :class:`KubernetesSettings`, read by
:meth:`KubernetesSettings.from_env` on the Airflow worker and checked as it is
built (an invalid value raises :class:`ValueError` naming its variable).

Each setting is declared once, as a field of :class:`KubernetesSettings` whose
metadata holds a :class:`~operators.kubernetes.setting_fields.Setting` (made by
:func:`~operators.kubernetes.setting_fields.env_var`; how each kind is read and checked
is in :mod:`operators.kubernetes.setting_fields`): its kind, what a value must be, and its
meaning. Its variable is ``SCALEBENCH_K8S_`` and the field's name in capitals
(:func:`variable_of`), but for the two :data:`VARIABLE_EXCEPTIONS`. From that declaration come
:meth:`KubernetesSettings.from_env`, the checks of each field as the settings are built
(the rules that tie fields together follow them, in ``__post_init__``) and the table of
``docs/kubernetes.md`` (:func:`settings_table`; a test holds the page to it).
Adding a setting is one field here and the code that uses it.

In the pods the results claim is mounted at ``/var/scalebench/results`` and the
data claim at ``/var/scalebench/data``. Tolerations are spelled as in a pod spec
(``[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]``);
a pod still Pending after the schedule timeout (counted from
:meth:`~operators.kubernetes.objects.GroupObjects.start`) fails the group.

With ``SCALEBENCH_K8S_DEFERRABLE`` true the training task defers while its group
runs (:mod:`operators.kubernetes.trigger`) and holds no Airflow worker slot;
false keeps the task polling from its worker slot, for deployments without a
triggerer.

The CPU request follows the task text's "3 CPUs available for pod". By default every
worker container is in the **Guaranteed** QoS class: its limits equal its requests for
CPU, memory and GPUs (a limit that differs is refused), so the kubelet's static CPU
manager policy can give it whole cores of its own and it is the last to be evicted
under memory pressure. ``SCALEBENCH_K8S_QOS=Burstable`` lets the limits exceed the
requests; the runs are then marked as such. /dev/shm counts against memory.

With a queue name (this setting, or the sweep's ``queue_name``) each Job is created
suspended and labelled ``kueue.x-k8s.io/queue-name``: Kueue admits it (unsuspends it)
when the queue's quota allows, and the schedule timeout counts from then; a Job not
admitted within ``SCALEBENCH_K8S_ADMISSION_TIMEOUT_S`` ends as ``not_admitted``.
A group whose pod was disrupted (preempted, evicted, its node drained) ends as
``preempted`` and is run again up to ``SCALEBENCH_K8S_PREEMPTION_RETRIES`` times.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from operators.kubernetes.setting_fields import Setting, env_var, quantity, times
from scalebench.kubernetes_names import (
    is_label,
    is_label_value,
    is_labelled_name,
    is_qualified_name,
    is_subdomain,
)

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
QOS_CLASSES = ("Guaranteed", "Burstable")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_CPU = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def _string_values(items: Mapping[Any, Any]) -> bool:
    return all(isinstance(k, str) and isinstance(v, str) for k, v in items.items())


def _check_labels(variable: str, labels: Mapping[Any, Any]) -> None:
    """Qualified-name keys and label values."""
    _check_metadata(variable, labels, values_are_labels=True)


def _check_annotations(variable: str, annotations: Mapping[Any, Any]) -> None:
    """Qualified-name keys and string values."""
    _check_metadata(variable, annotations, values_are_labels=False)


def _check_metadata(variable: str, items: Mapping[Any, Any], *, values_are_labels: bool) -> None:
    """Labels or annotations: qualified-name keys, and label values where ``values_are_labels``."""
    for key, value in items.items():
        if not isinstance(key, str) or not is_qualified_name(key):
            raise ValueError(
                f"{variable}: the key {key!r} must be a qualified name "
                "([prefix/]name, the name at most 63 letters, digits, '-', '_' or '.')"
            )
        if not isinstance(value, str):
            raise ValueError(f"{variable}: the value of {key!r} must be a string")
        if values_are_labels and not is_label_value(value):
            raise ValueError(
                f"{variable}: the value {value!r} of {key!r} must be a label value "
                "(at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends)"
            )


def _check_tolerations(variable: str, tolerations: tuple[Any, ...]) -> None:
    """Each toleration as a pod spec takes it."""
    for toleration in tolerations:
        _check_toleration(variable, toleration)


def _check_toleration(variable: str, toleration: object) -> None:
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
        raise ValueError(f"{variable}: the toleration {toleration!r} {problem}")


@dataclass(frozen=True)
class KubernetesSettings:
    """Where and how worker pods run: each field is one ``SCALEBENCH_K8S_*`` variable (or
    ``SCALEBENCH_WORKER_IMAGE``), its :class:`Setting` in the field's metadata.

    ``node_selector`` and ``tolerations`` are in the API's own form (as in a pod spec).
    Times (``*_s``) are in seconds; ``shm_size`` and the memory request and limit are
    Kubernetes quantities of bytes (``2Gi``), the CPU request and limit quantities of CPUs
    (``3``, ``500m``). Invalid values raise :class:`ValueError` naming the variable that
    sets them.
    """

    namespace: str = env_var(
        "scalebench",
        kind="text",
        valid=is_label,
        expected="a DNS-1123 label (e.g. scalebench)",
        meaning="namespace of the Jobs, Services, NetworkPolicies and pods",
    )
    conn_id: str = env_var(
        "kubernetes_default",
        kind="text",
        valid=str.strip,
        expected="an Airflow connection id",
        meaning="Airflow connection to the cluster",
    )
    image: str = env_var(
        "scalebench-worker:latest",
        kind="text",
        valid=lambda image: image and not any(c.isspace() for c in image),
        expected="an image reference without spaces",
        meaning="worker image (*form*: `worker_image`)",
    )
    image_pull_policy: str = env_var(
        "IfNotPresent",
        kind="choice",
        choices=PULL_POLICIES,
        meaning="`Always`, `IfNotPresent` or `Never`",
    )
    image_pull_credentials: tuple[str, ...] = env_var(
        (),
        kind="names",
        valid=is_subdomain,
        expected="comma-separated Secret names (DNS-1123 subdomains)",
        meaning="comma-separated names of the Secrets the pods pull the image with "
        "(their `imagePullSecrets`)",
    )
    service_account: str = env_var(
        "scalebench-worker",
        kind="text",
        valid=is_subdomain,
        expected="a service account name (DNS-1123 subdomain)",
        meaning="service account of the worker pods",
    )
    node_selector: Mapping[str, str] = env_var(
        {},
        kind="object",
        valid=_string_values,
        expected='a JSON object of strings, e.g. {"pool": "gpu"}',
        meaning='JSON object, e.g. `{"nvidia.com/gpu.present": "true"}`',
    )
    tolerations: tuple[Mapping[str, Any], ...] = env_var(
        (),
        kind="list",
        inspect=_check_tolerations,
        meaning='JSON list, e.g. `[{"key": "nvidia.com/gpu", "operator": "Exists", '
        '"effect": "NoSchedule"}]`',
    )
    runtime_class: str = env_var(
        "",
        kind="text",
        valid=is_subdomain,
        empty_ok=True,
        expected="a RuntimeClass name (DNS-1123 subdomain, e.g. nvidia), or empty",
        meaning="the pods' `runtimeClassName`, e.g. `nvidia`",
    )
    priority_class: str = env_var(
        "",
        kind="text",
        valid=is_labelled_name,
        empty_ok=True,
        expected="a PriorityClass name (DNS-1123 subdomain of at most 63 characters), or empty",
        meaning="the pods' `priorityClassName` (*form*: `priority_class`)",
    )
    queue_name: str = env_var(
        "",
        kind="text",
        valid=is_labelled_name,
        empty_ok=True,
        expected="a LocalQueue name (DNS-1123 subdomain of at most 63 characters), or empty",
        meaning="Kueue LocalQueue; Jobs are created suspended (*form*: `queue_name`)",
    )
    admission_timeout_s: float = env_var(
        3600.0,
        kind="seconds",
        meaning="seconds a queued Job may wait for admission (then `not_admitted`)",
    )
    preemption_retries: int = env_var(
        1,
        kind="whole",
        minimum=0,
        maximum=10,
        meaning="times a `preempted` group is run again (0 to 10)",
    )
    labels: Mapping[str, str] = env_var(
        {},
        kind="object",
        inspect=_check_labels,
        meaning="JSON object of extra labels (Jobs, pods, Services, policies)",
    )
    annotations: Mapping[str, str] = env_var(
        {},
        kind="object",
        inspect=_check_annotations,
        meaning="JSON object of extra annotations (Jobs, pods)",
    )
    env_passthrough: tuple[str, ...] = env_var(
        (),
        kind="names",
        valid=_ENV_NAME.match,
        expected="comma-separated variable names, or prefixes ending in * (NCCL_*)",
        meaning="comma-separated variables copied from the Airflow worker's environment into "
        "the pods; `NCCL_*` copies every `NCCL_` one",
    )
    results_claim: str = env_var(
        "scalebench-results",
        kind="text",
        valid=is_subdomain,
        expected="a PersistentVolumeClaim name",
        meaning="PVC of results, mounted at `/var/scalebench/results`",
    )
    data_claim: str = env_var(
        "",
        kind="text",
        valid=is_subdomain,
        empty_ok=True,
        expected="a PersistentVolumeClaim name, or empty for none",
        meaning="PVC of data sets, mounted read-only at `/var/scalebench/data` "
        "(`deploy/kubernetes/base` makes `scalebench-data`)",
    )
    rdma_resource: str = env_var(
        "",
        kind="text",
        valid=is_qualified_name,
        empty_ok=True,
        expected="an extended resource name such as rdma/ib or nvidia.com/hostdev, or empty",
        meaning="the RDMA device resource each worker pod asks for (with `IPC_LOCK`), e.g. "
        "`rdma/ib`; empty: none, and NCCL between nodes runs over TCP sockets",
    )
    rdma_devices: int = env_var(
        1,
        kind="whole",
        minimum=1,
        maximum=64,
        meaning="devices of `SCALEBENCH_K8S_RDMA_RESOURCE` each worker pod asks for (1 to 64)",
    )
    require_rdma: bool = env_var(
        False,
        kind="flag",
        meaning="`true`: a group of several nodes whose NCCL traffic between them ran over TCP "
        "sockets fails, naming why (its measurements would describe sockets, not the fabric)",
    )
    schedule_timeout_s: float = env_var(
        600.0,
        kind="seconds",
        meaning="seconds a pod may stay Pending (from admission, with a queue) before the "
        "group fails",
    )
    shm_size: str = env_var(
        "2Gi",
        kind="quantity",
        valid=_QUANTITY.match,
        expected="a Kubernetes quantity such as 2Gi or 512Mi",
        meaning="size of each pod's memory-backed `/dev/shm` (a quantity), per rank: a pod of "
        "several ranks gets that many times over",
    )
    cpu_request: str = env_var(
        "3",
        kind="quantity",
        valid=_CPU.match,
        expected="a Kubernetes quantity such as 3 or 500m",
        meaning="CPUs each rank's pod is given (the task text: 3 CPUs per pod); a pod of "
        "several ranks, that many times over",
    )
    cpu_limit: str = env_var(
        "3",
        kind="quantity",
        valid=_CPU.match,
        expected="a Kubernetes quantity such as 3 or 500m",
        meaning="CPUs a worker pod may use at most; equal to the request unless Burstable",
    )
    memory_request: str = env_var(
        "16Gi",
        kind="quantity",
        valid=_QUANTITY.match,
        expected="a Kubernetes quantity such as 16Gi or 512Mi",
        meaning="memory each rank's pod is given; a pod of several ranks, that many times over",
    )
    memory_limit: str = env_var(
        "16Gi",
        kind="quantity",
        valid=_QUANTITY.match,
        expected="a Kubernetes quantity such as 16Gi or 512Mi",
        meaning="memory beyond which the pod is killed (`/dev/shm` counts); equal to the "
        "request unless Burstable",
    )
    qos: str = env_var(
        "Guaranteed",
        kind="choice",
        choices=QOS_CLASSES,
        meaning="`Guaranteed` (limits = requests) or `Burstable` (limits may be higher; "
        "runs marked)",
    )
    deferrable: bool = env_var(
        True,
        kind="flag",
        meaning="`true`: a running group is watched from the triggerer (deferred); `false`: "
        "from the task's worker slot (blocking)",
    )
    poll_interval_s: float = env_var(
        5.0,
        kind="seconds",
        meaning="seconds between two looks at a running group, in either mode",
    )

    def __post_init__(self) -> None:
        for name, setting in SETTINGS.items():
            setting.check(getattr(self, name))
        # A limit is at least its request, and equal to it in the Guaranteed class.
        guaranteed = self.qos == "Guaranteed"
        for resource in ("cpu", "memory"):
            request = getattr(self, f"{resource}_request")
            limit = getattr(self, f"{resource}_limit")
            if guaranteed and quantity(limit) != quantity(request):
                expected = (
                    f"equal to the request ({request}) in the Guaranteed QoS class "
                    "(SCALEBENCH_K8S_QOS=Burstable lets it be higher)"
                )
            elif quantity(limit) < quantity(request):
                expected = f"at least the request ({request})"
            else:
                continue
            variable = SETTINGS[f"{resource}_limit"].variable
            raise ValueError(f"{variable}={limit!r}: must be {expected}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> KubernetesSettings:
        """Settings from ``SCALEBENCH_K8S_*`` / ``SCALEBENCH_WORKER_IMAGE``; unset or empty
        means the field's default."""
        given = {}
        for name, setting in SETTINGS.items():
            raw = env.get(setting.variable, "").strip()
            if raw:
                given[name] = setting.read(raw)
        return cls(**given)

    def with_request(self, queue_name: str = "", priority_class: str = "") -> KubernetesSettings:
        """These settings with a sweep's own queue and priority class (empty: keep these)."""
        return replace(
            self,
            queue_name=queue_name or self.queue_name,
            priority_class=priority_class or self.priority_class,
        )

    def passed_environment(self, env: Mapping[str, str] = os.environ) -> dict[str, str]:
        """The variables of ``env`` that :attr:`env_passthrough` names (``NCCL_*``: every
        variable starting ``NCCL_``), in name order."""
        chosen = {}
        for name in sorted(env):
            for wanted in self.env_passthrough:
                if name == wanted or (wanted.endswith("*") and name.startswith(wanted[:-1])):
                    chosen[name] = env[name]
        return chosen

    def resources(self, gpus: int = 0, ranks: int = 1) -> dict[str, dict[str, Any]]:
        """A worker container's CPU, memory and ``gpus`` (``nvidia.com/gpu``, none when 0)
        requests and limits for each of its ``ranks``, and the pod's RDMA devices where a
        resource is named, as the API takes them: equal in the Guaranteed class."""
        requests: dict[str, Any] = {
            "cpu": times(self.cpu_request, ranks),
            "memory": times(self.memory_request, ranks),
        }
        limits: dict[str, Any] = {
            "cpu": times(self.cpu_limit, ranks),
            "memory": times(self.memory_limit, ranks),
        }
        if gpus > 0:
            requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = gpus * ranks
        if self.rdma_resource:  # a pod's RDMA devices, shared by its ranks
            requests[self.rdma_resource] = limits[self.rdma_resource] = self.rdma_devices
        return {"requests": requests, "limits": limits}


PREFIX = "SCALEBENCH_K8S_"
# The settings whose variable is not PREFIX and the field's name in capitals: the image,
# which the compose stack and the docs name apart from the cluster's settings, and the
# poll interval, spelled short.
VARIABLE_EXCEPTIONS = {
    "image": "SCALEBENCH_WORKER_IMAGE",
    "poll_interval_s": "SCALEBENCH_K8S_POLL_S",
}


def variable_of(field_name: str) -> str:
    """The environment variable of the setting declared as field ``field_name``."""
    return VARIABLE_EXCEPTIONS.get(field_name, PREFIX + field_name.upper())


# Each field's setting, by field name, in declaration order, with its variable.
SETTINGS: dict[str, Setting] = {
    f.name: replace(f.metadata["setting"], variable=variable_of(f.name))
    for f in dataclasses.fields(KubernetesSettings)
}


def settings_table() -> str:
    """The settings as the Markdown table of ``docs/kubernetes.md`` (a test holds the page
    to it; print it with ``python -c "from operators.kubernetes.settings import
    settings_table as t; print(t())"``)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(KubernetesSettings):
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if isinstance(default, bool):
            default = str(default).lower()
        elif isinstance(default, float):
            default = f"{default:g}"
        shown = f"`{default}`" if default not in ("", (), {}) else "none"
        setting = SETTINGS[f.name]
        rows.append(f"| `{setting.variable}` | {shown} | {setting.meaning} |")
    return "\n".join(rows) + "\n"
