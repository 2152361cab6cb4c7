"""The cluster manifests in deploy/kubernetes/: valid against the official schemas,
and consistent with what the Kubernetes launcher expects and calls."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from operators.kubernetes import API_CALLS, KubernetesSettings
from scalebench.network import parse_profile

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
K8S_VERSION = "1.33"


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        with path.open(encoding="utf-8") as stream:
            found += [(path.name, doc) for doc in yaml.safe_load_all(stream) if doc]
    return found


DOCUMENTS = documents()


def the(kind: str, name: str) -> dict:
    (doc,) = [d for _, d in DOCUMENTS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_there_is_something_to_check() -> None:
    kinds = sorted(doc["kind"] for _, doc in DOCUMENTS)
    assert kinds == [
        "ConfigMap",
        "Namespace",
        "NetworkPolicy",
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
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]


def test_files_apply_in_order_namespace_first() -> None:
    """``kubectl apply -f deploy/kubernetes/`` takes the files in name order."""
    first_file, first = DOCUMENTS[0]
    assert first["kind"] == "Namespace", first_file


def test_role_grants_every_call_the_launcher_makes() -> None:
    rules = the("Role", "scalebench-launcher")["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    missing = {method: need for method, need in API_CALLS.items() if need not in granted}
    assert not missing
    # What a person needs to see why a group did not start.
    assert {("", "events", "list"), ("", "pods", "watch"), ("batch", "jobs", "list")} <= granted
    assert all("*" not in rule["verbs"] and "*" not in rule["resources"] for rule in rules)


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
    assert settings.tolerations[0]["key"] == "nvidia.com/gpu"
    assert settings.node_selector
    # Every variable the launcher reads is shown in the example.
    defaults = KubernetesSettings.from_env({})
    assert len(env) == len(defaults.__dataclass_fields__)


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
            "SCALEBENCH_K8S_CPU_REQUEST": "500m",
            "SCALEBENCH_K8S_CPU_LIMIT": "2",
            "SCALEBENCH_K8S_MEMORY_REQUEST": "1Gi",
            "SCALEBENCH_K8S_MEMORY_LIMIT": "1536Mi",
        }
    )
    (container,) = rendered_pod(settings)["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert container["resources"]["limits"]["cpu"] == "2"
    assert container["resources"]["limits"]["memory"] == "1536Mi"
    defaults = rendered_pod()["spec"]["containers"][0]["resources"]
    assert defaults["requests"]["cpu"] == "3"  # the task text: 3 CPUs per pod
    for variable, value in (
        ("SCALEBENCH_K8S_MEMORY_LIMIT", "1Gi"),  # below the request
        ("SCALEBENCH_K8S_CPU_REQUEST", "three"),
    ):
        with pytest.raises(ValueError, match=variable):
            KubernetesSettings.from_env({variable: value})


def test_the_network_policy_isolates_exactly_the_pods_the_launcher_renders() -> None:
    policy = the("NetworkPolicy", "scalebench-workers")
    pod_labels = rendered_pod()["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= pod_labels.items()
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == [{"podSelector": {"matchLabels": selected}}]
    peers, dns = policy["spec"]["egress"]
    assert peers["to"] == [{"podSelector": {"matchLabels": selected}}] and "ports" not in peers
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert dns["to"][0]["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}


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
