"""The cluster manifests in deploy/kubernetes/: a Kustomize base and its overlays, valid
against the official schemas, and consistent with what the Kubernetes launcher expects
and calls. The base's files are read as they are; the base and every overlay are also
rendered with ``kubectl kustomize`` (skipped, saying why, where kubectl is missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from operators.kubernetes import API_CALLS, KubernetesSettings
from operators.kubernetes.constants import CHECK_CALLS, CLUSTER_READS
from operators.kubernetes.settings import SETTINGS
from scalebench.network import parse_profile

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
BASE = DEPLOY / "base"
KUSTOMIZATIONS = ("base", "overlays/gpu", "overlays/kueue")
K8S_VERSION = "1.33"
# Kueue's own kinds: their CRDs ship with Kueue and the official Kubernetes schemas
# (kubernetes-validate) have none of them, so they are checked by shape here instead.
KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "LocalQueue"}


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(BASE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        with path.open(encoding="utf-8") as stream:
            found += [(path.name, doc) for doc in yaml.safe_load_all(stream) if doc]
    return found


def kustomize(directory: str) -> list[dict]:
    """``kubectl kustomize deploy/kubernetes/<directory>``, as documents."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl is not installed (Debian: apt-get install kubernetes-client; "
            "scripts/test.sh installs it): the Kustomize renderings cannot be checked"
        )
    done = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


DOCUMENTS = documents()


def the(kind: str, name: str) -> dict:
    (doc,) = [d for _, d in DOCUMENTS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_there_is_something_to_check() -> None:
    kinds = sorted(doc["kind"] for _, doc in DOCUMENTS)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Namespace",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "ServiceAccount",
    ]


@pytest.mark.parametrize(
    "doc", [d for _, d in DOCUMENTS], ids=[f"{f}:{d['kind']}" for f, d in DOCUMENTS]
)
def test_every_document_passes_the_official_schema(doc: dict) -> None:
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_everything_lives_in_the_launchers_namespace() -> None:
    namespace = KubernetesSettings().namespace
    assert the("Namespace", namespace)
    for _, doc in DOCUMENTS:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]


def test_the_base_kustomization_lists_every_file_of_the_base() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    files = sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert kustomization["resources"] == files
    assert "namespace" not in kustomization  # it would put Kueue's ClusterQueue in one


def test_role_grants_exactly_the_calls_the_launcher_makes() -> None:
    rules = the("Role", "scalebench-launcher")["rules"]
    granted = [
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    assert sorted(granted) == sorted(set(API_CALLS.values()) | set(CHECK_CALLS.values()))
    assert ("networking.k8s.io", "networkpolicies", "create") in granted
    assert ("networking.k8s.io", "networkpolicies", "delete") in granted


def test_the_cluster_role_grants_exactly_the_reads_before_a_sweep() -> None:
    """The cluster-wide reads of ``scalebench cluster check`` and of validate, and only they;
    bound to the launcher's service account."""
    rules = the("ClusterRole", "scalebench-cluster-reader")["rules"]
    granted = [
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    assert sorted(granted) == sorted(CLUSTER_READS.values())
    binding = the("ClusterRoleBinding", "scalebench-cluster-reader")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "scalebench-airflow", "namespace": "scalebench"}
    ]


def test_the_data_claim_is_in_the_base_and_the_example_settings_name_it() -> None:
    data = the("PersistentVolumeClaim", "scalebench-data")
    assert data["spec"]["accessModes"] == ["ReadWriteMany"]
    settings = the("ConfigMap", "scalebench-launcher")["data"]
    assert settings["SCALEBENCH_K8S_DATA_CLAIM"] == "scalebench-data"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_each_kustomization_renders_and_passes_the_official_schemas(directory: str) -> None:
    rendered = kustomize(directory)
    kinds = sorted(doc["kind"] for doc in rendered)
    assert kinds.count("Namespace") == 1 and "NetworkPolicy" in kinds
    for doc in rendered:
        if doc["kind"] in KUEUE_KINDS:
            assert doc["apiVersion"] == "kueue.x-k8s.io/v1beta1", doc
            continue
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
    base = {(d["kind"], d["metadata"]["name"]) for d in kustomize("base")}
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in rendered}


def rendered_settings(directory: str) -> KubernetesSettings:
    (config,) = [d for d in kustomize(directory) if d["kind"] == "ConfigMap"]
    return KubernetesSettings.from_env(config["data"])


def test_the_gpu_overlay_sets_the_runtime_class_tolerations_and_selector() -> None:
    settings = rendered_settings("overlays/gpu")
    assert settings.runtime_class == "nvidia"
    assert settings.tolerations[0]["key"] == "nvidia.com/gpu"
    assert settings.node_selector == {"nvidia.com/gpu.present": "true"}
    assert rendered_settings("base").runtime_class == ""


def test_the_kueue_overlay_queues_the_jobs_in_its_local_queue() -> None:
    rendered = kustomize("overlays/kueue")
    by_kind = {d["kind"]: d for d in rendered}
    settings = rendered_settings("overlays/kueue")
    local = by_kind["LocalQueue"]
    assert settings.queue_name == local["metadata"]["name"]
    assert local["metadata"]["namespace"] == settings.namespace
    cluster = by_kind["ClusterQueue"]
    assert local["spec"]["clusterQueue"] == cluster["metadata"]["name"]
    assert "namespace" not in cluster["metadata"]  # cluster-scoped
    assert "namespace" not in by_kind["ResourceFlavor"]["metadata"]
    (group,) = cluster["spec"]["resourceGroups"]
    assert {f["name"] for f in group["flavors"]} == {by_kind["ResourceFlavor"]["metadata"]["name"]}
    assert "nvidia.com/gpu" in group["coveredResources"]
    assert settings.runtime_class == "nvidia"  # built on the gpu overlay


def test_role_is_bound_to_the_airflow_service_account() -> None:
    binding = the("RoleBinding", "scalebench-launcher")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "scalebench-launcher",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "scalebench-airflow", "namespace": "scalebench"}
    ]
    assert the("ServiceAccount", "scalebench-airflow")


def test_worker_service_account_has_no_token_and_no_role() -> None:
    worker = the("ServiceAccount", KubernetesSettings().service_account)
    assert worker["automountServiceAccountToken"] is False
    for _, doc in DOCUMENTS:
        if doc["kind"] == "RoleBinding":
            assert all(s["name"] != worker["metadata"]["name"] for s in doc["subjects"])


def test_results_claim_is_shared_read_write_many() -> None:
    claim = the("PersistentVolumeClaim", KubernetesSettings().results_claim)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_example_launcher_environment_is_valid_settings() -> None:
    env = the("ConfigMap", "scalebench-launcher")["data"]
    assert all(name.startswith("SCALEBENCH_") for name in env)
    settings = KubernetesSettings.from_env(env)
    assert settings.qos == "Guaranteed" and settings.env_passthrough == ("NCCL_*",)
    # Every variable the launcher reads is shown in the example, and no other.
    assert set(env) == {setting.variable for setting in SETTINGS.values()}


def rendered_pod(settings: KubernetesSettings | None = None) -> dict:
    from operators.kubernetes.manifests import job_manifest
    from operators.kubernetes.names import group_names

    names = group_names("task1a_resnet20_cifar10", "manual__2026-11-23", 0, 1, 2)
    job = job_manifest(
        names, ["--results", "/x"], 2, settings or KubernetesSettings(), run_id="r-w2-r1"
    )
    return job["spec"]["template"]


def test_the_namespace_enforces_the_restricted_pod_security_standard() -> None:
    labels = the("Namespace", KubernetesSettings().namespace)["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_worker_pods_meet_the_restricted_standard_and_write_only_where_needed() -> None:
    pod = rendered_pod()["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]} and context["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/scalebench/results", "/dev/shm", "/tmp"}
    kinds = {v["name"]: set(v) - {"name"} for v in pod["volumes"]}
    assert kinds["tmp"] == {"emptyDir"} and kinds["dshm"] == {"emptyDir"}
    home = {e["name"]: e.get("value") for e in container["env"]}["HOME"]
    assert home.startswith("/tmp")  # caches land on a writable mount


def test_the_mlperf_settings_that_are_set_reach_the_worker_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCALEBENCH_MLPERF_ORG", "Example Lab")
    monkeypatch.setenv("SCALEBENCH_MLPERF_DIVISION", "")  # empty: unset, the rank's default
    monkeypatch.delenv("SCALEBENCH_MLPERF_PLATFORM", raising=False)
    (container,) = rendered_pod()["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SCALEBENCH_MLPERF_ORG"] == "Example Lab"
    assert "SCALEBENCH_MLPERF_DIVISION" not in env and "SCALEBENCH_MLPERF_PLATFORM" not in env


def test_worker_pods_get_the_cpu_and_memory_of_the_settings() -> None:
    settings = KubernetesSettings.from_env(
        {
            "SCALEBENCH_K8S_QOS": "Burstable",
            "SCALEBENCH_K8S_CPU_REQUEST": "500m",
            "SCALEBENCH_K8S_CPU_LIMIT": "2",
            "SCALEBENCH_K8S_MEMORY_REQUEST": "1Gi",
            "SCALEBENCH_K8S_MEMORY_LIMIT": "1536Mi",
        }
    )
    (container,) = rendered_pod(settings)["spec"]["containers"]
    assert container["resources"]["requests"] == {
        "cpu": "500m",
        "memory": "1Gi",
        "nvidia.com/gpu": 1,
    }
    assert container["resources"]["limits"]["cpu"] == "2"
    assert container["resources"]["limits"]["memory"] == "1536Mi"
    defaults = rendered_pod()["spec"]["containers"][0]["resources"]
    assert defaults["requests"]["cpu"] == "3"  # the task text: 3 CPUs per pod
    for variable, value in (
        ("SCALEBENCH_K8S_MEMORY_LIMIT", "1Gi"),  # below the request
        ("SCALEBENCH_K8S_CPU_REQUEST", "three"),
    ):
        with pytest.raises(ValueError, match=variable):
            KubernetesSettings.from_env({variable: value, "SCALEBENCH_K8S_QOS": "Burstable"})


def test_worker_pods_are_guaranteed_by_default_and_burstable_only_when_asked() -> None:
    (container,) = rendered_pod()["spec"]["containers"]
    assert container["resources"]["requests"] == container["resources"]["limits"]
    from operators.kubernetes.manifests import job_manifest
    from operators.kubernetes.names import group_names

    names = group_names("task1a_resnet20_cifar10", "manual__2026-11-23", 0, 1, 2)
    gpu = job_manifest(names, ["--results", "/x"], 2, KubernetesSettings(), gpus_per_worker=2)
    resources = gpu["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 2
    assert resources["requests"] == resources["limits"]
    # A limit above the request leaves the Guaranteed class: refused unless asked for.
    with pytest.raises(ValueError, match=r"SCALEBENCH_K8S_CPU_LIMIT=.*Guaranteed"):
        KubernetesSettings.from_env({"SCALEBENCH_K8S_CPU_LIMIT": "4"})
    burstable = KubernetesSettings.from_env(
        {"SCALEBENCH_K8S_QOS": "Burstable", "SCALEBENCH_K8S_CPU_LIMIT": "4"}
    )
    (container,) = rendered_pod(burstable)["spec"]["containers"]
    assert container["resources"]["limits"]["cpu"] == "4"
    assert container["resources"]["requests"]["cpu"] == "3"


def test_the_namespace_default_denies_every_worker_pod_all_traffic() -> None:
    policy = the("NetworkPolicy", "scalebench-workers-default-deny")
    pod_labels = rendered_pod()["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]


def test_a_groups_policy_opens_only_its_own_pods_ports_and_dns() -> None:
    from operators.kubernetes.constants import EPHEMERAL_PORTS, MASTER_PORT
    from operators.kubernetes.manifests import job_manifest, network_policy_manifest
    from operators.kubernetes.names import group_names

    names = group_names("task1a_resnet20_cifar10", "manual__2026-11-23", 0, 1, 2)
    policy = network_policy_manifest(names, KubernetesSettings(), run_id="r-w2-r1")
    assert kubernetes_validate.validate(policy, K8S_VERSION, strict=True) == K8S_VERSION
    job = job_manifest(names, ["--results", "/x"], 2, KubernetesSettings())
    own = {"batch.kubernetes.io/job-name": names.job}
    assert policy["spec"]["podSelector"] == {"matchLabels": own}
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": own}}]
    ports = [(p["protocol"], p["port"], p.get("endPort")) for p in ingress["ports"]]
    assert ports == [("TCP", MASTER_PORT, None), ("TCP", *EPHEMERAL_PORTS)]
    peers, dns = policy["spec"]["egress"]
    assert peers == {"to": ingress["from"], "ports": ingress["ports"]}
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    # The pods' ephemeral ports, where NCCL's and gloo's sockets listen, are the ones opened.
    (sysctl,) = job["spec"]["template"]["spec"]["securityContext"]["sysctls"]
    assert sysctl == {
        "name": "net.ipv4.ip_local_port_range",
        "value": f"{EPHEMERAL_PORTS[0]} {EPHEMERAL_PORTS[1]}",
    }


def test_spread_keeps_the_groups_pods_on_different_nodes_and_pack_lets_them_share() -> None:
    from operators.kubernetes.manifests import job_manifest
    from operators.kubernetes.names import group_names

    names = group_names("task1a_resnet20_cifar10", "manual__2026-11-23", 0, 1, 4)
    spread = job_manifest(names, ["--results", "/x"], 4, KubernetesSettings())
    (term,) = spread["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {"batch.kubernetes.io/job-name": names.job}
    assert kubernetes_validate.validate(spread, K8S_VERSION, strict=True) == K8S_VERSION
    pack = job_manifest(names, ["--results", "/x"], 4, KubernetesSettings(), placement="pack")
    assert "affinity" not in pack["spec"]["template"]["spec"]


def test_a_shaped_network_asks_the_bandwidth_plugin_for_its_rate_both_ways() -> None:
    from operators.kubernetes.manifests import bandwidth_quantity, job_manifest
    from operators.kubernetes.names import group_names

    names = group_names("task0_allreduce", "manual__2026-11-24", 0, 1, 2)
    shaped = job_manifest(
        names, ["--results", "/x"], 2, KubernetesSettings(), network=parse_profile("100mbit")
    )
    assert shaped["spec"]["template"]["metadata"]["annotations"] == {
        "kubernetes.io/ingress-bandwidth": "100M",
        "kubernetes.io/egress-bandwidth": "100M",
    }
    assert kubernetes_validate.validate(shaped, K8S_VERSION, strict=True) == K8S_VERSION
    host = job_manifest(names, ["--results", "/x"], 2, KubernetesSettings())
    assert "annotations" not in host["spec"]["template"]["metadata"]
    assert [bandwidth_quantity(b) for b in (10**10, 2_500_000, 250_000, 1500)] == [
        "10G",
        "2500k",
        "250k",
        "1500",
    ]
    with pytest.raises(ValueError, match="cannot add delay"):
        job_manifest(
            names, ["--results", "/x"], 2, KubernetesSettings(), network=parse_profile("1gbit+2ms")
        )
