"""Start a training group as a Kubernetes Indexed Job (or, on one node, one pod of the
provider's ``KubernetesPodOperator``: :mod:`operators.kubernetes.pod_group`) and see it through.

One group of ``k`` workers is one **Indexed Job** (``k`` pods, completion
index = rank, no retries) plus one **headless Service** named by the pod
template's ``subdomain``, so that rank 0 answers at ``<job>-0.<service>``:
the rendezvous address every rank gets as ``MASTER_ADDR`` (port 29500).
Kubernetes sets ``JOB_COMPLETION_INDEX``, which ``workers.distributed`` reads
as the rank.

:class:`KubernetesGroup` has the interface of the local launcher
(``start`` / ``wait`` / ``stop``, a :class:`~operators.group.GroupResult`
verdict) and adds what the provider's ``KubernetesJobOperator`` lacks:

- a pod still ``Pending`` after ``SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S`` fails the
  group with the scheduler's own words (``0/3 nodes are available: 3
  Insufficient nvidia.com/gpu.``), and an image that cannot be pulled or a
  container that cannot be configured fails it at once;
- a failed rank is named with its exit code and termination reason, and ranks
  that all exit with status 3 make the verdict ``diverged``;
- the training task waits for the group from Airflow's triggerer
  (:class:`~operators.kubernetes.trigger.GroupTrigger`, holding no worker slot)
  or, with ``SCALEBENCH_K8S_DEFERRABLE=false``, in :meth:`KubernetesGroup.wait`;
  both apply the rules of :class:`~operators.kubernetes.watch.GroupWatch` and end
  in :meth:`KubernetesGroup.conclude` (log tail, clean-up);
- with a Kueue queue the Job is created suspended; the wait says so, counts the
  schedule timeout from the admission, and ends ``not_admitted`` after
  ``SCALEBENCH_K8S_ADMISSION_TIMEOUT_S``;
- a pod preempted, evicted or drained (``DisruptionTarget``; the Job's
  ``podFailurePolicy`` fails it at once) makes the verdict ``preempted``, with the
  node and the reason, and the group runs again up to
  ``SCALEBENCH_K8S_PREEMPTION_RETRIES`` times;
- each group has a NetworkPolicy of its own (its pods reach each other on the
  rendezvous and collectives' ports, and DNS), created and deleted with it;
- the Job, the Service and the NetworkPolicy are deleted when :meth:`KubernetesGroup.wait` ends,
  however it ends, and by :meth:`KubernetesGroup.stop` (Airflow's ``on_kill``).
  ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` on the Job, and
  the Service's owner reference to it, clean up after an Airflow worker that
  died without either.

| module         | what it holds                                                              |
|----------------|----------------------------------------------------------------------------|
| ``constants``  | mounts, port, labels, limits, and ``API_CALLS`` (what RBAC must grant)     |
| ``settings``   | ``KubernetesSettings``: the ``SCALEBENCH_K8S_*`` variables, checked        |
| ``names``      | ``GroupNames`` / ``group_names`` / ``attempt_names``; ``label_value``      |
| ``arguments``  | ``pod_argv`` / ``pod_path``: the pods' command line, on their mounts       |
| ``manifests``  | ``job_manifest``, ``service_manifest``, ``network_policy_manifest``        |
| ``pod_status`` | ``pod_rank``, ``pending_problem``, ``job_verdict``, ``qos_class``,         |
|                | ``image_digest`` (the image the kubelet resolved)                          |
| ``watch``      | ``GroupWatch``, ``Ending``, ``Rank0Follower``: looks, verdict, rank 0's log |
| ``objects``    | ``GroupObjects``: create and delete a group's Job, Service, NetworkPolicy  |
| ``group``      | ``KubernetesGroup``: start, follow (blocking), conclude one group          |
| ``trigger``    | ``GroupTrigger``: wait for a started group from Airflow's triggerer        |
| ``in_task``    | ``launch_in_task``: the launcher inside an Airflow task (pod or Job)       |
| ``pod_group``  | ``PodGroup``: a group on one node as one pod of the provider's             |
|                | ``KubernetesPodOperator`` (Airflow tasks only; imported when used)         |
"""

from operators.kubernetes.arguments import pod_argv, pod_path
from operators.kubernetes.constants import API_CALLS, DATA_MOUNT, RESULTS_MOUNT, WORKER_UID
from operators.kubernetes.group import KubernetesGroup, launch
from operators.kubernetes.manifests import (
    job_manifest,
    network_policy_manifest,
    service_manifest,
)
from operators.kubernetes.names import GroupNames, attempt_names, group_names, label_value
from operators.kubernetes.pod_status import job_verdict, pending_problem
from operators.kubernetes.settings import KubernetesSettings

__all__ = [
    "API_CALLS",
    "DATA_MOUNT",
    "RESULTS_MOUNT",
    "WORKER_UID",
    "GroupNames",
    "KubernetesGroup",
    "KubernetesSettings",
    "attempt_names",
    "group_names",
    "job_manifest",
    "job_verdict",
    "label_value",
    "launch",
    "network_policy_manifest",
    "pending_problem",
    "pod_argv",
    "pod_path",
    "service_manifest",
]
