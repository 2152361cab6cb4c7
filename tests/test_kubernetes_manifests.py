"""The cluster manifests in deploy/kubernetes/: valid against the official schemas,
and consistent with what the Kubernetes launcher expects and calls."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from operators.kubernetes import API_CALLS, KubernetesSettings

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
