"""A full data set on Kubernetes is prepared in the data claim by a pod, never on the Airflow
worker: the data pod's manifest (official schemas), the pod run through the API (the command
line's way) and through the provider's KubernetesPodOperator in a real DAG's validate task,
against the API emulator, and the worker-side entry it runs."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
from kube_emulator import PODS, Stage, emulated_cluster, exited

from cli import main as cli
from operators.kubernetes.cluster import ClusterApis
from operators.kubernetes.data_pod import (
    DataPodFailed,
    data_pod_manifest,
    prepare_with_api,
)
from operators.kubernetes.settings import KubernetesSettings
from workers.data.__main__ import main as data_main

MISSING = (
    "workers.data: cifar10: CIFAR-10 is not in /var/scalebench/data/cifar-10-batches-py "
    "(missing: data_batch_1). Run `scalebench data cifar10 --download`"
)
SETTINGS = KubernetesSettings(data_claim="scalebench-data", poll_interval_s=0.1)


def test_the_data_pod_mounts_the_claim_read_write_and_passes_the_official_schemas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCALEBENCH_DATA_MIRRORS", "statmt=https://mirror.example/statmt")
    monkeypatch.delenv("SCALEBENCH_CIFAR10_URL", raising=False)
    pod = data_pod_manifest(SETTINGS, "scalebench-data-cifar10-abc123", "cifar10", True)
    assert kubernetes_validate.validate(pod, "1.33", strict=True) == "1.33"
    (container,) = pod["spec"]["containers"]
    assert container["command"][-3:] == ["--data-dir", "/var/scalebench/data", "--download"]
    assert container["command"][:3] == ["python", "-m", "workers.data"]
    assert {"name": "data", "mountPath": "/var/scalebench/data"} in container["volumeMounts"]
    # the pod downloads from the mirrors the Airflow side was given
    mirrors = [e for e in container["env"] if e["name"].startswith("SCALEBENCH_")]
    assert mirrors == [
        {"name": "SCALEBENCH_DATA_MIRRORS", "value": "statmt=https://mirror.example/statmt"}
    ]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "scalebench-data"}
    # Not a worker: the workers' default-deny policy does not keep it from a download.
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "scalebench-data"
    with pytest.raises(DataPodFailed, match="SCALEBENCH_K8S_DATA_CLAIM"):
        data_pod_manifest(KubernetesSettings(), "p", "cifar10", False)


def test_the_worker_side_entry_says_one_line_and_exits_one_when_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert data_main(["cifar10", "--data-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    [said] = err.splitlines()
    assert said.startswith("workers.data: cifar10: CIFAR-10 is not in ") and out == ""
    assert data_main(["nothing", "--data-dir", str(tmp_path)]) == 2


def _ran(stage: Stage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """The data pod through the API, playing ``stage``: what it said (or its failure) and the
    pods left."""
    with emulated_cluster([stage], tmp_path, monkeypatch) as cluster:
        apis = ClusterApis.connect(SETTINGS, str(tmp_path / "kube-config"))
        try:
            said = prepare_with_api(apis.core, SETTINGS, "cifar10", False, sleep=lambda _: None)
        except DataPodFailed as exc:
            said = f"failed: {exc}"
        return said, cluster.objects(PODS)


def test_a_ready_set_is_said_and_the_pod_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready = "cifar10: verified, 178.0 MB at /var/scalebench/data/cifar-10-batches-py"
    said, left = _ran(Stage(0, exited(0), logs={0: ready + "\n"}), tmp_path, monkeypatch)
    assert said == ready and left == []


def test_a_missing_set_fails_with_the_pods_own_words_and_the_pod_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said, left = _ran(Stage(0, exited(1), logs={0: MISSING + "\n"}), tmp_path, monkeypatch)
    assert said == f"failed: {MISSING}" and left == []


def test_a_full_kubernetes_run_is_refused_before_any_group_when_the_set_is_not_on_the_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "volume"))
    monkeypatch.setenv("SCALEBENCH_K8S_DATA_CLAIM", "scalebench-data")
    monkeypatch.setenv("SCALEBENCH_K8S_POLL_S", "0.1")
    stages = [Stage(0, exited(1), logs={0: MISSING + "\n"})]
    with emulated_cluster(stages, tmp_path, monkeypatch, "kubernetes_default") as cluster:
        status = cli.main(
            [
                "run",
                "task1a-resnet20-cifar10",
                "--workers",
                "1",
                "--launcher",
                "kubernetes",
                "--no-download",
                "--no-ingest",
                "--results",
                str(tmp_path / "volume"),
            ]
        )
        posted = [path for method, path, _, _ in cluster.requests() if method == "POST"]
        left = cluster.objects(PODS)
    out, err = capsys.readouterr()
    assert status == 2 and left == [] and "Traceback" not in out + err
    assert err.startswith(f"scalebench: error: data_dir: {MISSING}"), err
    assert "Or ask for the download (--download)." in err
    assert not [path for path in posted if "/jobs" in path or "networkpolicies" in path]
    assert not (tmp_path / "volume").exists() or not any((tmp_path / "volume").iterdir())
