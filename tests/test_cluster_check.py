"""``scalebench cluster check`` and the cluster a sweep is fitted to: the command, through
the provider's hook and the official client, against the API emulator (tests/kube_emulator.py)
stocked with nodes with and without GPUs, access reviews that allow and deny, claims bound and
not, Kueue there and not; the fit and the ``auto`` defaults as pure functions; and every
manifest the check renders, checked against the official schemas."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kube_emulator import (
    PODS,
    EmulatedCluster,
    Inventory,
    Stage,
    claim,
    exited,
    gpu_node,
    waiting,
)

from cli.main import main
from operators.kubernetes.cluster import (
    FAIL,
    WARN,
    ClusterApis,
    ClusterUnreachable,
    check_cluster,
    config_file_problem,
    nodes_for_pods,
    pull_check_manifest,
    tolerated,
    unanswered_reason,
)
from operators.kubernetes.manifests import capabilities
from operators.kubernetes.settings import KubernetesSettings
from scalebench.cluster_fit import ClusterNode, ClusterNodes, auto_ranks_per_node, fit_problem
from scalebench.request_fields import InvalidParameter
from scalebench.sweep import validate_request

K8S_VERSION = "1.33"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TASK = "task1a-resnet20-cifar10"


@dataclass
class Seen:
    """What a check left: its exit status, what it printed, and the cluster afterwards."""

    status: int
    out: str
    err: str
    pods_left: list[str]
    requests: list[tuple[str, str, dict[str, str], Any]]
    reviews: list[dict[str, Any]]


def run_check(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    inventory: Inventory | None = None,
    stages: list[Stage] | None = None,
    *args: str,
    env: dict[str, str] | None = None,
) -> Seen:
    """``scalebench cluster check`` against a cluster holding ``inventory``, its lone pods
    (the image check's) playing ``stages``, with the settings ``env`` (and no other)."""
    for key in list(os.environ):
        if key.startswith("SCALEBENCH_K8S_"):
            monkeypatch.delenv(key)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    with EmulatedCluster(stages or [Stage(0, exited(0))], inventory=inventory) as cluster:
        config = cluster.kube_config(tmp_path / "kube-config")
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", cluster.connection_uri(config))
        status = main(["cluster", "check", *args])
        out, err = capsys.readouterr()
        return Seen(status, out, err, cluster.objects(PODS), cluster.requests(), cluster.reviews)


def lines_of(out: str, check: str) -> list[str]:
    return [line for line in out.splitlines() if line[6:].startswith(check)]


DATA = {"SCALEBENCH_K8S_DATA_CLAIM": "scalebench-data"}


# -- the command against the emulator ---------------------------------------------------------


def test_a_ready_cluster_passes_every_look_and_the_image_pod_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(
        nodes=[gpu_node(f"h100-{i}", 8, extra={"rdma/ib": "4"}) for i in range(4)],
        namespace_labels={"pod-security.kubernetes.io/enforce": "privileged"},
        kueue=True,
        local_queues=("team-a",),
    )
    env = {
        **DATA,
        "SCALEBENCH_K8S_RDMA_RESOURCE": "rdma/ib",
        "SCALEBENCH_K8S_QUEUE_NAME": "team-a",
    }
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, env=env)
    assert seen.status == 0, seen.out + seen.err
    assert not [line for line in seen.out.splitlines() if line.startswith((WARN, FAIL))]
    assert "4 × 8 GPUs (NVIDIA-H100-80GB-HBM3)" in seen.out and "ranks_per_node auto: 8" in seen.out
    assert "rdma/ib on all 4 GPU node(s)" in seen.out
    assert "LocalQueue team-a" in seen.out and "the data claim scalebench-data: Bound" in seen.out
    assert "pulled and ran on" in seen.out and "no check failed" in seen.out
    assert seen.pods_left == []  # the image check's pod was deleted
    # Every call the launcher makes was asked of the API, as this identity.
    asked = {
        (r["spec"]["resourceAttributes"]["verb"], r["spec"]["resourceAttributes"]["resource"])
        for r in seen.reviews
    }
    assert {("create", "jobs"), ("list", "nodes"), ("get", "persistentvolumeclaims")} <= asked


def test_a_denied_verb_fails_the_check_naming_it_and_the_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(denied=frozenset({"create jobs", "get pods/log"}))
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status != 0
    [line] = lines_of(seen.out, "access")
    assert line.startswith(FAIL) and "create jobs" in line and "get pods/log" in line
    assert "Role scalebench-launcher" in seen.out and "1 check(s) failed" in seen.out


def test_cluster_wide_reads_denied_warn_and_nothing_is_fitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(denied=frozenset({"list nodes"}))
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status == 0, seen.out
    [line] = lines_of(seen.out, "access")
    assert line.startswith(WARN) and "list nodes" in line and "ranks_per_node auto" in line


def test_gpu_nodes_the_pods_may_not_run_on_are_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(
        nodes=[gpu_node("cpu-0", 0), gpu_node("gpu-0", 8, taints=[GPU_TAINT])],
    )
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status != 0
    [line] = lines_of(seen.out, "gpu nodes")
    assert line.startswith(FAIL) and "advertises nvidia.com/gpu" in line
    assert "1 GPU node(s) exist but the pods may not run there" in seen.out
    assert "SCALEBENCH_K8S_TOLERATIONS" in seen.out
    # With the toleration, the tainted node is a GPU node the pods may use.
    env = {**DATA, "SCALEBENCH_K8S_TOLERATIONS": json.dumps([GPU_TOLERATION])}
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=env)
    assert seen.status == 0, seen.out
    assert "1 × 8 GPUs" in seen.out


def test_a_cluster_without_any_gpu_node_says_to_install_the_device_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(nodes=[gpu_node("cpu-0", 0), gpu_node("cpu-1", 0)])
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status != 0 and "NVIDIA device plugin" in seen.out


def test_claims_unbound_or_single_node_fail_and_a_missing_data_claim_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(
        claims=[
            claim("scalebench-results", bound=False),
            claim("scalebench-data", modes=("ReadWriteOnce",)),
        ]
    )
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status != 0
    storage = "\n".join(lines_of(seen.out, "storage"))
    assert "the results claim scalebench-results is Pending, not Bound" in storage
    assert "the data claim scalebench-data is bound ReadWriteOnce: one node only" in storage
    seen = run_check(tmp_path, monkeypatch, capsys, Inventory(), None)
    assert seen.status == 0, seen.out
    assert "no data claim (SCALEBENCH_K8S_DATA_CLAIM)" in seen.out


def test_a_queue_without_kueue_or_without_its_localqueue_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**DATA, "SCALEBENCH_K8S_QUEUE_NAME": "team-a"}
    seen = run_check(tmp_path, monkeypatch, capsys, Inventory(), None, env=env)
    assert seen.status != 0 and "Kueue's localqueues.kueue.x-k8s.io is not installed" in seen.out
    inventory = Inventory(kueue=True, local_queues=("team-b",))
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=env)
    assert seen.status != 0 and "no LocalQueue team-a in namespace scalebench" in seen.out


def test_an_image_that_cannot_be_pulled_fails_and_leaves_no_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stages = [Stage(0, waiting("ErrImagePull", "pull access denied for scalebench-worker"))]
    seen = run_check(tmp_path, monkeypatch, capsys, Inventory(), stages, env=DATA)
    assert seen.status != 0
    [line] = lines_of(seen.out, "image")
    assert line.startswith(FAIL) and "pull access denied" in line
    assert seen.pods_left == []
    # --no-pull-check starts no pod at all.
    seen = run_check(
        tmp_path, monkeypatch, capsys, Inventory(), stages, "--no-pull-check", env=DATA
    )
    assert seen.status == 0 and "not checked (--no-pull-check)" in seen.out
    assert not [r for r in seen.requests if r[0] == "POST" and r[1].endswith("/pods")]


def test_rdma_not_advertised_or_refused_by_pod_security_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**DATA, "SCALEBENCH_K8S_RDMA_RESOURCE": "rdma/ib"}
    inventory = Inventory(nodes=[gpu_node("a", 8, extra={"rdma/ib": "1"}), gpu_node("b", 8)])
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=env)
    assert seen.status != 0
    rdma = "\n".join(lines_of(seen.out, "rdma"))
    assert "rdma/ib (1 per pod) on 1 of 2 GPU node(s)" in rdma
    assert "enforces Pod Security 'restricted'" in rdma  # IPC_LOCK would be refused


def test_dns_pods_without_the_policies_labels_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = Inventory(dns_labels={"app": "coredns"})
    seen = run_check(tmp_path, monkeypatch, capsys, inventory, None, env=DATA)
    assert seen.status != 0
    [line] = lines_of(seen.out, "dns")
    assert line.startswith(FAIL) and "k8s-app=kube-dns" in line


# -- no cluster: one line, no traceback -------------------------------------------------------


@pytest.mark.parametrize("case", ["no kube config", "unreadable kube config", "no connection"])
def test_without_a_cluster_the_check_says_one_line_and_exits_non_zero(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    for key in list(os.environ):
        if key.startswith(("AIRFLOW_CONN_", "KUBECONFIG", "SCALEBENCH_K8S_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    if case == "no kube config":
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    elif case == "unreadable kube config":
        (tmp_path / "config").write_text("{not: [yaml")
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    else:
        monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "nowhere")
    assert main(["cluster", "check"]) != 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    [said] = err.splitlines()
    assert said.startswith("scalebench: error: cannot reach the cluster through"), said


def test_a_cluster_that_does_not_answer_is_one_line_from_the_command(tmp_path: Path) -> None:
    """The installed command, as a user runs it: a kube config whose server is not there."""
    config = EmulatedCluster([]).kube_config(tmp_path / "config")
    text = json.loads(config.read_text())
    text["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # nothing listens
    config.write_text(json.dumps(text))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "KUBE"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(config))
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "cluster", "check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    [said] = result.stderr.splitlines()
    assert "the API server at http://127.0.0.1:9 does not answer" in said


# -- the fit and auto, as pure functions ------------------------------------------------------


def nodes(*gpus: int) -> ClusterNodes:
    return ClusterNodes(tuple(ClusterNode(f"n{i}", g, "H100") for i, g in enumerate(gpus)))


def test_auto_ranks_per_node_is_the_gpus_most_nodes_have() -> None:
    assert auto_ranks_per_node(nodes(8, 8, 4), 1) == 8
    assert auto_ranks_per_node(nodes(8, 4), 1) == 8  # a tie: the larger
    assert auto_ranks_per_node(nodes(8, 8), 2) == 4
    assert auto_ranks_per_node(nodes(8, 8), 0) == 1  # CPU pods
    assert auto_ranks_per_node(nodes(0, 0), 1) == 1


def test_a_group_that_does_not_fit_is_refused_naming_the_numbers() -> None:
    assert fit_problem(nodes(8, 8), 16, 8, 1, "spread") == ""
    said = fit_problem(nodes(8, 8), 32, 8, 1, "spread")
    assert said.startswith("32 ranks need 4 nodes of 8 GPUs each (8 ranks × 1 GPU)")
    assert "the cluster has 2" in said and "at most 16 workers fit" in said
    assert "a node holds at most 8" in fit_problem(nodes(8, 8), 32, 16, 1, "spread")
    # pack: pods share nodes as their GPUs allow
    assert fit_problem(nodes(8, 8), 16, 4, 1, "pack") == ""
    assert "hold 4 such pods" in fit_problem(nodes(8, 8), 32, 4, 1, "pack")
    assert fit_problem(nodes(0), 4, 1, 0, "spread") == ""  # CPU pods are not fitted
    assert "advertises nvidia.com/gpu" in fit_problem(nodes(0), 4, 1, 1, "spread")


def test_validation_takes_auto_from_the_cluster_and_refuses_what_cannot_fit() -> None:
    cluster = nodes(8, 8)
    request = validate_request(
        task=TASK, light=True, workers="1,2,16", launcher="kubernetes", cluster=cluster
    )
    assert (request.backend, request.ranks_per_node, request.gpus_per_worker) == ("nccl", 8, 1)
    with pytest.raises(InvalidParameter, match=r"^workers: 32 ranks need 4 nodes of 8 GPUs"):
        validate_request(
            task=TASK, light=True, workers="1,32", launcher="kubernetes", cluster=cluster
        )
    # Without a reading of the cluster, and locally, auto is one rank per node.
    request = validate_request(task=TASK, light=True, workers="1,2", launcher="kubernetes")
    assert (request.backend, request.ranks_per_node) == ("nccl", 1)
    cpu_pods = validate_request(
        task=TASK, light=True, workers="1,2", launcher="kubernetes", gpus_per_worker=0
    )
    assert cpu_pods.backend == "gloo"
    local = validate_request(task=TASK, light=True, workers="1,2", gpus=0)
    assert (local.backend, local.ranks_per_node, local.gpus_per_worker) == ("gloo", 1, 0)
    with_gpus = validate_request(task=TASK, light=True, workers="1,2", device="cuda", gpus=2)
    assert with_gpus.backend == "nccl"
    too_few = validate_request(task=TASK, light=True, workers="1,4", device="cuda", gpus=2)
    assert too_few.backend == "gloo"  # cuda tensors over gloo: a GPU is shared


def test_tolerations_match_taints_as_the_scheduler_does() -> None:
    assert tolerated(GPU_TAINT, [GPU_TOLERATION])
    assert not tolerated(GPU_TAINT, [])
    assert tolerated({**GPU_TAINT, "effect": "PreferNoSchedule"}, [])
    assert tolerated(GPU_TAINT, [{"operator": "Exists"}])  # tolerates everything
    assert not tolerated(GPU_TAINT, [{"key": "nvidia.com/gpu", "value": "absent"}])
    assert tolerated(GPU_TAINT, [{"key": "nvidia.com/gpu", "value": "present"}])
    assert not tolerated(GPU_TAINT, [{**GPU_TOLERATION, "effect": "NoExecute"}])


def test_nodes_for_pods_keeps_the_selected_schedulable_tolerated_nodes() -> None:
    settings = KubernetesSettings(node_selector={"pool": "gpu"}, tolerations=(GPU_TOLERATION,))
    found = nodes_for_pods(
        [
            gpu_node("a", 8, labels={"pool": "gpu"}, taints=[GPU_TAINT]),
            gpu_node("b", 8, labels={"pool": "other"}),
            gpu_node("c", 8, labels={"pool": "gpu"}, unschedulable=True),
            gpu_node("d", 4, labels={"pool": "gpu"}, taints=[{"key": "x", "effect": "NoExecute"}]),
        ],
        settings,
    )
    assert [(n.name, n.gpus, n.gpu_product) for n in found.nodes] == [
        ("a", 8, "NVIDIA-H100-80GB-HBM3")
    ]
    assert found.selector == "nodes labelled pool=gpu"


# -- manifests --------------------------------------------------------------------------------


def test_the_image_check_pod_and_rdma_workers_pass_the_official_schemas() -> None:
    settings = KubernetesSettings(
        node_selector={"pool": "gpu"},
        tolerations=(GPU_TOLERATION,),
        runtime_class="nvidia",
        image_pull_credentials=("registry",),
        rdma_resource="rdma/ib",
        rdma_devices=2,
    )
    pod = pull_check_manifest(settings, "scalebench-image-check-abc123")
    assert kubernetes_validate.validate(pod, K8S_VERSION, strict=True) == K8S_VERSION
    assert settings.resources(1, ranks=8)["limits"]["rdma/ib"] == 2
    assert capabilities(settings) == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert capabilities(KubernetesSettings()) == {"drop": ["ALL"]}


def test_connect_without_any_configuration_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ClusterUnreachable, match=r"the kube config .*missing does not exist"):
        ClusterApis.connect(KubernetesSettings(), str(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "does not exist"),
        ("folder", "is a folder"),
        (b"", "is empty"),
        (b"\n  \n", "is empty"),
        (b"\x00\xff{{", "is not text (UTF-8)"),
        (b"clusters: [unclosed\n", "is not YAML at line 2"),
        (b"- a\n- b\n", "is not a kube config"),
        (b"just words\n", "is not a kube config"),
        (b"x" * (5 << 20), "is larger than 4 MiB"),
    ],
)
def test_a_file_that_cannot_be_a_kube_config_is_named_before_the_client_reads_it(
    tmp_path: Path, content: bytes | str | None, said: str
) -> None:
    path = tmp_path / "config"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    problem = config_file_problem(str(path))
    assert problem is not None and problem.startswith(said), problem
    with pytest.raises(
        ClusterUnreachable, match=re.escape(f"the kube config {path} {said}")
    ) as caught:
        ClusterApis.connect(KubernetesSettings(), str(path))
    assert "\n" not in str(caught.value)
    assert config_file_problem(str(EmulatedCluster([]).kube_config(tmp_path / "good"))) is None


def test_a_call_that_got_no_answer_says_why_in_a_few_words() -> None:
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    refused = NewConnectionError(
        "HTTPSConnection(host='10.0.0.1', port=6443)",
        "Failed to establish a new connection: [Errno 111] Connection refused",
    )
    given_up = MaxRetryError(None, "/api/v1/namespaces/scalebench", refused)  # type: ignore[arg-type]
    assert unanswered_reason(given_up) == (
        "Failed to establish a new connection: [Errno 111] Connection refused"
    )
    assert unanswered_reason(TimeoutError()) == "TimeoutError"
    long = unanswered_reason(OSError("x" * 500))
    assert len(long) == 160 and long.endswith("…")


def test_check_cluster_hears_each_line_as_it_is_found(tmp_path: Path) -> None:
    with EmulatedCluster([Stage(0, exited(0))]) as cluster:
        config = cluster.kube_config(tmp_path / "kube-config")
        heard: list[str] = []
        settings = KubernetesSettings()
        lines = check_cluster(
            ClusterApis.connect(settings, str(config)),
            settings,
            pull=False,
            say=lambda line: heard.append(line.check),
        )
    assert heard == [line.check for line in lines]
    assert heard[:2] == ["access", "gpu nodes"] and heard[-1] == "dns"


def test_a_server_that_is_no_kubernetes_api_is_named_so(tmp_path: Path) -> None:
    """A web server (a proxy's login page) where the API should be: one sentence, not a
    table of checks failed on pages that are no Kubernetes objects."""
    import http.server
    import threading

    class LoginPage(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the standard library names it so
            body = b"<html><body>log in first</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LoginPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = EmulatedCluster([]).kube_config(tmp_path / "config")
        text = json.loads(config.read_text())
        text["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{server.server_port}"
        config.write_text(json.dumps(text))
        with pytest.raises(ClusterUnreachable, match="answers, but not as a Kubernetes API"):
            settings = KubernetesSettings()
            check_cluster(ClusterApis.connect(settings, str(config)), settings, pull=False)
    finally:
        server.shutdown()


def test_a_kubeconfig_variable_naming_no_kube_config_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "huge").write_bytes(b"a: b\n" * (1 << 20))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'gone'}{os.pathsep}{tmp_path / 'huge'}")
    with pytest.raises(ClusterUnreachable, match=r"through KUBECONFIG: the file .*huge is larger"):
        ClusterApis.connect(KubernetesSettings())
