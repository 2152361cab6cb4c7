"""Where and how worker pods run: :class:`KubernetesSettings`, read by
:meth:`KubernetesSettings.from_env` on the Airflow worker and checked as it is
built (an invalid value raises :class:`ValueError` naming its variable). In the
pods the results claim is mounted at ``/var/scalebench/results`` and the data
claim at ``/var/scalebench/data``. Tolerations are spelled as in a pod spec
(``[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]``);
a pod still Pending after the schedule timeout (counted from
:meth:`~operators.kubernetes.group.KubernetesGroup.start`) fails the group.

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
| SCALEBENCH_K8S_SHM_SIZE           | 2Gi                      | /dev/shm per rank (quantity)     |
| SCALEBENCH_K8S_CPU_REQUEST        | 3                        | CPUs a rank's pod is given       |
| SCALEBENCH_K8S_CPU_LIMIT          | 3                        | CPUs per rank at most            |
| SCALEBENCH_K8S_MEMORY_REQUEST     | 16Gi                     | memory a rank's pod is given     |
| SCALEBENCH_K8S_MEMORY_LIMIT       | 16Gi                     | memory per rank before a kill    |
| SCALEBENCH_K8S_QOS                | Guaranteed               | Guaranteed (limits = requests) or|
|                                   |                          | Burstable (limits may be higher) |
| SCALEBENCH_K8S_DEFERRABLE         | true                     | watch groups from the triggerer  |
| SCALEBENCH_K8S_POLL_S             | 5                        | seconds between looks at a group |
| SCALEBENCH_K8S_QUEUE_NAME         | empty (no Kueue)         | Kueue LocalQueue of the Jobs     |
| SCALEBENCH_K8S_ADMISSION_TIMEOUT_S| 3600                     | seconds a queued Job may wait    |
| SCALEBENCH_K8S_PREEMPTION_RETRIES | 1                        | runs again of a preempted group  |
| SCALEBENCH_K8S_PRIORITY_CLASS     | empty (cluster default)  | priorityClassName of the pods    |
| SCALEBENCH_K8S_RUNTIME_CLASS      | empty (cluster default)  | runtimeClassName (e.g. nvidia)   |
| SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS | empty (none)          | names of the Secrets the pods    |
|                                   |                          | pull the image with (their       |
|                                   |                          | imagePullSecrets), comma-separated|
| SCALEBENCH_K8S_LABELS             | {} (none)                | JSON object: extra labels        |
| SCALEBENCH_K8S_ANNOTATIONS        | {} (none)                | JSON object: extra pod annotations|
| SCALEBENCH_K8S_ENV_PASSTHROUGH    | empty (none)             | comma-separated variables (or    |
|                                   |                          | prefixes ending in *) copied     |
|                                   |                          | into the pods (NCCL_*)           |

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

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_CPU = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")
_SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
QOS_CLASSES = ("Guaranteed", "Burstable")
# A qualified name (label and annotation keys): an optional DNS subdomain prefix and "/",
# then at most 63 alphanumerics, "-", "_" or "." with alphanumeric ends.
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


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
    cpu_request: str = "3"
    cpu_limit: str = "3"
    memory_request: str = "16Gi"
    memory_limit: str = "16Gi"
    qos: str = "Guaranteed"
    deferrable: bool = True
    poll_interval_s: float = 5.0
    queue_name: str = ""
    admission_timeout_s: float = 3600.0
    preemption_retries: int = 1
    priority_class: str = ""
    runtime_class: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()

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
                "SCALEBENCH_K8S_POLL_S",
                self.poll_interval_s,
                math.isfinite(self.poll_interval_s) and self.poll_interval_s > 0,
                "a positive number of seconds",
            ),
            (
                "SCALEBENCH_K8S_SHM_SIZE",
                self.shm_size,
                _QUANTITY.match(self.shm_size),
                "a Kubernetes quantity such as 2Gi or 512Mi",
            ),
        ]
        checks += [
            (
                "SCALEBENCH_K8S_QOS",
                self.qos,
                self.qos in QOS_CLASSES,
                "one of " + ", ".join(QOS_CLASSES),
            ),
            (
                "SCALEBENCH_K8S_QUEUE_NAME",
                self.queue_name,
                self.queue_name == ""
                or (_DNS_SUBDOMAIN.match(self.queue_name) and len(self.queue_name) <= 63),
                "a LocalQueue name (DNS-1123 subdomain of at most 63 characters), or empty",
            ),
            (
                "SCALEBENCH_K8S_ADMISSION_TIMEOUT_S",
                self.admission_timeout_s,
                math.isfinite(self.admission_timeout_s) and self.admission_timeout_s > 0,
                "a positive number of seconds",
            ),
            (
                "SCALEBENCH_K8S_PREEMPTION_RETRIES",
                self.preemption_retries,
                type(self.preemption_retries) is int and 0 <= self.preemption_retries <= 10,
                "a whole number from 0 to 10",
            ),
            (
                "SCALEBENCH_K8S_PRIORITY_CLASS",
                self.priority_class,
                self.priority_class == "" or _is_subdomain(self.priority_class),
                "a PriorityClass name (DNS-1123 subdomain), or empty",
            ),
            (
                "SCALEBENCH_K8S_RUNTIME_CLASS",
                self.runtime_class,
                self.runtime_class == "" or _is_subdomain(self.runtime_class),
                "a RuntimeClass name (DNS-1123 subdomain, e.g. nvidia), or empty",
            ),
            (
                "SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS",
                ",".join(self.image_pull_secrets),
                all(_is_subdomain(name) for name in self.image_pull_secrets),
                "comma-separated Secret names (DNS-1123 subdomains)",
            ),
            (
                "SCALEBENCH_K8S_ENV_PASSTHROUGH",
                ",".join(self.env_passthrough),
                all(_ENV_NAME.match(name) for name in self.env_passthrough),
                "comma-separated variable names, or prefixes ending in * (NCCL_*)",
            ),
        ]
        guaranteed = self.qos == "Guaranteed"
        for kind, pattern, example in (
            ("CPU", _CPU, "3 or 500m"),
            ("MEMORY", _QUANTITY, "16Gi or 512Mi"),
        ):
            request = getattr(self, f"{kind.lower()}_request")
            limit = getattr(self, f"{kind.lower()}_limit")
            both = pattern.match(request) and pattern.match(limit)
            checks += [
                (
                    f"SCALEBENCH_K8S_{kind}_REQUEST",
                    request,
                    pattern.match(request),
                    f"a Kubernetes quantity such as {example}",
                ),
                (
                    f"SCALEBENCH_K8S_{kind}_LIMIT",
                    limit,
                    pattern.match(limit)
                    and (not both or quantity(limit) >= quantity(request))
                    and (not both or not guaranteed or quantity(limit) == quantity(request)),
                    f"a Kubernetes quantity such as {example}, "
                    + (
                        f"equal to the request ({request}) in the Guaranteed QoS class "
                        "(SCALEBENCH_K8S_QOS=Burstable lets it be higher)"
                        if guaranteed
                        else f"at least the request ({request})"
                    ),
                ),
            ]
        for variable, value, ok, expected in checks:
            _check(ok, variable, value, expected)
        for toleration in self.tolerations:
            _check_toleration(toleration)
        _check_metadata("SCALEBENCH_K8S_LABELS", self.labels, values_are_labels=True)
        _check_metadata("SCALEBENCH_K8S_ANNOTATIONS", self.annotations, values_are_labels=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> KubernetesSettings:
        """Settings from ``SCALEBENCH_K8S_*`` / ``SCALEBENCH_WORKER_IMAGE``; unset means default."""
        defaults = cls()

        def text(name: str, default: str) -> str:
            return env.get(name, "").strip() or default

        timeout = _seconds(env, "SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", defaults.schedule_timeout_s)
        poll = _seconds(env, "SCALEBENCH_K8S_POLL_S", defaults.poll_interval_s)
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
            cpu_request=text("SCALEBENCH_K8S_CPU_REQUEST", defaults.cpu_request),
            cpu_limit=text("SCALEBENCH_K8S_CPU_LIMIT", defaults.cpu_limit),
            memory_request=text("SCALEBENCH_K8S_MEMORY_REQUEST", defaults.memory_request),
            memory_limit=text("SCALEBENCH_K8S_MEMORY_LIMIT", defaults.memory_limit),
            qos=text("SCALEBENCH_K8S_QOS", defaults.qos),
            deferrable=_flag(env, "SCALEBENCH_K8S_DEFERRABLE", defaults.deferrable),
            poll_interval_s=poll,
            queue_name=env.get("SCALEBENCH_K8S_QUEUE_NAME", "").strip(),
            admission_timeout_s=_seconds(
                env, "SCALEBENCH_K8S_ADMISSION_TIMEOUT_S", defaults.admission_timeout_s
            ),
            preemption_retries=_whole(
                env, "SCALEBENCH_K8S_PREEMPTION_RETRIES", defaults.preemption_retries
            ),
            priority_class=env.get("SCALEBENCH_K8S_PRIORITY_CLASS", "").strip(),
            runtime_class=env.get("SCALEBENCH_K8S_RUNTIME_CLASS", "").strip(),
            image_pull_secrets=_names(env, "SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS"),
            labels=_json_var(env, "SCALEBENCH_K8S_LABELS", {}, dict, "a JSON object"),
            annotations=_json_var(env, "SCALEBENCH_K8S_ANNOTATIONS", {}, dict, "a JSON object"),
            env_passthrough=_names(env, "SCALEBENCH_K8S_ENV_PASSTHROUGH"),
        )

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
        requests and limits for each of its ``ranks``, as the API takes them: equal in the
        Guaranteed class."""
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
        return {"requests": requests, "limits": limits}


def times(text: str, factor: int) -> str:
    """A Kubernetes quantity ``factor`` times over, in its own unit (``500m`` × 4 → ``2000m``,
    ``8Gi`` × 2 → ``16Gi``); ``text`` as it is for 1."""
    if factor == 1:
        return text
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, unit = float(match.group(1)) * factor, match.group(2)
    return f"{int(number)}{unit}" if number == int(number) else f"{number:g}{unit}"


def quantity(text: str) -> float:
    """The number a Kubernetes quantity stands for (``500m`` → 0.5, ``2Gi`` → 2**31)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", text)
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A number of seconds; unset or empty means ``default`` (checked as the settings are built)."""
    raw = env.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be a positive number of seconds") from None


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number; unset or empty means ``default`` (bounds checked when built)."""
    raw = env.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be a whole number") from None


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list (spaces around the names ignored); unset or empty means none."""
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """A true/false variable (also 1/0, yes/no, on/off); unset or empty means ``default``."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{name}={env[name]!r}: must be true or false")


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
    except RecursionError:  # the json module's parser recurses once per nested list or object
        raise ValueError(f"{name}: must be {what} (its JSON is nested too deep to read)") from None
    if not isinstance(value, kind):
        raise ValueError(f"{name}={raw!r}: must be {what}")
    return value


def _check_metadata(variable: str, items: object, *, values_are_labels: bool) -> None:
    """Labels or annotations: qualified-name keys, and label values where ``values_are_labels``."""
    if not isinstance(items, Mapping):
        raise ValueError(f"{variable}={items!r}: must be a JSON object of strings")
    for key, value in items.items():
        if not isinstance(key, str) or not _is_qualified_name(key):
            raise ValueError(
                f"{variable}: the key {key!r} must be a qualified name "
                "([prefix/]name, the name at most 63 letters, digits, '-', '_' or '.')"
            )
        if not isinstance(value, str):
            raise ValueError(f"{variable}: the value of {key!r} must be a string")
        if values_are_labels and (len(value) > 63 or not _LABEL_VALUE.match(value)):
            raise ValueError(
                f"{variable}: the value {value!r} of {key!r} must be a label value "
                "(at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends)"
            )


def _is_qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and _is_subdomain(prefix)):
        return False
    return bool(_NAME_PART.match(name)) and len(name) <= 63


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
