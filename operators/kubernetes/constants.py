"""What the modules of :mod:`operators.kubernetes` share: where the pods mount the
results and data volumes (``/var/scalebench/results``, ``/var/scalebench/data``),
the rendezvous port, the worker container's name and user, the labels and
annotations that tie a Job to its pods and to a run, the limits on names, waits
and API errors, and :data:`API_CALLS`, every call the launcher makes as RBAC sees
it, with :data:`CHECK_CALLS` and :data:`CLUSTER_READS`, what it reads of the cluster
before a sweep (``deploy/kubernetes/base/10-rbac.yaml`` grants exactly these).
"""

RESULTS_MOUNT = "/var/scalebench/results"
DATA_MOUNT = "/var/scalebench/data"
MASTER_PORT = 29500
# The ports a rank's collectives listen on: NCCL's and gloo's sockets bind to port 0, so
# the kernel picks them from the pod's ip_local_port_range, which the pods set to this
# (Linux's default range, stated so the group's NetworkPolicy can name it).
EPHEMERAL_PORTS = (32768, 60999)
CONTAINER = "worker"
WORKER_UID = 1000
TMP_SIZE = "4Gi"  # the pod's /tmp (an emptyDir: the root filesystem is read-only)
# Caches that torch and friends write under $HOME by default, pointed at /tmp.
WRITABLE_HOMES = {
    "HOME": "/tmp",
    "XDG_CACHE_HOME": "/tmp/.cache",
    "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor",
    "MPLCONFIGDIR": "/tmp/mpl",
}

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # one value per node
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # annotation (and label since 1.28)
RUN_ID_LABEL = "scalebench.io/run-id"
GROUP_LABEL = "scalebench.io/group"  # a group's lone pod (no Job), for its NetworkPolicy
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue admits a suspended Job of this LocalQueue
DISRUPTION_CONDITION = "DisruptionTarget"  # a pod preempted, evicted or drained (since 1.26)
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
# resource, verb). deploy/kubernetes/base/10-rbac.yaml grants exactly these.
API_CALLS = {
    "create_namespaced_service": ("", "services", "create"),
    "patch_namespaced_service": ("", "services", "patch"),
    "delete_namespaced_service": ("", "services", "delete"),
    "create_namespaced_job": ("batch", "jobs", "create"),
    "read_namespaced_job": ("batch", "jobs", "get"),
    "delete_namespaced_job": ("batch", "jobs", "delete"),
    "create_namespaced_network_policy": ("networking.k8s.io", "networkpolicies", "create"),
    "delete_namespaced_network_policy": ("networking.k8s.io", "networkpolicies", "delete"),
    "list_namespaced_pod": ("", "pods", "list"),
    "read_namespaced_pod_log": ("", "pods/log", "get"),
    # A group on one node is one pod, which the provider's KubernetesPodOperator creates,
    # reads, labels as checked, and deletes; it reads the pod's events when it fails, and,
    # waiting from the triggerer, watches them while the pod starts (a Role without the
    # watch makes the provider fall back to polling, with a warning in every task's log).
    "create_namespaced_pod": ("", "pods", "create"),
    "read_namespaced_pod": ("", "pods", "get"),
    "patch_namespaced_pod": ("", "pods", "patch"),
    "delete_namespaced_pod": ("", "pods", "delete"),
    "list_namespaced_event": ("", "events", "list"),
    "list_namespaced_event(watch=True)": ("", "events", "watch"),
}

# What the launcher reads before a sweep (operators/kubernetes/cluster.py), beyond the calls
# above: in its namespace (the Role grants them too) ...
CHECK_CALLS = {
    "read_namespaced_persistent_volume_claim": ("", "persistentvolumeclaims", "get"),
    "get_namespaced_custom_object": ("kueue.x-k8s.io", "localqueues", "get"),
}
# ... and cluster-wide (the ClusterRole scalebench-cluster-reader grants them).
CLUSTER_READS = {
    "list_node": ("", "nodes", "list"),
    "read_namespace": ("", "namespaces", "get"),
    "list_storage_class": ("storage.k8s.io", "storageclasses", "list"),
    "read_custom_resource_definition": ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
}
