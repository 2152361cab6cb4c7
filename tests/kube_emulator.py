"""A Kubernetes API server for the launcher's tests: kmock's emulator speaking HTTP
on 127.0.0.1 (in a thread of its own), a kube config that points at it, and a
driver that plays the cluster's controllers for one scenario.

The launcher talks to it through the provider's real hooks and the official
clients, so paths, verbs, query strings, bodies and error answers are the ones
a real API server sees. The driver turns each created Indexed Job into one pod
per completion index, named and labelled as the Job controller names them,
moves the pods through the scenario's stages (``after_s`` seconds after the Job
was created, or admitted), keeps the Job's status counts and conditions in step
(applying its ``podFailurePolicy``), gives each pod the QoS class its resources
make and a node, reports the image its container ran once started (an ``imageID``
whose digest :func:`resolved_image` gives), serves each pod's log and removes the pods
when their Job is deleted. It also plays Kueue: a Job created suspended is admitted (unsuspended)
``admit_after_s`` seconds later, or never (a ClusterQueue whose quota is taken),
and :meth:`EmulatedCluster.evict` evicts a pod as the Eviction API does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
from kmock import KubernetesEmulator, Server

JOBS = kmock.resource(group="batch", version="v1", plural="jobs")
PODS = kmock.resource(group="", version="v1", plural="pods")
SERVICES = kmock.resource(group="", version="v1", plural="services")
NETWORK_POLICIES = kmock.resource(group="networking.k8s.io", version="v1", plural="networkpolicies")
NODES = kmock.resource(group="", version="v1", plural="nodes")
NAMESPACES = kmock.resource(group="", version="v1", plural="namespaces")
CLAIMS = kmock.resource(group="", version="v1", plural="persistentvolumeclaims")
STORAGE_CLASSES = kmock.resource(group="storage.k8s.io", version="v1", plural="storageclasses")
CRDS = kmock.resource(
    group="apiextensions.k8s.io", version="v1", plural="customresourcedefinitions"
)
ACCESS_REVIEWS = kmock.resource(
    group="authorization.k8s.io", version="v1", plural="selfsubjectaccessreviews"
)
LOCAL_QUEUES = kmock.resource(group="kueue.x-k8s.io", version="v1beta1", plural="localqueues")
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


# -- what a rank's pod shows ------------------------------------------------------------------


@dataclass(frozen=True)
class PodState:
    """A pod's phase, its container's state (as the API spells it) and scheduling condition."""

    phase: str
    container: dict[str, Any] | None = None
    scheduled: bool = True
    message: str = ""
    disruption: str = ""  # the DisruptionTarget condition's reason, when disrupted
    gated: bool = False  # held by a scheduling gate (Kueue's, until it admits the pod)

    def status(self, image: str = "scalebench-worker") -> dict[str, Any]:
        """The pod's status, its container running ``image`` (an ``imageID`` once the
        container started or ended, as the kubelet reports it after the pull)."""
        condition: dict[str, Any] = {"type": "PodScheduled", "status": "True"}
        if self.gated:
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
            }
        elif not self.scheduled:
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": self.message,
            }
        status: dict[str, Any] = {"phase": self.phase, "conditions": [condition]}
        if self.disruption:
            status["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": self.disruption,
                    "message": self.message,
                }
            )
        if self.container is not None:
            status["containerStatuses"] = [
                {
                    "name": "worker",
                    "image": image,
                    "imageID": ""
                    if "waiting" in self.container
                    else f"docker-pullable://{resolved_image(image)}",
                    "ready": self.phase == "Running",
                    "restartCount": 0,
                    "state": self.container,
                }
            ]
        return status


def resolved_image(image: str) -> str:
    """What the emulated kubelet resolves ``image`` to: its repository (the tag dropped) at
    a digest made from the whole reference, so that each tag has one of its own."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    repository = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _worker_image(spec: dict[str, Any]) -> str:
    """The image of the pod spec's worker container."""
    return next(
        (c.get("image", "") for c in spec.get("containers", []) if c.get("name") == "worker"),
        "scalebench-worker",
    )


def unschedulable(message: str = UNSCHEDULABLE) -> PodState:
    return PodState("Pending", scheduled=False, message=message)


def waiting(reason: str, message: str = "") -> PodState:
    return PodState("Pending", {"waiting": {"reason": reason, "message": message}})


def running() -> PodState:
    return PodState("Running", {"running": {"startedAt": "2026-11-24T02:00:10Z"}})


def exited(
    code: int, reason: str = "Error", finished: str = "2026-11-24T02:01:00Z", message: str = ""
) -> PodState:
    """A pod whose container ended with ``code`` (``message``: its termination message)."""
    terminated = {
        "exitCode": code,
        "reason": reason if code else "Completed",
        "startedAt": "2026-11-24T02:00:10Z",
        "finishedAt": finished,
    }
    if message:
        terminated["message"] = message
    return PodState("Succeeded" if code == 0 else "Failed", {"terminated": terminated})


def evicted(
    reason: str = "EvictionByEvictionAPI", message: str = "Eviction API: evicting"
) -> PodState:
    """A pod the Eviction API (or a preemption, a drain) took: marked, then stopped (SIGTERM)."""
    state = exited(143, "Error")
    return PodState(state.phase, state.container, message=message, disruption=reason)


@dataclass(frozen=True)
class Stage:
    """From ``after_s`` seconds after the Job was created: each rank's pod state
    (``ranks`` by rank, ``others`` for the rest) and what each rank has logged."""

    after_s: float
    others: PodState
    ranks: dict[int, PodState] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)

    def state(self, rank: int) -> PodState:
        return self.ranks.get(rank, self.others)


# -- what the cluster holds before a sweep --------------------------------------------------


def gpu_node(
    name: str,
    gpus: int,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    extra: dict[str, str] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A node as the API shows it: ``gpus`` allocatable ``nvidia.com/gpu`` (none when 0,
    then without the GPU labels), other allocatable resources in ``extra``."""
    node_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    allocatable = {"cpu": "96", "memory": "1056Gi", "pods": "110", **(extra or {})}
    if gpus:
        node_labels.update(
            {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": GPU_PRODUCT}
        )
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def claim(
    name: str, *, bound: bool = True, modes: tuple[str, ...] = ("ReadWriteMany",)
) -> dict[str, Any]:
    """A PersistentVolumeClaim in namespace scalebench, Bound (or Pending) with ``modes``."""
    status: dict[str, Any] = {"phase": "Bound" if bound else "Pending"}
    if bound:
        status.update(accessModes=list(modes), capacity={"storage": "100Gi"})
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "scalebench"},
        "spec": {"accessModes": list(modes), "storageClassName": "nfs-client"},
        "status": status,
    }


@dataclass
class Inventory:
    """What the emulated cluster holds before any group: its nodes (8 nodes of one H100 by
    default, so that ``ranks_per_node: auto`` is 1 and a group spreads as before), its
    claims, storage classes, namespace labels, whether Kueue is installed and which
    LocalQueues exist, the DNS pods' labels, and the access reviews it denies
    (``"verb resource"``, e.g. ``"create jobs"``)."""

    nodes: list[dict[str, Any]] = field(
        default_factory=lambda: [gpu_node(f"gpu-node-{i}", 1) for i in range(8)]
    )
    claims: list[dict[str, Any]] = field(
        default_factory=lambda: [claim("scalebench-results"), claim("scalebench-data")]
    )
    storage_classes: tuple[str, ...] = ("nfs-client",)
    namespace_labels: dict[str, str] = field(
        default_factory=lambda: {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    kueue: bool = False
    local_queues: tuple[str, ...] = ()
    dns_labels: dict[str, str] | None = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    denied: frozenset[str] = frozenset()


# -- the server and the driver ----------------------------------------------------------------


class EmulatedCluster:
    """The API server on 127.0.0.1 and the driver playing ``stages`` for every Job.

    ``requests()`` lists what the launcher sent as ``(method, path, query, body)``.
    ``retry_stages`` play for every Job after the first (a group run again); a
    suspended Job is admitted ``admit_after_s`` seconds after it was created
    (``None``: never), and its stages count from then.
    """

    def __init__(
        self,
        stages: list[Stage],
        tick_s: float = 0.02,
        *,
        retry_stages: list[Stage] | None = None,
        admit_after_s: float | None = 0.0,
        inventory: Inventory | None = None,
    ) -> None:
        self.inventory = inventory or Inventory()
        self.reviews: list[dict[str, Any]] = []  # the access reviews asked, as sent
        self.stages = sorted(stages, key=lambda s: s.after_s)
        self.retry_stages = sorted(retry_stages or stages, key=lambda s: s.after_s)
        self.admit_after_s = admit_after_s
        self.tick_s = tick_s
        self._seen: dict[str, float] = {}  # job name -> when the driver first saw it
        self._order: list[str] = []  # job names in the order they were created
        self._evicted: dict[str, PodState] = {}  # pod name -> its disrupted state
        self.admitted: dict[str, float] = {}  # job name -> seconds it waited for admission
        self.failed_by_policy: dict[str, str] = {}  # job name -> the rule's message
        self._taken_back: set[str] = set()  # jobs Kueue suspended again
        self.url = ""
        self.handler: KubernetesEmulator | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._created: dict[str, float] = {}  # job name -> when the driver saw it (monotonic)
        self._stamps: dict[str, list[float]] = {}  # pod -> when each log line appeared (wall)
        self._thread = threading.Thread(target=self._serve, name="kube-api", daemon=True)

    # -- life cycle

    def __enter__(self) -> EmulatedCluster:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the emulated API server did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)  # type: ignore[union-attr]
        self._thread.join(10)

    def _serve(self) -> None:
        # One access line per request is noise in a test's output (and, written from this
        # thread to a stream a test captured and closed, a logging error).
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with KubernetesEmulator() as handler, Server(handler) as server:
            self.handler, self.url = handler, str(server.url).rstrip("/")
            for resource in (
                JOBS,
                PODS,
                SERVICES,
                NETWORK_POLICIES,
                NODES,
                NAMESPACES,
                CLAIMS,
                STORAGE_CLASSES,
                CRDS,
                LOCAL_QUEUES,
            ):
                handler.resources[resource] = {}
            self._stock(handler)
            reviews = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
            handler["post", re.compile(reviews)] << self._review
            handler["get", re.compile(r"/api/v1/namespaces/scalebench$")] << self._namespace
            handler["get", re.compile(r"/api/v1/namespaces/[^/]+/pods/[^/]+/log")] << self._log
            handler["post", re.compile(r"/apis/batch/v1/namespaces/[^/]+/jobs")] << self._job_uid
            pods = re.compile(r"/api/v1/namespaces/[^/]+/pods")
            handler["post", pods] << self._new_pod
            events = re.compile(r"/api/v1/namespaces/[^/]+/events")
            handler["get", events] << self._events
            driver = asyncio.create_task(self._drive())
            self._ready.set()
            await self._stop.wait()
            driver.cancel()

    def _stock(self, handler: KubernetesEmulator) -> None:
        """Put the inventory's objects in the store."""
        stock = self.inventory
        for node in stock.nodes:
            handler.objects[(NODES, None, node["metadata"]["name"])] = node
        for pvc in stock.claims:
            handler.objects[(CLAIMS, "scalebench", pvc["metadata"]["name"])] = pvc
        for name in stock.storage_classes:
            handler.objects[(STORAGE_CLASSES, None, name)] = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "nfs.csi.k8s.io",
            }
        handler.objects[(NAMESPACES, None, "scalebench")] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "scalebench", "labels": dict(stock.namespace_labels)},
        }
        if stock.kueue:
            handler.objects[(CRDS, None, "localqueues.kueue.x-k8s.io")] = {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "localqueues.kueue.x-k8s.io"},
            }
        for queue in stock.local_queues:
            handler.objects[(LOCAL_QUEUES, "scalebench", queue)] = {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": queue, "namespace": "scalebench"},
            }
        if stock.dns_labels is not None:
            handler.objects[(PODS, "kube-system", "coredns-5d78c9869d-abcde")] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "coredns-5d78c9869d-abcde",
                    "namespace": "kube-system",
                    "labels": dict(stock.dns_labels),
                },
                "spec": {"containers": [{"name": "coredns", "image": "coredns:1.11"}]},
                "status": {"phase": "Running"},
            }

    def _review(self, request: Any) -> dict[str, Any]:
        """A SelfSubjectAccessReview answered: allowed unless the inventory denies it."""
        review = dict(request.data)
        self.reviews.append(review)
        asked = review["spec"]["resourceAttributes"]
        resource = asked["resource"] + (
            f"/{asked['subresource']}" if asked.get("subresource") else ""
        )
        denied = f"{asked['verb']} {resource}" in self.inventory.denied
        review["status"] = {"allowed": not denied}
        if denied:
            review["status"]["reason"] = "no RBAC policy matched"
        # A review is answered, never stored (the store would take the next, nameless too,
        # for a second object of the same name).
        assert self.handler is not None
        for key, obj in self.handler.objects.items():
            if key[0] == ACCESS_REVIEWS and not obj.deleted:
                obj.delete()
        return review

    def _events(self, request: Any) -> Any:
        """A pod's events, of which there are none here: the pod operator lists a failed
        pod's; its trigger watches a starting pod's, a stream the server holds open for
        ``timeoutSeconds`` (the client sends ``watch=True``, which the API server takes as
        ``strconv.ParseBool`` does, and kmock's own watch does not)."""
        if request.params.get("watch", "").lower() not in ("true", "1"):
            return {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": []}

        async def quiet(timeout_s: float) -> Any:
            yield b""  # the headers go now; no event follows
            await asyncio.sleep(timeout_s)

        return quiet(float(request.params.get("timeoutSeconds", 30)))

    def _namespace(self, request: Any) -> dict[str, Any]:
        """The namespace scalebench, as stocked (the store reads its path as a namespace's)."""
        assert self.handler is not None
        return self.handler.objects[(NAMESPACES, None, "scalebench")].raw

    def call(self, function: Callable[[KubernetesEmulator], Any]) -> Any:
        """Run ``function(handler)`` in the server's thread (reactions, inspection)."""

        async def run() -> Any:
            return function(self.handler)  # type: ignore[arg-type]

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # -- kube config and Airflow connections

    def kube_config(self, path: Path, namespace: str = "scalebench") -> Path:
        """Write a kube config for this server to ``path``."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "emulated",
                    "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": "t0ken"}}],
                    "contexts": [
                        {
                            "name": "emulated",
                            "context": {
                                "cluster": "emulated",
                                "user": "tester",
                                "namespace": namespace,
                            },
                        }
                    ],
                }
            )
        )
        return path

    def connection_uri(self, config: Path) -> str:
        """An ``AIRFLOW_CONN_*`` value: a Kubernetes connection reading ``config``."""
        return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(config)}})

    # -- what was sent, what is left

    def requests(self) -> list[tuple[str, str, dict[str, str], Any]]:
        def read(handler: KubernetesEmulator) -> list[tuple[str, str, dict[str, str], Any]]:
            return [(r.method.name, r.url.path, dict(r.params), r.data) for r in handler]

        return self.call(read)

    def evict(self, pod: str, reason: str = "EvictionByEvictionAPI") -> None:
        """Evict the pod named ``pod`` (as the Eviction API, a preemption or a drain does):
        it gets the DisruptionTarget condition and stops, whatever its stage says."""
        self._evicted[pod] = evicted(reason)

    def take_back(self, job: str) -> None:
        """Kueue preempting an admitted Job: suspend it again (its pods go) for good."""
        self._taken_back.add(job)

    def objects(self, resource: Any) -> list[str]:
        """Names of the live objects of ``resource`` (JOBS, PODS, SERVICES, NETWORK_POLICIES),
        the cluster's own (kube-system's) left out."""

        def names(handler: KubernetesEmulator) -> list[str]:
            return sorted(
                name
                for (res, ns, name), obj in handler.objects.items()
                if res == resource and not obj.deleted and ns != "kube-system"
            )

        return self.call(names)

    # -- reactions

    def _job_uid(self, request: Any) -> dict[str, Any]:
        """The created Job as the API answers: with the uid the server gave it."""
        body = dict(request.data)
        body["metadata"] = {**body["metadata"], "uid": f"uid-{body['metadata']['name']}"}
        return body

    def _new_pod(self, request: Any) -> dict[str, Any]:
        """A pod created by itself, as the API answers: Pending until the driver plays it."""
        assert self.handler is not None
        metadata = request.data["metadata"]
        stored = self.handler.objects[(PODS, request.namespace, metadata["name"])]
        if not stored.raw.get("status"):
            stored.patch({"status": {"phase": "Pending", "conditions": []}})
        return stored.raw

    def _log(self, request: Any) -> bytes:
        """A pod's log as the kubelet serves it: each line stamped with the wall-clock time
        it first appeared (``timestamps``), only the lines of the last ``sinceSeconds``,
        or the last ``tailLines``."""
        pod = request.url.path.split("/")[-2]
        job, rank = _group_and_rank(pod)
        lines = self._stage(job).logs.get(rank, "").splitlines(keepends=True)
        stamps = self._stamps.setdefault(pod, [])
        now = time.time()
        stamps += [now + i * 1e-6 for i in range(len(lines) - len(stamps))]
        entries = list(zip(stamps, lines, strict=False))
        since = request.params.get("sinceSeconds")
        if since:
            entries = [(t, line) for t, line in entries if t >= now - int(since)]
        tail = request.params.get("tailLines")
        if tail:
            entries = entries[-int(tail) :]
        # As the API server reads a boolean (Go's ParseBool): the sync client sends "True".
        if request.params.get("timestamps") in ("1", "t", "T", "true", "TRUE", "True"):
            return "".join(f"{_rfc3339_nano(t)} {line}" for t, line in entries).encode()
        return "".join(line for _, line in entries).encode()

    # -- the driver

    def _stage(self, job: str) -> Stage:
        elapsed = time.monotonic() - self._created.get(job, time.monotonic())
        stages = self.stages if not self._order or self._order[0] == job else self.retry_stages
        current = stages[0]
        for stage in stages:
            if stage.after_s <= elapsed:
                current = stage
        return current

    def _admit(self, job: Any, name: str) -> bool:
        """Kueue: whether the Job may run (admitting a suspended one when its time came)."""
        if name in self._taken_back:
            if not job.raw["spec"].get("suspend"):
                job.patch({"spec": {"suspend": True}})
            return False
        if not job.raw["spec"].get("suspend"):
            return True
        waited = time.monotonic() - self._seen[name]
        if self.admit_after_s is None or waited < self.admit_after_s:
            return False
        job.patch({"spec": {"suspend": False}})
        self.admitted[name] = waited
        return True

    async def _drive(self) -> None:
        assert self.handler is not None
        while True:
            self._tick(self.handler)
            await asyncio.sleep(self.tick_s)

    def _tick(self, handler: KubernetesEmulator) -> None:
        jobs = {
            (ns, name): obj
            for (res, ns, name), obj in handler.objects.items()
            if res == JOBS and not obj.deleted
        }
        for (ns, name), job in jobs.items():
            if name not in self._seen:
                self._seen[name] = time.monotonic()
                self._order.append(name)
            if not self._admit(job, name):
                suspended = {
                    "active": 0,
                    "conditions": [
                        {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
                    ],
                }
                if job.raw.get("status") != suspended:
                    _replace(job, "status", suspended)
                for (res, pod_ns, _), obj in list(handler.objects.items()):  # its pods go
                    if res != PODS or pod_ns != ns or obj.deleted:
                        continue
                    if obj.raw["metadata"]["labels"].get(JOB_NAME_LABEL) == name:
                        obj.delete()
                continue
            self._created.setdefault(name, time.monotonic())
            stage, world_size = self._stage(name), job.raw["spec"]["completions"]
            states = [stage.state(rank) for rank in range(world_size)]
            states = [self._evicted.get(_pod_name(name, r), s) for r, s in enumerate(states)]
            for rank, state in enumerate(states):
                self._put_pod(handler, ns, job.raw, rank, state)
            counts = {
                "succeeded": sum(s.phase == "Succeeded" for s in states),
                "failed": sum(s.phase == "Failed" for s in states),
            }
            counts["active"] = world_size - counts["succeeded"] - counts["failed"]
            status: dict[str, Any] = dict(counts)
            rule = _failing_rule(job.raw, name, states)
            if rule:
                self.failed_by_policy.setdefault(name, rule)
                status["conditions"] = [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "PodFailurePolicy",
                        "message": rule,
                    }
                ]
            elif counts["succeeded"] == world_size:
                status["conditions"] = [{"type": "Complete", "status": "True"}]
            elif counts["failed"]:
                status["conditions"] = [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
                ]
            if job.raw.get("status") != status:
                _replace(job, "status", status)
        for (res, ns, name), obj in list(handler.objects.items()):
            if res != PODS or obj.deleted or ns == "kube-system":  # the cluster's own pods
                continue
            owner = obj.raw["metadata"].get("labels", {}).get(JOB_NAME_LABEL)
            if owner is None:  # a pod of its own (no Job): it plays the stages as rank 0
                self._play_lone_pod(name, obj)
            elif (ns, owner) not in jobs:  # pods of deleted Jobs go
                obj.delete()

    def _play_lone_pod(self, name: str, pod: Any) -> None:
        """Move a pod created by itself (the pod operator's) through the stages as rank 0,
        counted from when the driver first saw it (the kubelet's work, and Kueue's gate
        while ``admit_after_s`` has not passed)."""
        if name not in self._seen:
            self._seen[name] = time.monotonic()
            self._order.append(name)
        self._created.setdefault(name, time.monotonic())
        spec = pod.raw["spec"]
        state = self._evicted.get(name) or self._stage(name).state(0)
        queued = QUEUE_LABEL in pod.raw["metadata"].get("labels", {})
        waited = time.monotonic() - self._seen[name]
        if queued and (self.admit_after_s is None or waited < self.admit_after_s):
            state = PodState("Pending", scheduled=False, message="", gated=True)
        elif queued:
            self.admitted.setdefault(name, waited)
        image = _worker_image(spec)
        status = {**state.status(image), "qosClass": _qos_class(spec)}
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and waited >= deadline and state.phase in ("Pending", "Running"):
            status = {**exited(137, "Error").status(image), "reason": "DeadlineExceeded"}
            status["qosClass"] = _qos_class(spec)
        if state.scheduled and not spec.get("nodeName"):
            pod.patch({"spec": {"nodeName": "gpu-node-0"}})
        if pod.raw.get("status") != status:
            _replace(pod, "status", status)

    def _put_pod(
        self, handler: KubernetesEmulator, ns: str, job: dict, rank: int, state: PodState
    ) -> None:
        name = _pod_name(job["metadata"]["name"], rank)
        template = job["spec"]["template"]
        labels = {
            **template["metadata"].get("labels", {}),
            JOB_NAME_LABEL: job["metadata"]["name"],
            INDEX_KEY: str(rank),
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "annotations": {
                    **template["metadata"].get("annotations", {}),
                    INDEX_KEY: str(rank),
                },
            },
            "spec": {**template["spec"], "nodeName": f"gpu-node-{rank}"}
            if state.scheduled
            else template["spec"],
            "status": {
                **state.status(_worker_image(template["spec"])),
                "qosClass": _qos_class(template["spec"]),
            },
        }
        key = (PODS, ns, name)
        if key not in handler.objects or handler.objects[key].deleted:
            handler.objects[key] = pod
        elif handler.objects[key].raw["status"] != pod["status"]:
            _replace(handler.objects[key], "status", pod["status"])


def _group_and_rank(pod: str) -> tuple[str, int]:
    """The Job (or lone pod) and rank a pod's name tells: ``<job>-<rank>-x7k2p`` for a Job's
    pod, the pod's own name (rank 0) for a pod of its own."""
    parts = pod.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2] == "x7k2p":
        return parts[0], int(parts[1])
    return pod, 0


def _pod_name(job: str, rank: int) -> str:
    """The name the Job controller gives rank ``rank``'s pod (a fixed suffix here)."""
    return f"{job}-{rank}-x7k2p"


def _qos_class(pod_spec: dict[str, Any]) -> str:
    """The QoS class the kubelet gives a pod: Guaranteed when every container's limits equal
    its requests for CPU and memory (both set), BestEffort with none, Burstable else."""
    containers = pod_spec.get("containers", [])
    resources = [c.get("resources", {}) for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        requests, limits = r.get("requests", {}), r.get("limits", {})
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                return "Burstable"
    return "Guaranteed"


def _failing_rule(job: dict[str, Any], name: str, states: list[PodState]) -> str:
    """The Job controller's ``podFailurePolicy``: the message of the first FailJob rule a
    failed pod matches (rules in order, the first match decides), or ``""``."""
    rules = job["spec"].get("podFailurePolicy", {}).get("rules", [])
    for rank, state in enumerate(states):
        if state.phase != "Failed":
            continue
        code = state.container["terminated"]["exitCode"] if state.container else None
        for index, rule in enumerate(rules):
            on_conditions = rule.get("onPodConditions", [])
            on_codes = rule.get("onExitCodes")
            matched = any(
                c["type"] == "DisruptionTarget" and state.disruption for c in on_conditions
            ) or (
                on_codes is not None
                and (code in on_codes["values"]) == (on_codes["operator"] == "In")
            )
            if matched:
                if rule["action"] != "FailJob":
                    break
                return (
                    f"Pod {_pod_name(name, rank)} failed with exit code {code} "
                    f"matching FailJob rule at index {index}"
                )
    return ""


def _replace(obj: Any, key: str, value: Any) -> None:
    """Set ``obj[key]`` to ``value`` whole (the emulator's patch merges dicts)."""
    obj.patch({key: None})
    obj.patch({key: value})


@contextmanager
def emulated_cluster(
    stages: list[Stage],
    tmp_path: Path,
    monkeypatch: Any,
    conn_id: str = "emulated_k8s",
    **options: Any,
) -> Iterator[EmulatedCluster]:
    """The cluster, with an Airflow connection ``conn_id`` (environment) pointing at it;
    ``options`` go to :class:`EmulatedCluster` (Kueue's admission, retry stages)."""
    with EmulatedCluster(stages, **options) as cluster:
        config = cluster.kube_config(tmp_path / "kube-config")
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", cluster.connection_uri(config))
        yield cluster


def _rfc3339_nano(t: float) -> str:
    """A wall-clock time (seconds) as the kubelet stamps log lines: RFC 3339, nanoseconds."""
    whole = int(t)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{stamp}.{min(int((t - whole) * 1e9), 999_999_999):09d}Z"
