"""The Job, the Service and the NetworkPolicy of one training group on the cluster:
:class:`GroupObjects` renders their manifests, connects to the cluster, creates them
(Service, NetworkPolicy, then Job; the Job owns the Service), and deletes them.
:class:`~operators.kubernetes.group.KubernetesGroup` builds on it to follow and
conclude the group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.kubernetes.manifests import (
    job_manifest,
    network_policy_manifest,
    service_manifest,
)
from operators.kubernetes.names import GroupNames
from operators.kubernetes.pod_status import get_field
from operators.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from scalebench.network import NetworkProfile


class GroupObjects:
    """The cluster objects of one group, named by ``names`` in ``settings.namespace``,
    as :class:`~operators.kubernetes.group.KubernetesGroup` sets them up: the attributes
    below, and the APIs ``connect`` reaches (or those passed in)."""

    names: GroupNames
    settings: KubernetesSettings
    pod_args: list[str]
    world_size: int
    ranks_per_node: int
    gpus_per_worker: int
    image: str | None
    stack_env: dict[str, str]
    timeout_s: float | None
    run_id: str
    placement: str
    network: NetworkProfile
    attempt: int
    sink: Callable[[str], None]
    _batch: Any
    _core: Any
    _networking: Any
    _clock: Callable[[], float]
    _lock: threading.Lock
    _stopping: threading.Event
    _created: list[str]
    _started: float | None

    # -- manifests

    def job_manifest(self) -> dict:
        return job_manifest(
            self.names,
            self.pod_args,
            self.world_size,
            self.settings,
            ranks_per_node=self.ranks_per_node,
            gpus_per_worker=self.gpus_per_worker,
            image=self.image,
            stack_env=self.stack_env,
            timeout_s=self.timeout_s,
            run_id=self.run_id,
            placement=self.placement,
            network=self.network,
        )

    def service_manifest(self) -> dict:
        return service_manifest(self.names, self.settings, run_id=self.run_id)

    def network_policy_manifest(self) -> dict:
        return network_policy_manifest(self.names, self.settings, run_id=self.run_id)

    # -- life cycle

    def connect(self) -> None:
        """Reach the cluster through the Airflow connection ``settings.conn_id``, for the
        APIs not passed in."""
        if self._batch is not None and self._core is not None and self._networking is not None:
            return
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
        from kubernetes.client import NetworkingV1Api

        hook = KubernetesHook(conn_id=self.settings.conn_id)
        self._batch = self._batch if self._batch is not None else hook.batch_v1_client
        self._core = self._core if self._core is not None else hook.core_v1_client
        if self._networking is None:
            self._networking = NetworkingV1Api(api_client=hook.api_client)

    def start(self) -> None:
        """Create the Service, the NetworkPolicy, then the Job (the pods find rank 0's name,
        and may reach each other, from the start)."""
        namespace = self.settings.namespace
        with self._lock:
            if self._stopping.is_set():
                raise RuntimeError(f"group {self.names.job} was stopped before it started")
            self.connect()
            self._started = self._clock()
            try:
                self._core.create_namespaced_service(namespace, self.service_manifest())
                self._created.append("service")
                self._networking.create_namespaced_network_policy(
                    namespace, self.network_policy_manifest()
                )
                self._created.append("policy")
                job = self._batch.create_namespaced_job(namespace, self.job_manifest())
                self._created.append("job")
            except BaseException as exc:
                self._delete()
                if getattr(exc, "status", None) == 409:
                    raise RuntimeError(
                        f"a Job, Service or NetworkPolicy named {self.names.job} already "
                        f"exists in namespace "
                        f"{namespace}; group names are unique per Airflow try, so it is a "
                        "leftover of this very try"
                    ) from exc
                raise
            self._own_service(job)
        queued = f", queued in {self.settings.queue_name}" if self.settings.queue_name else ""
        self.sink(
            f"[kubernetes] started Job {namespace}/{self.names.job}: "
            f"{self._pods_text()}, rendezvous {self.names.job}-0.{self.names.service}"
            f"{queued}" + (f" (attempt {self.attempt})" if self.attempt > 1 else "")
        )

    def _pods_text(self) -> str:
        """``2 pod(s)``, or with several ranks per pod ``2 pod(s) of 4 ranks``."""
        pods = self.world_size // self.ranks_per_node
        per_pod = f" of {self.ranks_per_node} ranks" if self.ranks_per_node > 1 else ""
        return f"{pods} pod(s){per_pod}"

    def _own_service(self, job: Any) -> None:
        """Make the Job the Service's owner, so deleting the Job (its TTL) takes it along."""
        uid = get_field(job, "metadata", "uid")
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
        """Delete the Job (with its pods), the Service and the NetworkPolicy, and start
        nothing more (no further attempt). Idempotent and thread-safe."""
        self._stopping.set()
        self.delete()

    def delete(self) -> None:
        """Delete the Job (with its pods), the Service and the NetworkPolicy of this attempt.
        Idempotent and thread-safe."""
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
            "policy": lambda: self._networking.delete_namespaced_network_policy(
                self.names.job, namespace
            ),
        }
        for kind in reversed(list(self._created)):
            try:
                calls[kind]()
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    self.sink(
                        f"[kubernetes] could not delete {kind} {namespace}/{self.names.job} "
                        f"({exc}); delete it with: kubectl -n {namespace} delete "
                        f"{'networkpolicy' if kind == 'policy' else kind} {self.names.job}"
                    )
                    continue
            self._created.remove(kind)
